"""Reference audio for cloning: base64 and data URIs decoded with FFmpeg; anything else refused, naming ref_audio."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from app.audio.encoders import create_encoder
from app.audio.reference import decode_reference_audio
from app.engine_protocol import UnsupportedParameter
from tests.support.wav import pcm_wav, tone_wav


def wav_bytes(seconds: float = 2.0, rate: int = 16_000, channels: int = 1) -> bytes:
    return tone_wav(seconds, rate, amplitude=0.4, channels=channels)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("channels", [1, 2])
def test_base64_wav_decodes_to_mono_at_its_own_rate(channels: int) -> None:
    ref = decode_reference_audio(b64(wav_bytes(2.0, 16_000, channels)))
    assert ref.sample_rate == 16_000
    assert ref.samples.dtype == np.float32 and ref.samples.ndim == 1
    assert len(ref.samples) == 32_000
    assert 0.35 < np.abs(ref.samples).max() < 0.45


def test_data_uri_and_line_wrapped_base64() -> None:
    encoded = b64(wav_bytes())
    assert len(decode_reference_audio(f"data:audio/wav;base64,{encoded}").samples) == 32_000
    wrapped = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    assert len(decode_reference_audio(wrapped).samples) == 32_000


def test_compressed_formats_decode() -> None:
    encoder = create_encoder("mp3", 24_000)
    tone = (0.3 * np.sin(2 * np.pi * 200 * np.arange(48_000) / 24_000)).astype(np.float32)
    mp3 = encoder.encode(tone) + encoder.finish()
    ref = decode_reference_audio(b64(mp3))
    assert ref.sample_rate == 24_000 and abs(len(ref.samples) / 24_000 - 2.0) < 0.1


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("https://example.com/voice.wav", "URL"),
        ("file:///etc/passwd", "URL"),
        ("not base64 at all!", "base64"),
        (b64(b""), "empty"),
        (b64(np.random.default_rng(0).bytes(4000)), "decoded"),
        (b64(b"RIFF" + b"\x00" * 40), "decoded"),
    ],
)
def test_bad_reference_audio_names_the_param(value: str, words: str) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        decode_reference_audio(value)
    assert info.value.param == "ref_audio"
    assert words in info.value.message


def test_size_cap() -> None:
    with pytest.raises(UnsupportedParameter, match="larger than"):
        decode_reference_audio(b64(wav_bytes(2.0)), max_bytes=1000)


@pytest.mark.parametrize("over", [1, 2, 3])
def test_the_size_cap_is_the_decoded_audios_to_the_byte(over: int) -> None:
    """SPEECH_REF_AUDIO_MAX_BYTES holds the audio, not its base64 text: a clip up to three bytes over it passed the
    check of the text's length (four characters for every three bytes, whatever the padding), and was taken."""
    clip = wav_bytes(1.5)
    decode_reference_audio(b64(clip), max_bytes=len(clip))
    with pytest.raises(UnsupportedParameter, match=f"larger than {len(clip) - over} bytes"):
        decode_reference_audio(b64(clip), max_bytes=len(clip) - over)


def wav_with_header(channels: int, bits: int, frames: bytes = b"") -> bytes:
    """A RIFF/WAVE file with whatever header values a hostile caller likes."""
    import struct

    block = max(1, channels * bits // 8)
    fmt = struct.pack("<HHIIHH", 1, channels, 16_000, 16_000 * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(frames)) + frames
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(("channels", "bits"), [(9, 16), (64, 16), (0, 16), (1, 0)])
def test_hostile_wav_headers_are_refused_not_crashing(channels: int, bits: int) -> None:
    data = wav_with_header(channels, bits, b"\x01\x02" * 4000)
    with pytest.raises(UnsupportedParameter) as info:
        decode_reference_audio(b64(data))
    assert info.value.param == "ref_audio"


@pytest.mark.parametrize(("channels", "bits"), [(2, 7), (1, 64), (3, 24), (8, 8)])
def test_odd_but_decodable_headers_decode_or_are_refused(channels: int, bits: int) -> None:
    data = wav_with_header(channels, bits, b"\x01\x02" * 4000)
    try:
        ref = decode_reference_audio(b64(data))
    except UnsupportedParameter as exc:
        assert exc.param == "ref_audio"
    else:
        assert ref.samples.ndim == 1 and len(ref.samples) > 0


def test_eight_channels_are_averaged() -> None:
    t = np.arange(16_000) / 16_000
    mono = (0.25 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2")
    data = wav_with_header(8, 16, np.repeat(mono[:, None], 8, axis=1).tobytes())
    ref = decode_reference_audio(b64(data))
    assert len(ref.samples) == 16_000 and 0.2 < np.abs(ref.samples).max() < 0.3


@pytest.mark.parametrize(("rate", "samples"), [(10, 100_000), (1, 48_000), (4_000, 8_000), (400_000, 800_000)])
def test_a_sample_rate_no_recording_has_is_refused_before_it_is_resampled(rate: int, samples: int) -> None:
    """A small file whose header declares 10 Hz lasts hours: resampled to 24 kHz it would take gigabytes (1 Hz: an
    allocation FFmpeg refuses, which was a 500). Refused by its rate, naming ref_audio."""
    from app.audio.reference import prepare_reference_audio

    pcm = (np.sin(np.arange(samples) / 3) * 10_000).astype("<i2")
    with pytest.raises(UnsupportedParameter) as info:
        prepare_reference_audio(b64(pcm_wav(pcm, rate)), max_bytes=2_000_000)
    assert info.value.param == "ref_audio" and "sample rate" in info.value.message


def test_a_clip_longer_than_a_reference_is_refused_by_its_length() -> None:
    from app.audio.reference import prepare_reference_audio

    with pytest.raises(UnsupportedParameter, match=r"more than 30 s"):
        prepare_reference_audio(b64(tone_wav(31.0, rate=8_000)), max_bytes=2_000_000)
    assert len(prepare_reference_audio(b64(tone_wav(29.5, rate=8_000)), max_bytes=2_000_000).samples) == 29.5 * 24_000
