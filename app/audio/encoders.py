"""Incremental audio encoders: float32 chunks in, bytes of the response format out, as soon as they exist.

pcm and wav are written directly; mp3, opus (Ogg), aac (ADTS) and flac go through PyAV (FFmpeg inside the wheel), with
the container, codec, bit rate and muxer options that `app.audio.formats.FORMATS` states for each.
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

from app.audio.formats import Format, get_format

WAV_HEADER_BYTES: Final = 44
_STREAMING_SIZE: Final = 0xFFFFFFFF


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

    def __init__(self, fmt: Format, sample_rate: int, whole_file: bool = False) -> None:
        self.sample_rate = sample_rate
        self._sink: _ByteSink | None = None if whole_file else _ByteSink()
        self._file = io.BytesIO() if whole_file else None
        self._container = av.open(
            self._file if self._file is not None else self._sink,
            mode="w",
            format=fmt.container,
            options=dict(fmt.muxer_options),
        )
        self._stream = self._container.add_stream(fmt.codec, rate=sample_rate, layout="mono")
        if fmt.bit_rate is not None:
            self._stream.codec_context.bit_rate = fmt.bit_rate
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


def create_encoder(response_format: str, sample_rate: int, whole_file: bool = False) -> StreamEncoder:
    """`whole_file`: one complete file, returned by `finish` (raw pcm is the same either way). ValueError for a
    format the table does not hold."""
    fmt = get_format(response_format)
    if fmt.ffmpeg:
        return PyAvEncoder(fmt, sample_rate, whole_file)
    if fmt.container is None:  # raw samples
        return PcmEncoder(sample_rate)
    return WholeWavEncoder(sample_rate) if whole_file else WavEncoder(sample_rate)
