"""The streaming WAV header and the float -> 16-bit PCM conversion."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from app.audio.encoders import WAV_HEADER_BYTES, float_to_pcm16, wav_stream_header

_LAYOUT = "<4sI4s4sIHHIIHH4sI"  # RIFF, size, WAVE, "fmt ", fmt size, format, channels, rate, byte rate, align, bits,
# "data", data size


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100, 48000])
def test_header_fields(rate: int) -> None:
    header = wav_stream_header(rate)
    assert len(header) == 44 == WAV_HEADER_BYTES
    (riff, riff_size, wave, fmt, fmt_size, audio_format, channels, sample_rate, byte_rate, block_align, bits, data,
     data_size) = struct.unpack(_LAYOUT, header)  # fmt: skip
    assert (riff, wave, fmt, data) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert riff_size == 0xFFFFFFFF
    assert data_size == 0xFFFFFFFF
    assert fmt_size == 16
    assert audio_format == 1  # integer PCM
    assert channels == 1
    assert sample_rate == rate
    assert bits == 16
    assert block_align == 2
    assert byte_rate == rate * 2


def test_header_tags_sit_at_their_standard_offsets() -> None:
    header = wav_stream_header(24000)
    assert header[0:4] == b"RIFF"
    assert header[8:12] == b"WAVE"
    assert header[12:16] == b"fmt "
    assert header[36:40] == b"data"
    assert header[4:8] == b"\xff\xff\xff\xff"
    assert header[40:44] == b"\xff\xff\xff\xff"


def test_header_for_stereo_24_bit() -> None:
    fields = struct.unpack(_LAYOUT, wav_stream_header(48000, channels=2, bits_per_sample=24))
    channels, rate, byte_rate, block_align, bits = fields[6:11]
    assert (channels, rate, bits) == (2, 48000, 24)
    assert block_align == 6
    assert byte_rate == 48000 * 6


def test_float_to_pcm16_values_and_clipping() -> None:
    samples = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -7.0, 1e-6], dtype=np.float32)
    data = float_to_pcm16(samples)
    assert len(data) == 2 * len(samples)
    values = struct.unpack(f"<{len(samples)}h", data)
    assert values == (0, 32767, -32767, 16384, -16384, 32767, -32767, 0)  # rounded to the nearest step


def test_float_to_pcm16_is_little_endian() -> None:
    assert float_to_pcm16(np.array([1.0], dtype=np.float32)) == b"\xff\x7f"
    assert float_to_pcm16(np.array([-1.0], dtype=np.float32)) == b"\x01\x80"
    assert float_to_pcm16(np.array([256 / 32767], dtype=np.float32)) == b"\x00\x01"


def test_float_to_pcm16_accepts_float64_and_empty_input() -> None:
    assert float_to_pcm16(np.array([0.25, -0.25], dtype=np.float64)) == struct.pack("<2h", 8192, -8192)
    assert float_to_pcm16(np.zeros(0, dtype=np.float32)) == b""


def test_float_to_pcm16_round_trip_error_is_at_most_half_a_step() -> None:
    samples = np.random.default_rng(0).uniform(-1, 1, 10_000).astype(np.float32)
    decoded = np.frombuffer(float_to_pcm16(samples), dtype="<i2").astype(np.float64) / 32767.0
    assert np.max(np.abs(decoded - samples)) <= 0.5 / 32767 + 1e-7
