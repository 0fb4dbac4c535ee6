"""Voice cloning (a Base checkpoint) through our HTTP API on a GPU."""

from __future__ import annotations

import base64
import io
import uuid
import wave

import httpx
import numpy as np
import pytest

from loadtest.audio import decode
from tests.gpu.support import SAMPLES_PER_FRAME, speak


def reference_wav_bytes(seconds: float = 3.0, rate: int = 16_000, channels: int = 1) -> bytes:
    """A voiced-sounding reference clip: a 140 Hz buzz with vowel-like formant sweeps."""
    t = np.arange(int(seconds * rate)) / rate
    signal = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 12)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    pcm = (signal / np.abs(signal).max() * 0.5 * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(pcm, channels).tobytes())  # interleaved: the same signal in every channel
    return out.getvalue()


def reference_wav(seconds: float = 3.0, rate: int = 16_000, channels: int = 1) -> str:
    return base64.b64encode(reference_wav_bytes(seconds, rate, channels)).decode()


@pytest.mark.parametrize("form", ["base64", "data_uri"])
def test_clone_with_reference_audio_and_transcript(clone_url: str, form: str) -> None:
    audio = reference_wav()
    ref = audio if form == "base64" else f"data:audio/wav;base64,{audio}"
    response = speak(
        clone_url,
        voice="my-voice",
        input="Cloned speech.",
        ref_audio=ref,
        ref_text="This is the reference transcript.",
        response_format="wav",
        max_new_tokens=26,
    )
    assert response.status_code == 200, response.text
    assert len(decode(response.content, "wav").samples) == 25 * SAMPLES_PER_FRAME


def test_clone_x_vector_only(clone_url: str) -> None:
    response = speak(
        clone_url,
        input="Only the speaker embedding.",
        ref_audio=reference_wav(),
        x_vector_only_mode=True,
        response_format="pcm",
        max_new_tokens=26,
    )
    assert response.status_code == 200, response.text
    assert len(response.content) == 2 * 25 * SAMPLES_PER_FRAME


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"ref_audio": None}, "ref_audio"),  # Base without reference audio
        ({"ref_text": None}, "ref_text"),  # in-context cloning needs the transcript
        ({"ref_audio": "bm90IGF1ZGlv"}, "ref_audio"),  # base64 of "not audio"
        ({"ref_audio": "https://example.com/a.wav"}, "ref_audio"),
        ({"task_type": "CustomVoice"}, "task_type"),
    ],
)
def test_clone_errors_name_the_param(clone_url: str, body: dict[str, object], param: str) -> None:
    payload: dict[str, object] = {"task_type": "Base", "ref_audio": reference_wav(), "ref_text": "Reference."}
    payload.update(body)
    payload = {k: v for k, v in payload.items() if v is not None}
    response = speak(clone_url, **payload)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize(("rate", "channels"), [(44_100, 2), (48_000, 1), (8_000, 1)])
def test_reference_audio_of_any_rate_and_layout_is_normalised(clone_url: str, rate: int, channels: int) -> None:
    response = speak(
        clone_url,
        input="A reference of another rate.",
        ref_audio=reference_wav(rate=rate, channels=channels),
        ref_text="This is the reference transcript.",
        response_format="pcm",
        max_new_tokens=26,
    )
    assert response.status_code == 200, response.text
    assert len(response.content) == 2 * 25 * SAMPLES_PER_FRAME


def test_a_registered_voice_speaks_until_deleted(clone_url: str) -> None:
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    created = httpx.post(
        f"{clone_url}/v1/audio/voices",
        data={"name": name, "consent": "true", "ref_text": "This is the reference transcript."},
        files={"audio_sample": ("sample.wav", reference_wav_bytes(rate=44_100, channels=2), "audio/wav")},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    try:
        listed = httpx.get(f"{clone_url}/v1/audio/voices", timeout=30).json()["data"]
        assert name in {voice["name"] for voice in listed}
        for response_format in ("pcm", "mp3"):
            response = speak(
                clone_url, voice=name, input="My registered voice.", response_format=response_format, max_new_tokens=26
            )
            assert response.status_code == 200, response.text
            audio = decode(response.content, response_format)
            assert abs(audio.duration_s - 25 * SAMPLES_PER_FRAME / 24_000) < 0.15
    finally:
        assert httpx.delete(f"{clone_url}/v1/audio/voices/{name}", timeout=30).status_code == 204
    gone = speak(clone_url, voice=name, input="Gone.", max_new_tokens=26)
    assert gone.status_code == 400 and gone.json()["error"]["param"] == "voice"


def test_clone_from_a_precomputed_speaker_embedding(clone_url: str) -> None:
    """vllm-omni 0.30's `speaker_embedding`: a vector as wide as the talker clones without reference audio; the
    real talker builds its prompt from it (voice_clone_prompt) and speaks the frames asked for."""
    width = httpx.get(f"{clone_url}/v1/audio/capabilities", timeout=30).json()["speaker_embedding_dim"]
    assert width, "a Base checkpoint must offer speaker_embedding"
    embedding = (np.random.default_rng(7).standard_normal(width) * 0.05).round(5).tolist()
    body = {"input": "A voice from numbers.", "task_type": "Base", "speaker_embedding": embedding}
    body |= {"response_format": "pcm", "max_new_tokens": 26}  # no voice: the embedding is the voice
    response = httpx.post(f"{clone_url}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    assert len(response.content) == 25 * SAMPLES_PER_FRAME * 2
    wrong = httpx.post(f"{clone_url}/v1/audio/speech", json={**body, "speaker_embedding": embedding[:-1]}, timeout=300)
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "speaker_embedding"
