"""WAV files made in tests: tones, and PCM a test already has."""

from __future__ import annotations

import io
import wave

import numpy as np


def pcm_wav(pcm: np.ndarray, rate: int, channels: int = 1) -> bytes:
    """A complete WAV file (real sizes in its header) around 16-bit samples (interleaved when several channels)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return out.getvalue()


def tone_wav(
    seconds: float, rate: int = 16_000, amplitude: float = 0.3, frequency: float = 220.0, channels: int = 1
) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    mono = (amplitude * np.sin(2 * np.pi * frequency * t) * 32767).astype("<i2")
    return pcm_wav(np.repeat(mono[:, None], channels, axis=1).reshape(-1), rate, channels)
