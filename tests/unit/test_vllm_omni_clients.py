"""Requests shaped as vllm-omni 0.26's speech API documents them (docs/serving/speech_api.md: quick start, OpenAI SDK,
style instructions, VoiceDesign, Base cloning, uploaded voices, streaming) replayed against the omni engine on fakes of
vllm-omni's types: clients written for `vllm serve --omni` run unchanged, while unknown fields are still refused."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import AsyncOpenAI

from app.server import create_app
from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.fakes.vllm_omni_0_30 import SAMPLES_PER_FRAME, FakeAsyncOmni
from tests.support.wav import tone_wav
from tests.unit.test_omni_engine import make_engine, profile_without_ramp, service_settings

SERVED = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
CLIP = tone_wav(2.0, 16_000, 0.3, frequency=200.0)


def model_dir(root: Path, variant: str) -> Path:
    if variant != "voice_design":
        return write_model_dir(root, variant)
    path = write_model_dir(root, "custom_voice")  # the same checkpoint layout, another task
    config = json.loads((path / "config.json").read_text())
    config["tts_model_type"] = "voice_design"
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {variant: model_dir(root / variant, variant) for variant in ("custom_voice", "voice_design", "base")}


@pytest.fixture
async def omni_api(
    tmp_path: Path, model_dirs: dict[str, Path], request: pytest.FixtureRequest
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeAsyncOmni]]:
    variant = getattr(request, "param", "custom_voice")
    omni = FakeAsyncOmni()
    engine = make_engine(
        model_dirs[variant],
        omni,
        voice_store=str(tmp_path / "voices"),
        served_model_name=SERVED,
        omni_warmup_batch_sizes=[1],
        # a profile where a request may size its first window, as vllm-omni's own qwen3_tts.yaml
        deploy_config=profile_without_ramp(tmp_path),
    )
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://omni", timeout=30) as client:
        yield client, omni


def conditioning(omni: FakeAsyncOmni) -> dict:
    return omni.requests[-1]["prompt"]["additional_information"]


# -- the documented shapes ------------------------------------------------------------------------------------------


async def test_quick_start_without_model(omni_api) -> None:
    client, omni = omni_api
    response = await client.post(
        "/v1/audio/speech", json={"input": "Hello, how are you?", "voice": "vivian", "language": "English"}
    )
    assert response.status_code == 200, response.text
    assert response.content[:3] == b"ID3" or response.content[:2] == b"\xff\xfb"  # OpenAI's default format: mp3
    info = conditioning(omni)
    assert info["speaker"] == ["vivian"] and info["language"] == ["English"]


async def test_openai_sdk_with_the_served_model_name(omni_api) -> None:
    client, _ = omni_api
    sdk = AsyncOpenAI(base_url="http://omni/v1", api_key="none", http_client=client)
    async with sdk.audio.speech.with_streaming_response.create(
        model=SERVED, voice="vivian", input="Hello, how are you?"
    ) as response:
        audio = await response.read()
    assert len(audio) > 1000


async def test_custom_voice_with_style_instruction(omni_api) -> None:
    client, omni = omni_api
    body = {"input": "I am so excited!", "voice": "vivian", "instructions": "Speak with great enthusiasm"}
    assert (await client.post("/v1/audio/speech", json=body)).status_code == 200
    assert conditioning(omni)["instruct"] == ["Speak with great enthusiasm"]
    assert "non_streaming_mode" not in conditioning(omni)  # CustomVoice: the model's default


@pytest.mark.parametrize("omni_api", ["voice_design"], indirect=True)
async def test_voice_design_without_voice(omni_api) -> None:
    client, omni = omni_api
    body = {
        "input": "Hello world",
        "task_type": "VoiceDesign",
        "instructions": "A warm, friendly female voice with a gentle tone",
    }
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    info = conditioning(omni)
    assert info["task_type"] == ["VoiceDesign"] and info["non_streaming_mode"] == [True]  # vllm-omni's fallback


@pytest.mark.parametrize("omni_api", ["base"], indirect=True)
async def test_base_cloning_with_non_streaming_mode_and_uploaded_voice(omni_api) -> None:
    client, omni = omni_api
    body = {
        "input": "Hello, this is a cloned voice",
        "task_type": "Base",
        # the documented example names an https URL; the service fetches only allow-listed hosts, so a data URI here
        "ref_audio": "data:audio/wav;base64," + base64.b64encode(CLIP).decode(),
        "ref_text": "Original transcript of the reference audio",
        "non_streaming_mode": True,
    }
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    info = conditioning(omni)
    assert info["task_type"] == ["Base"] and info["non_streaming_mode"] == [True]
    files = {"audio_sample": ("voice_sample.wav", CLIP, "audio/wav")}
    form = {"consent": "true", "name": "custom_voice_1"}
    assert (await client.post("/v1/audio/voices", data=form, files=files)).status_code == 201
    used = await client.post(
        "/v1/audio/speech", json={"input": "Hello, this is a cloned voice", "voice": "custom_voice_1"}
    )
    assert used.status_code == 200, used.text
    assert conditioning(omni)["task_type"] == ["Base"]


def sse_deltas(text: str) -> tuple[bytes, list[str]]:
    audio, types = b"", []
    for line in text.splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            types.append(event["type"])
            if event["type"] == "speech.audio.delta":
                audio += base64.b64decode(event["audio"])
    return audio, types


async def test_stream_true_is_sse_with_a_first_chunk_size(omni_api) -> None:
    client, omni = omni_api
    body = {
        "input": "Hello, how are you?",
        "voice": "vivian",
        "response_format": "pcm",
        "stream": True,
        "initial_codec_chunk_frames": 4,
        "max_new_tokens": 40,
    }
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    audio, types = sse_deltas(response.text)
    assert types[-1] == "speech.audio.done" and types.count("speech.audio.delta") >= 2
    assert len(audio) == 39 * SAMPLES_PER_FRAME * 2  # every generated frame, once (16-bit pcm)
    info = conditioning(omni)
    assert info["initial_codec_chunk_frames"] == [4]  # where vllm-omni's serving layer puts it


async def test_stream_true_with_stream_format_audio_is_raw_bytes(omni_api) -> None:
    client, _ = omni_api
    body = {"input": "Hi there.", "voice": "vivian", "response_format": "pcm", "stream": True, "stream_format": "audio"}
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
    assert len(response.content) % 2 == 0 and len(response.content) > 0


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"initial_codec_chunk_frames": 0}, "initial_codec_chunk_frames"),  # vllm-omni's "by load": not offered
        ({"initial_codec_chunk_frames": 26}, "initial_codec_chunk_frames"),  # past the deployment's steady window
        ({"initial_codec_chunk_frames": "4"}, "initial_codec_chunk_frames"),
        ({"non_streaming_mode": "true"}, "non_streaming_mode"),
        ({"stream": "yes"}, "stream"),
        ({"speaker": "ryan"}, "speaker"),  # voice vivian, speaker ryan: which one was meant?
        ({"extra_params": {"top_k": "many"}}, "extra_params"),
        ({"speaker_embedding": [0.1] * 1024}, "speaker_embedding"),  # a CustomVoice checkpoint cannot clone
    ],
)
async def test_bad_values_are_400s_naming_the_field(omni_api, changes: dict, param: str) -> None:
    client, omni = omni_api
    sent = len(omni.requests)
    response = await client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "vivian", **changes})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert len(omni.requests) == sent


async def test_engine_honours_a_first_chunk_size(model_dirs: dict[str, Path]) -> None:
    """Without a ramp, a request's own first-window size reaches the talker, and every generated frame arrives once."""
    from app.engine_protocol import SynthesisJob

    omni = FakeAsyncOmni()
    no_ramp = profile_without_ramp(model_dirs["custom_voice"].parent)
    engine = make_engine(model_dirs["custom_voice"], omni, omni_warmup_batch_sizes=[1], deploy_config=no_ramp)
    await engine.start()
    job = SynthesisJob("r-1", "Hello there.", "vivian", max_new_tokens=40, initial_codec_chunk_frames=4)
    chunks = [c.samples async for c in engine.synthesize(job)]
    assert len(chunks[0]) == 4 * SAMPLES_PER_FRAME
    assert np.array_equal(np.concatenate(chunks), omni.last_waveform)
    await engine.close()


