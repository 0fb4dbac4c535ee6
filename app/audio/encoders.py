"""Incremental audio encoders: float32 chunks in, bytes of the response format out, as soon as they exist.

pcm and wav are written directly; mp3, opus (Ogg), aac (ADTS) and flac go through PyAV (FFmpeg inside the wheel).
Every `encode` returns whatever the muxer has produced so far, so a client hears the first sentence while later ones
are still being synthesized. Encoders are not thread-safe; one per response, used from one thread at a time.

A whole-file encoder (`create_encoder(..., whole_file=True)`, for `stream: false`) returns nothing until `finish`,
which returns the complete file with every header exact: WAV's RIFF and data sizes, FLAC's STREAMINFO with its sample
count and MD5 (FFmpeg rewrites it on an output it can seek), MP3's Xing frame count. A stream cannot carry them: its
header leaves before the length is known, which some readers (python-soundfile on FLAC) refuse.
"""

from __future__ import annotations

import io
import struct
from typing import Final, Protocol

import av
import numpy as np

ResponseFormat = str  # one of RESPONSE_FORMATS

RESPONSE_FORMATS: Final = ("mp3", "opus", "aac", "flac", "wav", "pcm")

CONTENT_TYPES: Final[dict[str, str]] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}

# Sample rates each codec can carry (pcm, wav and flac take any rate in the API's 8000–48000 range).
CODEC_SAMPLE_RATES: Final[dict[str, frozenset[int]]] = {
    "mp3": frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}),
    "opus": frozenset({8000, 12000, 16000, 24000, 48000}),
    "aac": frozenset({7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}),
}

# FFmpeg muxer and codec per format.
_PYAV_FORMATS: Final[dict[str, tuple[str, str]]] = {
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "aac": ("adts", "aac"),
    "flac": ("flac", "flac"),
}
# The Ogg muxer holds pages back for up to a second by default; 20 ms pages let each chunk out at once.
_MUXER_OPTIONS: Final[dict[str, dict[str, str]]] = {"opus": {"page_duration": "20000"}}
_BIT_RATES: Final[dict[str, int]] = {"mp3": 64_000, "opus": 32_000, "aac": 64_000}

# Formats written by a clip and a cast (about 20 us for 2 s of 24 kHz audio): cheaper done on the event loop than
# handed to a worker thread, whose hop alone costs the loop more than that.
INLINE_FORMATS: Final = frozenset({"pcm", "wav"})

WAV_HEADER_BYTES: Final = 44
_STREAMING_SIZE: Final = 0xFFFFFFFF


def supported_sample_rates(response_format: ResponseFormat) -> frozenset[int] | None:
    """The rates a format can carry, or None when any rate is fine."""
    return CODEC_SAMPLE_RATES.get(response_format)


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """float32 in [-1, 1] to signed 16-bit little-endian, clipping anything outside."""
    return np.rint(np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_stream_header(sample_rate: int, channels: int = 1, bits_per_sample: int = 16) -> bytes:
    """A 44-byte RIFF/WAVE header for a stream of unknown length: RIFF and data sizes are 0xFFFFFFFF, as OpenAI
    sends when streaming (most decoders then read until the end of the stream)."""
    return wav_header(sample_rate, None, channels, bits_per_sample)


def wav_header(sample_rate: int, data_bytes: int | None, channels: int = 1, bits_per_sample: int = 16) -> bytes:
    """A 44-byte RIFF/WAVE header; `data_bytes` None: a stream of unknown length (sizes 0xFFFFFFFF)."""
    block_align = channels * bits_per_sample // 8
    riff_size = _STREAMING_SIZE if data_bytes is None else 36 + data_bytes
    data_size = _STREAMING_SIZE if data_bytes is None else data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, bits_per_sample)
        + b"data"
        + struct.pack("<I", data_size)
    )


class StreamEncoder(Protocol):
    def encode(self, samples: np.ndarray) -> bytes: ...

    def finish(self) -> bytes: ...

    def close(self) -> None: ...


class PcmEncoder:
    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    def encode(self, samples: np.ndarray) -> bytes:
        return float_to_pcm16(samples)

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        pass


class WavEncoder(PcmEncoder):
    """The streaming WAV header goes out with the first chunk, so even an empty response is a valid WAV file."""

    def __init__(self, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self._header_sent = False

    def _header(self) -> bytes:
        if self._header_sent:
            return b""
        self._header_sent = True
        return wav_stream_header(self.sample_rate)

    def encode(self, samples: np.ndarray) -> bytes:
        return self._header() + float_to_pcm16(samples)

    def finish(self) -> bytes:
        return self._header()


class WholeWavEncoder(PcmEncoder):
    """A complete WAV file: the samples are kept until `finish`, which puts the exact sizes in the header."""

    def __init__(self, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self._pcm = bytearray()

    def encode(self, samples: np.ndarray) -> bytes:
        self._pcm += float_to_pcm16(samples)
        return b""

    def finish(self) -> bytes:
        data, self._pcm = bytes(self._pcm), bytearray()
        return wav_header(self.sample_rate, len(data)) + data


class _ByteSink:
    """A write-only file for FFmpeg's muxer. Without `seek` the muxer treats the output as a stream and never
    goes back to patch headers, which a chunked HTTP body could not honour anyway."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


class PyAvEncoder:
    """mp3 / Ogg Opus / ADTS AAC / FLAC through FFmpeg. PyAV re-frames input to the codec's frame size itself.

    `whole_file`: the muxer writes to a buffer it can seek, and goes back to complete the headers when it closes;
    nothing is returned before `finish`."""

    def __init__(self, response_format: ResponseFormat, sample_rate: int, whole_file: bool = False) -> None:
        container_format, codec = _PYAV_FORMATS[response_format]
        self.sample_rate = sample_rate
        self._sink: _ByteSink | None = None if whole_file else _ByteSink()
        self._file = io.BytesIO() if whole_file else None
        self._container = av.open(
            self._file if self._file is not None else self._sink,
            mode="w",
            format=container_format,
            options=_MUXER_OPTIONS.get(response_format, {}),
        )
        self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        if response_format in _BIT_RATES:
            self._stream.codec_context.bit_rate = _BIT_RATES[response_format]
        self._pts = 0
        self._closed = False

    def encode(self, samples: np.ndarray) -> bytes:
        if len(samples):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(samples, dtype=np.float32)[None, :], format="flt", layout="mono"
            )
            frame.sample_rate = self.sample_rate
            frame.pts = self._pts
            self._pts += len(samples)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._take()

    def _take(self) -> bytes:
        return b"" if self._sink is None else self._sink.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        self._closed = True
        return self._file.getvalue() if self._file is not None else self._take()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._container.close()
            except (av.FFmpegError, ValueError):
                pass  # closing an abandoned stream; nothing left to deliver


def create_encoder(response_format: ResponseFormat, sample_rate: int, whole_file: bool = False) -> StreamEncoder:
    """`whole_file`: one complete file, returned by `finish` (raw pcm is the same either way)."""
    if response_format == "pcm":
        return PcmEncoder(sample_rate)
    if response_format == "wav":
        return WholeWavEncoder(sample_rate) if whole_file else WavEncoder(sample_rate)
    if response_format in _PYAV_FORMATS:
        return PyAvEncoder(response_format, sample_rate, whole_file)
    raise ValueError(f"unknown response format {response_format!r}")
