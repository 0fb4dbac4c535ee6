"""Reference audio for voice cloning, as callers send it: base64, a data URI or an https URL (fetched under the rules
of `app.audio.fetch`), decoded with FFmpeg (PyAV)."""

from __future__ import annotations

import base64
import binascii
import io
import re

import av
import numpy as np

from app.audio.fetch import MAX_REFERENCE_BYTES
from app.audio.transforms import resample
from app.engine_protocol import ReferenceAudio, UnsupportedParameter

MAX_CHANNELS = 8
REFERENCE_RATE = 24_000
REFERENCE_SECONDS = (1.0, 30.0)
# the rates recordings have: a header declaring 10 Hz makes a small file last hours, gigabytes once at 24 kHz
SOURCE_RATES = (8_000, 192_000)
SILENCE_RMS = 10 ** (-50 / 20)  # -50 dBFS
_DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*;base64,(?P<data>.*)", re.S)


def _reject(message: str) -> UnsupportedParameter:
    return UnsupportedParameter("ref_audio", message)


def _wrong_length(lasts: str) -> UnsupportedParameter:
    low, high = REFERENCE_SECONDS
    return _reject(f"ref_audio lasts {lasts}; a reference clip must last {low:g}–{high:g} s.")


def is_url(value: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value.strip()) is not None


def reference_bytes(value: str, max_bytes: int = MAX_REFERENCE_BYTES) -> bytes:
    text = value.strip()
    if is_url(text):
        raise _reject("ref_audio URLs are fetched separately; this function takes base64 or a data URI.")
    match = _DATA_URI.fullmatch(text)
    payload = match.group("data") if match else text
    # told by the text's length before it is decoded, and by the audio's bytes after: base64's four characters for
    # every three bytes (or fewer, padded) let a clip a few bytes over the limit pass the first
    if len(payload) > max_bytes * 4 // 3 + 4:
        raise _reject(f"ref_audio is larger than {max_bytes} bytes.")
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _reject("ref_audio is not valid base64.") from exc
    if not data:
        raise _reject("ref_audio is empty.")
    if len(data) > max_bytes:
        raise _reject(f"ref_audio is larger than {max_bytes} bytes.")
    return data


def prepare_reference_audio(value: str | bytes, max_bytes: int = MAX_REFERENCE_BYTES) -> ReferenceAudio:
    """Decoded, checked and normalised reference audio: mono, 24 kHz (what the Qwen3-TTS tokenizer reads; also halves
    a 48 kHz clip before it travels to the engine), 1–30 s long, not near-silent."""
    low, high = REFERENCE_SECONDS
    decoded = decode_reference_audio(value, max_bytes, max_seconds=high)
    samples = resample(decoded.samples, decoded.sample_rate, REFERENCE_RATE)
    seconds = len(samples) / REFERENCE_RATE
    if not low <= seconds <= high:
        raise _wrong_length(f"{seconds:.1f} s")
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    if rms < SILENCE_RMS:
        raise _reject("ref_audio is (nearly) silent; the voice to clone must be audible.")
    return ReferenceAudio(samples.astype(np.float32), REFERENCE_RATE)


def decode_reference_audio(
    value: str | bytes, max_bytes: int = MAX_REFERENCE_BYTES, max_seconds: float | None = None
) -> ReferenceAudio:
    """Decode (base64, a data URI, or bytes already fetched) to mono float32 at the file's own rate (the model
    resamples what it needs itself). A rate no recording has is refused before decoding, and with `max_seconds` a
    clip is refused as soon as more than that has decoded: a small compressed file may hold hours."""
    data = value if isinstance(value, bytes) else reference_bytes(value, max_bytes)
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.audio:
                raise _reject("ref_audio holds no audio stream.")
            stream = container.streams.audio[0]
            context = stream.codec_context
            channels = context.channels if context is not None else 0
            if not 1 <= channels <= MAX_CHANNELS:
                raise _reject(f"ref_audio must have 1 to {MAX_CHANNELS} channels.")
            # packed float with the channels kept, then averaged as vllm-omni averages them (FFmpeg's own down-mix
            # would scale by its pan law instead)
            rate = context.sample_rate
            if not SOURCE_RATES[0] <= rate <= SOURCE_RATES[1]:
                raise _reject(
                    f"ref_audio's sample rate is {rate} Hz; a recording's is "
                    f"{SOURCE_RATES[0] // 1000}–{SOURCE_RATES[1] // 1000} kHz."
                )
            limit = None if max_seconds is None else int(max_seconds * rate)
            resampler = av.AudioResampler(format="flt", layout=context.layout, rate=rate)
            parts, decoded = [], 0
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().reshape(-1, channels).mean(axis=1))
                    decoded += len(parts[-1])
                if limit is not None and decoded > limit:
                    raise _wrong_length(f"more than {max_seconds:g} s")
    except UnsupportedParameter:
        raise
    except (av.FFmpegError, ValueError, OSError, AttributeError, TypeError, RuntimeError) as exc:
        raise _reject("ref_audio could not be decoded as audio (wav, mp3, flac, ogg, opus, m4a or webm).") from exc
    samples = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    if not len(samples) or not rate:
        raise _reject("ref_audio decodes to no samples.")
    return ReferenceAudio(samples, int(rate))