async def test_the_shipped_ramp_profile_refuses_a_first_chunk_size(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Under codec_chunk_ramp vllm-omni ignores `initial_codec_chunk_frames`; the service says so instead."""
    omni = FakeAsyncOmni()
    engine = make_engine(model_dirs["custom_voice"], omni, omni_warmup_batch_sizes=[1], voice_store=str(tmp_path))
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://omni") as client:
        body = {"input": "Hi.", "voice": "vivian", "initial_codec_chunk_frames": 4}
        response = await client.post("/v1/audio/speech", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == "initial_codec_chunk_frames"
        capabilities = (await client.get("/v1/audio/capabilities")).json()
        assert capabilities["initial_codec_chunk_frames"] is None
        ok = await client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "vivian", "response_format": "pcm"})
        assert ok.status_code == 200 and len(ok.content) > 0
    await engine.close()


async def test_extra_params_reach_the_talker_as_vllm_omni_applies_them(omni_api) -> None:
    """vllm-omni 0.30's serving_speech: temperature/top_p/top_k onto stage 0's sampling, the whole object into its
    extra_args; code2wav's parameters untouched."""
    client, omni = omni_api
    extra = {"temperature": 0.5, "top_k": 20, "top_p": 0.8, "subtalker_temperature": 0.7}
    body = {"input": "Hi there.", "voice": "vivian", "response_format": "pcm", "extra_params": extra, "seed": 4}
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    talker, code2wav = omni.requests[-1]["params"]
    capabilities = (await client.get("/v1/audio/capabilities")).json()
    assert (capabilities["speaker_embedding_dim"], capabilities["extra_params"]) == (None, True)  # CustomVoice
    assert (talker.temperature, talker.top_k, talker.top_p) == (0.5, 20, 0.8)
    assert talker.extra_args == {**extra, "tts_local_seed": 4}
    assert code2wav.temperature == 0.0 and not code2wav.extra_args


@pytest.mark.parametrize("omni_api", ["base"], indirect=True)
async def test_a_speaker_embedding_clones_as_vllm_omni_builds_it(omni_api) -> None:
    """Base: the embedding becomes the talker's voice_clone_prompt (x-vector-only), as 0.30's adapter writes it; one
    of the talker's width is required."""
    client, omni = omni_api
    embedding = [round(0.001 * i, 3) for i in range(1024)]  # the 0.6B talker's hidden size
    body = {"input": "Hi there.", "task_type": "Base", "speaker_embedding": embedding, "response_format": "pcm"}
    response = await client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    capabilities = (await client.get("/v1/audio/capabilities")).json()
    assert (capabilities["speaker_embedding_dim"], capabilities["extra_params"]) == (1024, True)
    info = conditioning(omni)
    assert info["voice_clone_prompt"] == [{"ref_spk_embedding": embedding}]
    assert info["x_vector_only_mode"] == [True] and info["task_type"] == ["Base"]
    assert "ref_audio" not in info and "ref_code_length" not in info
    sent = len(omni.requests)
    short = await client.post("/v1/audio/speech", json={**body, "speaker_embedding": embedding[:512]})
    assert short.status_code == 400 and short.json()["error"]["param"] == "speaker_embedding"
    assert len(omni.requests) == sent


async def test_null_for_an_option_left_unset_is_the_option_omitted(omni_api) -> None:
    """JavaScript and generated clients send null for an optional field they leave unset, and so does the OpenAI SDK
    for an argument given as None: the default, as OpenAI's API reads it (`voice`, `speed`, `stream` and
    `response_format` were 400s, the extension fields not). `stream: null` is no `stream: false`: the audio streams."""
    client, omni = omni_api
    assert (await client.post("/v1/audio/speech", json={"input": "Hi there."})).status_code == 200
    default_voice = conditioning(omni)["speaker"]
    unset = dict.fromkeys(("voice", "speed", "stream", "stream_format", "response_format", "language", "seed"))
    response = await client.post("/v1/audio/speech", json={"input": "Hi there.", **unset})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/mpeg" and "content-length" not in response.headers
    assert conditioning(omni)["speaker"] == default_voice
    sdk = AsyncOpenAI(base_url="http://omni/v1", api_key="none", http_client=client)
    async with sdk.audio.speech.with_streaming_response.create(
        model=SERVED, voice="vivian", input="Hi there.", speed=None, response_format=None, instructions=None
    ) as answer:
        assert answer.headers["content-type"] == "audio/mpeg"
        assert len(await answer.read()) > 1000
