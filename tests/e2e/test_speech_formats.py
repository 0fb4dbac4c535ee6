"""Every response format streams, decodes with FFmpeg to mono audio at the requested rate, and is intelligible."""

from __future__ import annotations

import struct

import httpx
import pytest

from app.audio.formats import FORMATS as TABLE
from loadtest.audio import DecodedAudio, decode, transcribe, word_error_rate
from tests.support.server import RunningServer

FORMATS = ["mp3", "opus", "aac", "flac", "wav", "pcm"]
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
SENTENCE = "The quick brown fox jumps over the lazy dog."


def speak(server: RunningServer, **body: object) -> httpx.Response:
    payload = {"model": "tts-1", "voice": "alloy", **body}
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=payload, timeout=60)


def opus_input_rate(data: bytes) -> int:
    """The input sample rate recorded in the Ogg Opus identification header (decoders always output 48 kHz)."""
    head = data.index(b"OpusHead")
    return struct.unpack_from("<I", data, head + 12)[0]


def check_rate(data: bytes, audio: DecodedAudio, response_format: str, rate: int) -> None:
    if response_format == "opus":
        assert audio.sample_rate == 48_000
        assert opus_input_rate(data) == rate
    else:
        assert audio.sample_rate == rate


@pytest.mark.parametrize("response_format", FORMATS)
def test_format_streams_and_decodes(server: RunningServer, response_format: str) -> None:
    response = speak(server, input=SENTENCE, response_format=response_format, seed=1)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(CONTENT_TYPES[response_format])
    assert response.headers["content-type"] == TABLE[response_format].content_type  # the table is what is sent
    assert response.headers.get("transfer-encoding") == "chunked"
    assert response.headers["x-request-id"]
    audio = decode(response.content, response_format)
    assert audio.channels == 1
    check_rate(response.content, audio, response_format, 24_000)
    assert 1.5 < audio.duration_s < 6.0, audio.duration_s  # nine words of speech
    assert word_error_rate(SENTENCE, transcribe(audio)) <= 0.2


@pytest.mark.parametrize(
    ("response_format", "rate"),
    [("wav", 16_000), ("flac", 44_100), ("mp3", 22_050), ("pcm", 8_000), ("opus", 48_000), ("aac", 32_000)],
)
def test_sample_rate_is_resampled_server_side(server: RunningServer, response_format: str, rate: int) -> None:
    response = speak(server, input=SENTENCE, response_format=response_format, sample_rate=rate, seed=1)
    assert response.status_code == 200, response.text
    audio = decode(response.content, response_format, pcm_rate=rate)
    check_rate(response.content, audio, response_format, rate)
    reference = decode(speak(server, input=SENTENCE, response_format="wav", seed=1).content, "wav")
    assert abs(audio.duration_s - reference.duration_s) < 0.15  # same speech, only the rate changed
    assert word_error_rate(SENTENCE, transcribe(audio)) <= 0.2


INTELLIGIBILITY = [
    ("wav", "Please call Stella and ask her to bring these things with her from the store."),
    ("mp3", "The weather today is sunny with a gentle breeze from the west."),
    ("opus", "Our meeting starts at nine in the morning, so please be on time."),
    ("flac", "A large brown dog ran across the green field to fetch the red ball."),
    ("aac", "Streaming speech lets the listener hear the first words while the rest is still being made."),
]


@pytest.mark.parametrize(("response_format", "text"), INTELLIGIBILITY)
def test_speech_is_intelligible(server: RunningServer, response_format: str, text: str) -> None:
    response = speak(server, input=text, response_format=response_format)
    assert response.status_code == 200, response.text
    hypothesis = transcribe(decode(response.content, response_format))
    assert word_error_rate(text, hypothesis) <= 0.2, hypothesis


def test_default_format_is_mp3(server: RunningServer) -> None:
    response = speak(server, input="Hello there.")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/mpeg"
    assert decode(response.content, "mp3").codec.startswith("mp3")


def test_wav_stream_header_has_unknown_sizes(server: RunningServer) -> None:
    data = speak(server, input="Hello there.", response_format="wav").content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE" and data[36:40] == b"data"
    assert struct.unpack_from("<I", data, 4)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<I", data, 40)[0] == 0xFFFFFFFF
    assert (len(data) - 44) % 2 == 0


@pytest.mark.parametrize(
    ("speed", "low", "high"), [(2.0, 0.4, 0.65), (0.5, 1.6, 2.5), (4.0, 0.18, 0.35), (0.25, 3.0, 5.0)]
)
def test_speed_changes_duration(server: RunningServer, speed: float, low: float, high: float) -> None:
    text = "Speaking faster makes the audio shorter, and speaking slower makes it longer."
    normal = decode(speak(server, input=text, response_format="wav", seed=3).content, "wav")
    changed = decode(speak(server, input=text, response_format="wav", seed=3, speed=speed).content, "wav")
    ratio = changed.duration_s / normal.duration_s
    assert low < ratio < high, ratio


@pytest.mark.parametrize("speed", [0.75, 1.25, 2.0, 3.0])
@pytest.mark.parametrize(
    "text",
    [
        "Speaking faster makes the audio shorter, and speaking slower makes it longer.",
        "The first sentence is short. The second one follows it after a pause. And a third ends the text.",
    ],
)
def test_speed_divides_the_duration_by_itself_pauses_included(server: RunningServer, text: str, speed: float) -> None:
    """`speed` as OpenAI's: 2.0 is half the time, whatever the text, the pauses between sentences included (the
    embedded model's own speed control rounds each sound to whole frames, and fell short of it: 2.0 gave 1.8x)."""
    normal = decode(speak(server, input=text, response_format="wav", seed=3).content, "wav")
    changed = decode(speak(server, input=text, response_format="wav", seed=3, speed=speed).content, "wav")
    assert changed.duration_s * speed / normal.duration_s == pytest.approx(1.0, abs=0.04)


def test_stretched_speed_stays_intelligible(server: RunningServer) -> None:
    text = "The weather today is sunny with a gentle breeze from the west."
    for speed in (0.3, 2.0):
        audio = decode(speak(server, input=text, response_format="wav", speed=speed).content, "wav")
        assert word_error_rate(text, transcribe(audio)) <= 0.2, speed


def test_same_seed_same_audio(server: RunningServer) -> None:
    first = speak(server, input="Reproducible speech.", response_format="pcm", seed=42).content
    second = speak(server, input="Reproducible speech.", response_format="pcm", seed=42).content
    other = speak(server, input="Reproducible speech.", response_format="pcm", seed=43).content
    assert first == second
    assert first != other


def test_voice_object_form_and_native_voice(server: RunningServer) -> None:
    for voice in ({"id": "alloy"}, "heart", {"id": "heart"}, "NOVA"):
        response = speak(server, input="Hello.", response_format="pcm", voice=voice)
        assert response.status_code == 200, (voice, response.text)
        assert len(response.content) > 0


def test_instructions_are_accepted_and_ignored(server: RunningServer) -> None:
    plain = speak(server, input="Good morning.", response_format="pcm", seed=5).content
    instructed = speak(server, input="Good morning.", response_format="pcm", seed=5, instructions="Whisper it.").content
    assert plain == instructed
