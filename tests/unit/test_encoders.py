"""Incremental encoders: real audio in, chunk by chunk; what comes out must stream and decode (PyAV) to the input."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import get_args

import av
import numpy as np
import pytest

from app.audio.encoders import WAV_HEADER_BYTES, create_encoder, float_to_pcm16, wav_stream_header
from app.audio.formats import CONTENT_TYPES, FORMATS, RESPONSE_FORMATS, ResponseFormat

# The formats whose codec carries only some rates, and those rates.
CODEC_SAMPLE_RATES = {name: f.sample_rates for name, f in FORMATS.items() if f.sample_rates is not None}

LOSSY = ("mp3", "opus", "aac")
LOSSLESS = ("flac", "wav", "pcm")
# Varied chunk lengths in seconds, as a synthesizer yields them: after the first two, 0.25 s has been fed.
CHUNK_SECONDS = (0.2, 0.05, 0.0125, 0.3, 0.2, 0.2, 0.5, 0.2)


def max_extra_samples(fmt: str, rate: int) -> int:
    """mp3 and aac decode a little longer than the input: a stream carries no gapless tag, so the decoder keeps the
    encoder delay (LAME 576 + decoder 529 samples; AAC 1024 priming samples) and the padding of the last frame
    (mp3: 1152 samples from 32 kHz up, 576 below; aac: 1024). At 24 kHz that is at most 70 ms (mp3) / 85 ms (aac)."""
    if fmt == "mp3":
        return 1105 + (1152 if rate >= 32_000 else 576)
    if fmt == "aac":
        return 1024 + 1024
    return 0


def sine(n: int, rate: int, freq: float = 440.0, offset: int = 0, amp: float = 0.5) -> np.ndarray:
    t = (np.arange(n) + offset) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def chunks_for(rate: int, freq: float = 440.0) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    offset = 0
    for seconds in CHUNK_SECONDS:
        n = round(seconds * rate)
        out.append(sine(n, rate, freq, offset))
        offset += n
    return out


@dataclass
class Encoded:
    per_chunk: list[bytes]
    tail: bytes

    @property
    def data(self) -> bytes:
        return b"".join(self.per_chunk) + self.tail


def encode_all(fmt: str, rate: int, chunks: list[np.ndarray]) -> Encoded:
    encoder = create_encoder(fmt, rate)
    try:
        per_chunk = [encoder.encode(chunk) for chunk in chunks]
        return Encoded(per_chunk, encoder.finish())
    finally:
        encoder.close()


@dataclass
class Decoded:
    samples: np.ndarray  # mono, float in [-1, 1]
    sample_rate: int
    channels: int
    raw_int16: np.ndarray | None = None  # for s16 streams: the exact integer samples

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def decode(data: bytes, fmt: str, rate: int) -> Decoded:
    if fmt == "pcm":  # raw s16le mono, no header: the caller knows the rate
        ints = np.frombuffer(data, dtype="<i2")
        return Decoded(ints.astype(np.float32) / 32767.0, rate, 1, ints)
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = list(container.decode(stream))
    assert frames, "no audio decoded"
    channels = frames[0].layout.nb_channels
    sample_rate = frames[0].sample_rate
    assert stream.codec_context.sample_rate == sample_rate
    arrays = [f.to_ndarray().reshape(-1) for f in frames]
    assert all(f.sample_rate == sample_rate for f in frames)
    samples = np.concatenate(arrays)
    if frames[0].format.name.startswith("s16"):
        return Decoded(samples.astype(np.float32) / 32767.0, sample_rate, channels, samples.astype(np.int16))
    return Decoded(samples.astype(np.float32), sample_rate, channels)


def decoded_rate(fmt: str, rate: int) -> int:
    # Ogg Opus always decodes at 48 kHz: Opus runs internally at 48 kHz and FFmpeg's decoder outputs that; the
    # requested rate is only recorded as "input sample rate" in the OpusHead (checked separately below).
    return 48_000 if fmt == "opus" else rate


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum)) * rate / len(samples)


# -- streaming: bytes come out before finish() ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_bytes_stream_out_before_finish(fmt: str) -> None:
    rate = 24_000
    chunks = chunks_for(rate)
    encoder = create_encoder(fmt, rate)
    emitted = b""
    fed = 0
    try:
        for i, chunk in enumerate(chunks):
            emitted += encoder.encode(chunk)
            fed += len(chunk)
            if i >= 1:  # 0.25 s fed: every format has produced audio by now
                assert emitted, f"{fmt}: nothing after {fed / rate:.3f} s of input"
                # What the client has so far already plays nearly all the audio fed: at most 0.15 s is held back.
                # Without page_duration, the Ogg muxer would hold Opus pages back for a whole second.
                heard = decode(emitted, fmt, rate).duration_s
                assert heard >= fed / rate - 0.15, f"{fmt}: {heard:.3f} s playable of {fed / rate:.3f} s fed"
        tail = encoder.finish()
    finally:
        encoder.close()
    assert len(tail) < len(emitted) / 4  # finish() flushes a tail, not the bulk of the stream


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_raw_formats_emit_every_chunk_immediately(fmt: str) -> None:
    rate = 24_000
    chunks = chunks_for(rate)
    encoded = encode_all(fmt, rate, chunks)
    header = WAV_HEADER_BYTES if fmt == "wav" else 0
    assert [len(b) for b in encoded.per_chunk] == [2 * len(c) + (header if i == 0 else 0) for i, c in enumerate(chunks)]
    assert encoded.tail == b""
    if fmt == "wav":
        assert encoded.per_chunk[0].startswith(wav_stream_header(rate))
        assert all(b"RIFF" not in b for b in encoded.per_chunk[1:])  # the header goes out once


# -- the whole stream decodes to the input: rate, channels, duration -----------------------------------------------

_RATE_CASES = [(fmt, rate) for rate in (24_000, 16_000) for fmt in RESPONSE_FORMATS] + [
    (fmt, 44_100) for fmt in ("mp3", "aac", "flac", "wav", "pcm")
]


@pytest.mark.parametrize(("fmt", "rate"), _RATE_CASES)
def test_decodes_to_mono_at_the_expected_rate_and_duration(fmt: str, rate: int) -> None:
    chunks = chunks_for(rate)
    n_in = sum(len(c) for c in chunks)
    decoded = decode(encode_all(fmt, rate, chunks).data, fmt, rate)
    assert decoded.channels == 1
    assert decoded.sample_rate == decoded_rate(fmt, rate)
    extra = len(decoded.samples) - n_in * decoded.sample_rate // rate
    # Ogg Opus trims its pre-skip and end padding (granule positions), so it is exact, like flac, wav and pcm.
    assert 0 <= extra <= max_extra_samples(fmt, rate), f"{fmt}@{rate}: {extra} samples extra"


@pytest.mark.parametrize("fmt", LOSSLESS)
@pytest.mark.parametrize("rate", [24_000, 16_000])
def test_lossless_formats_round_trip_within_16_bit_quantisation(fmt: str, rate: int) -> None:
    chunks = chunks_for(rate)
    # Add noise and out-of-range peaks, so that more than a smooth sine has to survive.
    rng = np.random.default_rng(1)
    chunks = [(c + rng.normal(0, 0.2, len(c))).astype(np.float32) for c in chunks]
    signal = np.concatenate(chunks)
    decoded = decode(encode_all(fmt, rate, chunks).data, fmt, rate)
    assert decoded.raw_int16 is not None
    assert len(decoded.raw_int16) == len(signal)
    clipped = np.clip(signal.astype(np.float64), -1, 1)
    if fmt == "flac":
        # PyAV hands float samples to FFmpeg, which converts them to s16 itself: round(x * 32768), clipped.
        expected = np.clip(np.round(clipped * 32768), -32768, 32767).astype(np.int16)
    else:
        expected = np.frombuffer(float_to_pcm16(signal), dtype="<i2")  # trunc(x * 32767)
    np.testing.assert_array_equal(decoded.raw_int16, expected)
    assert np.max(np.abs(decoded.raw_int16 / 32768.0 - clipped)) <= 2 / 32768  # within 16-bit quantisation


@pytest.mark.parametrize("fmt", LOSSY)
@pytest.mark.parametrize("freq", [440.0, 1000.0])
@pytest.mark.parametrize("rate", [24_000, 16_000])
def test_lossy_formats_keep_the_tone(fmt: str, freq: float, rate: int) -> None:
    decoded = decode(encode_all(fmt, rate, chunks_for(rate, freq)).data, fmt, rate)
    assert dominant_frequency(decoded.samples, decoded.sample_rate) == pytest.approx(freq, abs=3.0)
    rms = float(np.sqrt(np.mean(decoded.samples**2)))
    assert rms == pytest.approx(0.5 / np.sqrt(2), rel=0.15)  # not silence, not clipped or doubled


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_no_gaps_at_chunk_joins(fmt: str) -> None:
    """Every 20 ms window of the decoded middle part is loud: a dropped or mistimed chunk would leave a hole."""
    rate = 24_000
    decoded = decode(encode_all(fmt, rate, chunks_for(rate)).data, fmt, rate)
    out_rate = decoded.sample_rate
    window = out_rate // 50
    middle = decoded.samples[int(0.1 * out_rate) : len(decoded.samples) - int(0.2 * out_rate)]
    rms = [float(np.sqrt(np.mean(middle[i : i + window] ** 2))) for i in range(0, len(middle) - window, window)]
    assert len(rms) > 50
    assert min(rms) > 0.25, f"{fmt}: a quiet window (rms {min(rms):.3f})"


def test_opus_head_records_the_requested_rate() -> None:
    data = encode_all("opus", 16_000, chunks_for(16_000)).data
    head = data.find(b"OpusHead")
    assert data.startswith(b"OggS") and head > 0
    magic, version, channels, _pre_skip, input_rate, _gain, mapping = struct.unpack("<8sBBHIhB", data[head : head + 19])
    assert (magic, version, channels, input_rate, mapping) == (b"OpusHead", 1, 1, 16_000, 0)


@pytest.mark.parametrize(
    ("fmt", "magic"),
    [("mp3", b"ID3"), ("opus", b"OggS"), ("aac", b"\xff\xf1"), ("flac", b"fLaC"), ("wav", b"RIFF")],
)
def test_container_signatures(fmt: str, magic: bytes) -> None:
    data = encode_all(fmt, 24_000, chunks_for(24_000)).data
    assert data.startswith(magic)


# -- edge cases ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_empty_chunks_are_harmless(fmt: str) -> None:
    rate = 24_000
    chunks = chunks_for(rate)
    empty = np.zeros(0, dtype=np.float32)
    encoder = create_encoder(fmt, rate)
    try:
        data = encoder.encode(empty)
        assert data == (wav_stream_header(rate) if fmt == "wav" else b"")
        data += b"".join(encoder.encode(c) + encoder.encode(empty) for c in chunks) + encoder.finish()
    finally:
        encoder.close()
    reference = encode_all(fmt, rate, chunks).data
    assert len(decode(data, fmt, rate).samples) == len(decode(reference, fmt, rate).samples)


def test_wav_without_audio_is_still_a_wav_header() -> None:
    encoder = create_encoder("wav", 24_000)
    assert encoder.finish() == wav_stream_header(24_000)
    assert encoder.finish() == b""  # once only


def test_pcm_without_audio_is_empty() -> None:
    encoder = create_encoder("pcm", 24_000)
    assert encoder.encode(np.zeros(0, dtype=np.float32)) == b""
    assert encoder.finish() == b""


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_close_is_idempotent_and_safe_mid_stream(fmt: str) -> None:
    encoder = create_encoder(fmt, 24_000)
    encoder.encode(sine(4800, 24_000))
    encoder.close()  # abandoned mid-stream (client went away)
    encoder.close()
    finished = create_encoder(fmt, 24_000)
    finished.encode(sine(4800, 24_000))
    finished.finish()
    finished.close()


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="ogg"):
        create_encoder("ogg", 24_000)


# -- the sample-rate table -----------------------------------------------------------------------------------------


def test_format_tables_agree() -> None:
    assert set(RESPONSE_FORMATS) == set(get_args(ResponseFormat))
    assert set(CONTENT_TYPES) == set(RESPONSE_FORMATS)
    assert set(CODEC_SAMPLE_RATES) == {"mp3", "opus", "aac"}
    assert CONTENT_TYPES["opus"].startswith("audio/ogg")


def test_codec_sample_rates() -> None:
    for fmt in ("pcm", "wav", "flac"):
        assert FORMATS[fmt].sample_rates is None
    assert FORMATS["opus"].sample_rates == {8000, 12000, 16000, 24000, 48000}  # the rates libopus accepts
    assert FORMATS["mp3"].sample_rates == {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}
    assert {8000, 16000, 22050, 24000, 44100, 48000} <= FORMATS["aac"].sample_rates
    for fmt in ("mp3", "opus", "aac"):
        assert 24_000 in FORMATS[fmt].sample_rates  # the default output rate works everywhere


@pytest.mark.parametrize(("fmt", "rate"), [(f, r) for f, rates in CODEC_SAMPLE_RATES.items() for r in sorted(rates)])
def test_every_listed_rate_really_encodes(fmt: str, rate: int) -> None:
    n = rate // 4
    decoded = decode(encode_all(fmt, rate, [sine(n, rate)]).data, fmt, rate)
    assert decoded.sample_rate == decoded_rate(fmt, rate)
    assert decoded.duration_s >= n / rate


@pytest.mark.parametrize("rate", [22_050, 44_100, 11_025])
def test_unlisted_opus_rates_really_fail(rate: int) -> None:
    assert rate not in CODEC_SAMPLE_RATES["opus"]
    encoder = create_encoder("opus", rate)
    with pytest.raises(av.FFmpegError):
        encoder.encode(sine(rate // 4, rate))
    encoder.close()


@pytest.mark.parametrize("rate", [8000, 8001, 11_111, 22_051, 33_333, 47_999, 48_000])
def test_flac_takes_any_rate_the_api_allows(rate: int) -> None:
    n = rate // 4
    decoded = decode(encode_all("flac", rate, [sine(n, rate)]).data, "flac", rate)
    assert decoded.sample_rate == rate
    assert len(decoded.samples) == n
