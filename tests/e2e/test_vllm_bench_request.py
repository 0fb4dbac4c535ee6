"""`vllm bench serve --omni --backend openai-audio-speech` against the real server, replayed with its own HTTP client
(aiohttp), written from reading vllm-omni 0.30.0's request function (`vllm_omni/benchmarks/patch/patch.py`,
`async_request_openai_audio_speech`) and vLLM 0.30.0's `_update_payload_common` / `_update_headers_common`
(`vllm/benchmarks/lib/endpoint_request_func.py`):

- the body: `model`, `input`, `stream: true`, `stream_format: "audio"`, `response_format: "pcm"`, then
  `ignore_eos: true` (vLLM sets it for every request of its `random` dataset), then `--extra-body` merged over it;
- the headers: `Content-Type: application/json`, `Authorization: Bearer <OPENAI_API_KEY>` (the text `None` when the
  variable is unset), `x-request-id`;
- the body is read with `iter_any()` and counted as 16-bit pcm; anything but 200 fails the request.

On the embedded engine (no end-of-speech token, no `max_new_tokens`) `ignore_eos` changes nothing; on the omni engine
(the vllm-omni stand-in, whose talker stops at its end-of-speech token after 40 frames unless held back) it makes the
audio exactly `max_new_tokens` frames long."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import pytest

from tests.support.server import RunningServer, start_fake_omni

SAMPLES_PER_FRAME = 1920  # Qwen3-TTS: 80 ms at 24 kHz
PROMPT = "The quick brown fox jumps over the lazy dog, and then it runs back home."


@dataclass
class BenchOutcome:
    """What the benchmark's request function records of one request."""

    status: int
    reason: str
    pcm_bytes: int
    chunks: int


async def bench_request(base_url: str, model: str, prompt: str, extra_body: dict[str, Any]) -> BenchOutcome:
    """One request as `async_request_openai_audio_speech` sends and reads it."""
    payload: dict[str, Any] = {
        "model": model,
        "input": prompt,
        "stream": True,
        "stream_format": "audio",
        "response_format": "pcm",
    }
    payload["ignore_eos"] = True  # vLLM's _update_payload_common, for the random dataset
    payload.update(extra_body)  # then --extra-body
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY')}",
        "x-request-id": f"bench-{uuid.uuid4().hex[:8]}",  # vLLM's request ids are its own prefix and a counter
    }
    pcm_bytes = chunks = 0
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{base_url}/v1/audio/speech", json=payload, headers=headers) as response,
    ):
        if response.status == 200:
            async for chunk in response.content.iter_any():
                if chunk:
                    pcm_bytes += len(chunk)
                    chunks += 1
        return BenchOutcome(response.status, response.reason or "", pcm_bytes, chunks)


def replay(base_url: str, model: str, prompt: str, extra_body: dict[str, Any]) -> BenchOutcome:
    return asyncio.run(bench_request(base_url, model, prompt, extra_body))


def served_model(server: RunningServer) -> str:
    return httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def omni(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The service on the omni engine over the vllm-omni 0.30 stand-in, with the shipped profile."""
    server = start_fake_omni(tmp_path_factory.mktemp("bench-omni"), SPEECH_OMNI__SERVED_MODEL_NAME="qwen3-tts")
    yield server
    server.stop()


@pytest.mark.skipif(bool(os.environ.get("OPENAI_API_KEY")), reason="replays the header of a client with no key set")
def test_the_benchmark_request_streams_pcm_from_the_embedded_engine(server: RunningServer) -> None:
    """The request of a run with no --extra-body: the default voice, `ignore_eos` meaning nothing to this engine."""
    outcome = replay(server.base_url, served_model(server), PROMPT, {})
    assert (outcome.status, outcome.reason) == (200, "OK")
    assert outcome.pcm_bytes % 2 == 0 and outcome.pcm_bytes / 2 / 24_000 > 2.0  # a whole sentence of speech
    # the same words without the benchmark's fields: the same length of speech
    plain = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={"input": PROMPT, "response_format": "pcm", "model": served_model(server)},
        timeout=120,
    )
    assert plain.status_code == 200 and abs(len(plain.content) - outcome.pcm_bytes) <= 0.05 * outcome.pcm_bytes


def test_max_new_tokens_is_still_refused_by_the_embedded_engine_naming_the_field(server: RunningServer) -> None:
    """The issue's --extra-body asks for a length this engine cannot set: a 400 naming it, never a silent other
    length."""
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={"input": PROMPT, "response_format": "pcm", "ignore_eos": True, "max_new_tokens": 101},
        timeout=60,
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "max_new_tokens"


@pytest.mark.skipif(bool(os.environ.get("OPENAI_API_KEY")), reason="replays the header of a client with no key set")
def test_the_benchmark_request_runs_to_max_new_tokens_on_the_omni_engine(omni: RunningServer) -> None:
    """The issue's run: `--extra-body '{"voice": "vivian", "max_new_tokens": 101}'`. Every request is 100 frames (the
    stand-in's talker sends every frame but the last token's), not the 39 at which it otherwise stops."""
    extra = {"voice": "vivian", "max_new_tokens": 101}
    outcome = replay(omni.base_url, "qwen3-tts", PROMPT, extra)
    assert (outcome.status, outcome.reason) == (200, "OK")
    assert outcome.pcm_bytes == 100 * SAMPLES_PER_FRAME * 2
    assert outcome.chunks > 1  # streamed as it was decoded, not one body at the end
    stopped = httpx.post(
        f"{omni.base_url}/v1/audio/speech",
        json={"model": "qwen3-tts", "input": PROMPT, "response_format": "pcm", **extra},
        timeout=60,
    )
    assert stopped.status_code == 200 and len(stopped.content) == 39 * SAMPLES_PER_FRAME * 2


def test_ignore_eos_without_a_length_lets_the_model_end_the_speech(omni: RunningServer) -> None:
    """No max_new_tokens: no length to run to, so the talker stops where it ends the speech, as without the field."""
    body = {"model": "qwen3-tts", "input": PROMPT, "voice": "vivian", "response_format": "pcm"}
    with_field = httpx.post(f"{omni.base_url}/v1/audio/speech", json={**body, "ignore_eos": True}, timeout=60)
    without = httpx.post(f"{omni.base_url}/v1/audio/speech", json=body, timeout=60)
    assert with_field.status_code == without.status_code == 200
    assert len(with_field.content) == len(without.content) == 39 * SAMPLES_PER_FRAME * 2


@pytest.mark.parametrize("value", ["yes", 1])  # (null is the field omitted: tests/unit/test_json_bodies.py)
def test_ignore_eos_that_is_not_a_boolean_is_a_400_naming_it(server: RunningServer, value: object) -> None:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json={"input": "Hi.", "ignore_eos": value}, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "ignore_eos"
