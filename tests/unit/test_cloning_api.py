"""Cloning through the HTTP API on a Base checkpoint (the omni engine on fakes of vllm-omni 0.30.0's types): every
ref_audio form — base64, data URI, an https URL from an allow-listed local server — and registered voices."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import trustme

from app.server import create_app
from app.speech import batch, voice
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.support.wav import tone_wav
from tests.unit.test_omni_engine import make_engine, service_settings
from tests.unit.test_ref_audio_fetch import Handler, serve

RATE = 16_000


def clip(seconds: float, amplitude: float = 0.3) -> bytes:
    return tone_wav(seconds, RATE, amplitude, frequency=200.0)


CLIP = clip(2.0)


class ClipHandler(Handler):
    clip = CLIP


@pytest.fixture(scope="module")
def https_clip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An https server (certificate from a test CA) that serves CLIP at /voice.wav."""
    ca = trustme.CA()
    bundle = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    for port in serve(context, ClipHandler):
        yield f"https://localhost:{port}/voice.wav", bundle


@pytest.fixture
async def api(base_dir: Path, tmp_path: Path, https_clip: tuple[str, Path]):
    omni = FakeAsyncOmni()
    _, bundle = https_clip
    engine = make_engine(
        base_dir,
        omni,
        voice_store=str(tmp_path / "voices"),
        ref_audio_allowed_hosts=["localhost"],
        ref_audio_allow_private=True,
        ref_audio_ca_bundle=str(bundle),
    )
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30) as client:
        yield client, omni, app


async def speak(client: httpx.AsyncClient, **body: object) -> httpx.Response:
    model = (await client.get("/v1/models")).json()["data"][0]["id"]
    payload = {
        "model": model,
        "voice": "anyone",
        "input": "Cloned.",
        "response_format": "pcm",
        "max_new_tokens": 26,
        **body,
    }
    return await client.post("/v1/audio/speech", json=payload)


def received(omni: FakeAsyncOmni) -> dict:
    return omni.requests[-1]["prompt"]["additional_information"]


@pytest.mark.parametrize("form", ["base64", "data_uri", "https"])
async def test_every_ref_audio_form_reaches_the_engine_normalised(api, https_clip, form: str) -> None:
    client, omni, _ = api
    value = {
        "base64": base64.b64encode(CLIP).decode(),
        "data_uri": "data:audio/wav;base64," + base64.b64encode(CLIP).decode(),
        "https": https_clip[0],
    }[form]
    response = await speak(client, ref_audio=value, ref_text="A sine wave, for the test.")
    assert response.status_code == 200, response.text
    info = received(omni)
    samples, rate = info["ref_audio"][0]
    assert rate == 24_000 and abs(len(samples) - 48_000) <= 64  # 2 s, resampled from 16 kHz
    assert info["task_type"] == ["Base"] and info["ref_text"] == ["A sine wave, for the test."]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (base64.b64encode(clip(0.5)).decode(), "must last"),
        (base64.b64encode(clip(31)).decode(), "must last"),
        (base64.b64encode(clip(3, amplitude=0.0)).decode(), "silent"),
        (base64.b64encode(np.random.default_rng(2).bytes(20_000)).decode(), "could not be decoded"),
        ("https://example.org/voice.wav", "allow-list"),
        ("http://169.254.169.254/latest/meta-data/", "https"),
        ("file:///etc/passwd", "https"),
    ],
)
async def test_bad_clips_are_refused_naming_ref_audio(api, value: str, words: str) -> None:
    client, omni, _ = api
    sent = len(omni.requests)
    response = await speak(client, ref_audio=value, ref_text="Text.")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "ref_audio" and words in error["message"]
    assert len(omni.requests) == sent  # nothing reached the engine


