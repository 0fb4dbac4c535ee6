"""hibari's own alignment: how long each phoneme lasts, straight from its duration predictor.

hibari's ONNX graph predicts an integer length per phoneme (`/Cast_32_output_0`, the durations its length regulator
expands) but does not return it. Declaring that tensor as one more graph output costs nothing at run time and leaves
the audio bit-identical. The declaration is appended to the model's bytes: a protobuf message followed by more fields
of itself is the merge of both, so the appended `graph { output { name, type } }` adds one output and changes nothing
else (no ONNX tooling needed). The phoneme string is built token by token, as hibari's G2P builds it, so every
phoneme is known to belong to one word of the text its reader saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engines.embedded.reader import read_tokens
from app.engines.embedded.stop import Stop, SynthesisStopped
from app.text.words import SpokenWord

if TYPE_CHECKING:
    from hibari import Hibari

DURATIONS_OUTPUT = "/Cast_32_output_0"  # int64 [phonemes]: frames per phoneme id, pads included
_ONNX_INT64 = 7
_PAUSE_PHONEMES = frozenset(';:,.!?—…"“”()')  # punctuation the model renders as pauses, not as part of a word


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def _message_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def with_durations_output(model: bytes) -> bytes:
    """The ONNX model with its phoneme durations declared as an extra output (ModelProto.graph = 7,
    GraphProto.output = 12, ValueInfoProto name = 1 and type = 2, TypeProto.tensor_type = 1, elem_type = 1)."""
    tensor_type = _message_field(1, _int_field(1, _ONNX_INT64))
    value_info = _message_field(1, DURATIONS_OUTPUT.encode()) + _message_field(2, tensor_type)
    return model + _message_field(7, _message_field(12, value_info))


def load_session(model: Hibari, threads: int) -> Any:
    """An onnxruntime session of `model`'s network that also returns the phoneme durations."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.log_severity_level = 3
    with open(model.model_path, "rb") as f:
        patched = with_durations_output(f.read())
    session = ort.InferenceSession(patched, options, providers=["CPUExecutionProvider"])
    if DURATIONS_OUTPUT not in [output.name for output in session.get_outputs()]:
        raise RuntimeError("this hibari model does not expose its phoneme durations")
    return session


def synthesize_ids(
    session: Any, ids: list[int], speed: float, rng: np.random.Generator, stop: Stop
) -> tuple[np.ndarray, np.ndarray]:
    """hibari's `from_ids`, also returning each id's duration: (float32 wav, int64 durations in model frames).
    `SynthesisStopped` where `stop` is set before or during the network run (the vocoder is not begun)."""
    from hibari import dsp

    outputs = run_network(session, None, ids, speed, stop)
    spectra, durations = outputs[:6], outputs[6]
    stop.check()  # the vocoder costs about as much again as the network run, and cannot be stopped once begun
    return dsp.synth(*(o[0] for o in spectra), rng), np.asarray(durations).reshape(-1)


def frames_at(session: Any, ids: list[int], speed: float, stop: Stop) -> int:
    """How many model frames hibari gives `ids` at `speed` (its whole-frame durations summed). ONNX Runtime runs the
    whole network whatever output is asked for: a second synthesis's cost, paid only above FAST_SPEED."""
    (frames,) = run_network(session, [DURATIONS_OUTPUT], ids, speed, stop)
    return int(np.asarray(frames).sum())


def run_network(session: Any, outputs: list[str] | None, ids: list[int], speed: float, stop: Stop) -> list[Any]:
    """One run of hibari's network, which `stop` ends at its next node: `SynthesisStopped`, not onnxruntime's error."""
    stop.check()
    inputs = {"ids": np.asarray([ids], np.int64), "speed": np.asarray([speed], np.float32)}
    try:
        return session.run(outputs, inputs, stop.run_options)
    except Exception as exc:
        if stop.is_set:  # terminated by its flag (onnxruntime raises its generic Fail): stopped, not failed
            raise SynthesisStopped() from exc
        raise


@dataclass(frozen=True, slots=True)
class PhonemeWord:
    """A word as hibari's reader spelled it, and where its phonemes lie in the sentence's phoneme string."""

    text: str
    start: int  # character offsets into the phoneme string
    end: int


def phonemize(g2p: Any, text: str) -> tuple[str, list[PhonemeWord]]:
    """What `g2p(text)` returns (the same string, character for character, but for what `read_tokens` reads that it
    would not), and the words inside it.

    Tokens written together ("Hello," or "$9.99") form one word; punctuation is left out of the word's span, so a
    word ends where its sound does, not after the pause that follows it."""
    tokens = read_tokens(g2p, text)
    parts: list[str] = []
    words: list[PhonemeWord] = []
    length = 0
    word_text, span = "", (-1, -1)
    for token in tokens:
        phonemes = g2p.unk if token.phonemes is None else token.phonemes
        start, length = length, length + len(phonemes)
        parts.append(phonemes)
        word_text += token.text
        if any(c not in _PAUSE_PHONEMES and not c.isspace() for c in phonemes):
            span = (start if span[0] < 0 else span[0], length)
        if token.whitespace:
            parts.append(" ")
            length += 1
        if token.whitespace or token is tokens[-1]:
            if span[0] >= 0:
                words.append(PhonemeWord(word_text, *span))
            word_text, span = "", (-1, -1)
    joined = "".join(parts)
    lead = len(joined) - len(joined.lstrip())
    words = [PhonemeWord(w.text, w.start - lead, w.end - lead) for w in words]
    return joined.strip(), words


class PhonemeClock:
    """The time of every phoneme character of a sentence, filled in piece by piece as the pieces are synthesized."""

    def __init__(self, phonemes: str, vocab: dict[str, int]) -> None:
        self._phonemes = phonemes
        self._vocab = vocab
        self._cursor = 0
        self._offset = 0  # samples synthesized before the current piece
        self.start = np.full(len(phonemes), np.nan)  # in samples
        self.end = np.full(len(phonemes), np.nan)

    def add(self, piece: str, durations: np.ndarray, samples: int) -> None:
        """A synthesized piece of the phoneme string: its ids' durations (pads included) and its length in samples."""
        at = self._phonemes.find(piece, self._cursor)
        if at >= 0 and len(durations) and durations.sum() > 0:
            per_frame = samples / float(durations.sum())  # the vocoder's samples per duration unit
            bounds = np.concatenate([[0], np.cumsum(durations)]) * per_frame + self._offset
            index = 1  # id 0 is the leading pad
            for position, char in enumerate(piece, start=at):
                if char in self._vocab:
                    self.start[position], self.end[position] = bounds[index], bounds[index + 1]
                    index += 1
            self._cursor = at + len(piece)
        self._offset += samples

    def words(self, words: list[PhonemeWord], sample_rate: int, stretch: float) -> list[SpokenWord]:
        """The words' times in seconds; `stretch` is the time-stretch applied to the audio afterwards."""
        timed: list[SpokenWord] = []
        for word in words:
            starts, ends = self.start[word.start : word.end], self.end[word.start : word.end]
            if np.all(np.isnan(starts)):
                continue
            scale = stretch / sample_rate
            timed.append(SpokenWord(word.text, float(np.nanmin(starts)) * scale, float(np.nanmax(ends)) * scale))
        return timed