async def test_registered_voice_becomes_a_clone_job_decoded_once(api) -> None:
    client, omni, app = api
    files = {"audio_sample": ("me.wav", CLIP, "audio/wav")}
    created = await client.post(
        "/v1/audio/voices", data={"name": "me", "consent": "true", "ref_text": "Me."}, files=files
    )
    assert created.status_code == 201, created.text
    for _ in range(3):
        assert (await speak(client, voice="me")).status_code == 200
    info = received(omni)
    assert info["task_type"] == ["Base"] and info["ref_text"] == ["Me."] and info["x_vector_only_mode"] == [False]
    assert len(info["ref_audio"][0][0]) == 48_000
    assert len(app.state.voice_store._audio_cache) == 1  # the stored clip was read once for three requests
    plain = await client.post("/v1/audio/voices", data={"name": "no-text", "consent": "true"}, files=files)
    assert plain.status_code == 201 and plain.json()["has_ref_text"] is False
    assert (await speak(client, voice="no-text")).status_code == 200
    assert received(omni)["x_vector_only_mode"] == [True]  # no transcript: the speaker embedding alone


async def test_a_name_alone_must_be_a_registered_voice(api) -> None:
    client, omni, _ = api
    sent = len(omni.requests)
    response = await speak(client, voice="nobody")  # no ref_audio, no registered voice of that name
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("voice", "voice_not_found") and "/v1/audio/voices" in error["message"]
    files = {"audio_sample": ("me.wav", CLIP, "audio/wav")}
    assert (
        await client.post("/v1/audio/voices", data={"name": "me", "consent": "true"}, files=files)
    ).status_code == 201
    assert (await speak(client, voice="me")).status_code == 200
    assert (await client.delete("/v1/audio/voices/me")).status_code == 204
    assert (await speak(client, voice="me")).json()["error"]["param"] == "voice"  # deleted: unknown again
    # asking for cloning explicitly without the clip still names the missing clip
    explicit = await speak(client, voice="nobody", task_type="Base", ref_text="Text.")
    assert explicit.status_code == 400 and explicit.json()["error"]["param"] == "ref_audio"
    assert len(omni.requests) == sent + 1


async def test_a_registered_voice_is_named_in_any_case_as_a_built_in_one_is(api) -> None:
    """Registered names are lower case; a request, a GET or a DELETE may write one as a built-in voice's may be
    written ("Alloy", " alloy "): "Narrator" was an unknown voice."""
    client, _, _ = api
    files = {"audio_sample": ("me.wav", CLIP, "audio/wav")}
    created = await client.post("/v1/audio/voices", data={"name": "narrator", "consent": "true"}, files=files)
    assert created.status_code == 201
    assert (await speak(client, voice="Narrator")).status_code == 200
    assert (await speak(client, voice={"id": " NARRATOR "})).status_code == 200
    assert (await client.get("/v1/audio/voices/Narrator")).json()["name"] == "narrator"
    assert (await client.delete("/v1/audio/voices/NARRATOR")).status_code == 204
    assert (await client.get("/v1/audio/voices/narrator")).status_code == 404


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/speech/batch"])
async def test_an_input_over_the_limit_is_refused_before_its_reference_audio_is_fetched(
    api, https_clip, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The length is checked first: an over-long `input` (up to the body's 25 MB) made the server fetch and decode the
    reference audio it named before refusing it, in a batch once for every such item."""
    client, _, _ = api
    fetched: list[str] = []
    real = voice.decode_reference

    async def counted(value: str, settings: object) -> object:
        fetched.append(value)
        return await real(value, settings)

    monkeypatch.setattr(voice, "decode_reference", counted)
    monkeypatch.setattr(batch, "decode_reference", counted)  # a batch's references, shared by its items
    reference = {"ref_audio": https_clip[0], "ref_text": "Hello."}
    if path.endswith("batch"):
        response = await client.post(path, json={"items": [{"input": "x" * 5000, **reference}]})
        error, param = response.json()["results"][0]["error"], "items[0].input"
    else:
        response = await speak(client, input="x" * 100_000, **reference)
        assert response.status_code == 400
        error, param = response.json()["error"], "input"
    assert (error["param"], error["code"]) == (param, "string_too_long") and fetched == [], (error, fetched)
