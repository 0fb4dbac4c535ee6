"""Clients written for vllm-omni's own speech server, unchanged, against this service on the real engine."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest

from tests.gpu.support import SAMPLES_PER_FRAME, model_of

TOKENS = 51  # -> 50 codec frames


def _post(url: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)


def test_a_body_without_model_speaks_with_the_served_model(omni_url: str) -> None:
    response = _post(
        omni_url, {"input": "No model named.", "voice": "vivian", "response_format": "pcm", "max_new_tokens": TOKENS}
    )
    assert response.status_code == 200, response.text
    assert len(response.content) == (TOKENS - 1) * SAMPLES_PER_FRAME * 2


def test_stream_true_is_sse(omni_url: str) -> None:
    body = {
        "model": model_of(omni_url),
        "input": "Events, please.",
        "voice": "vivian",
        "stream": True,
        "response_format": "pcm",
        "max_new_tokens": TOKENS,
    }
    with httpx.stream("POST", f"{omni_url}/v1/audio/speech", json=body, timeout=300) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert events[-1]["type"] == "speech.audio.done"
    assert len(audio) == (TOKENS - 1) * SAMPLES_PER_FRAME * 2


@pytest.mark.parametrize("initial", [4, 12])
def test_initial_codec_chunk_frames_sizes_the_first_audio(omni_url: str, initial: int) -> None:
    """The first window the engine sends holds exactly the frames asked for, and the whole response stays exact (the
    frame guard follows the request's geometry)."""
    body = {
        "model": model_of(omni_url),
        "input": "First chunk size.",
        "voice": "vivian",
        "response_format": "pcm",
        "max_new_tokens": TOKENS,
        "initial_codec_chunk_frames": initial,
    }
    offered = httpx.get(f"{omni_url}/v1/audio/capabilities", timeout=30).json()["initial_codec_chunk_frames"]
    if offered is None:  # a profile with a codec_chunk_ramp: vllm-omni would ignore the field, the service refuses it
        response = _post(omni_url, body)
        assert response.status_code == 400 and response.json()["error"]["param"] == "initial_codec_chunk_frames"
        return
    reads: list[tuple[float, int]] = []
    with httpx.stream("POST", f"{omni_url}/v1/audio/speech", json=body, timeout=300) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            reads.append((time.perf_counter(), len(chunk)))
    assert sum(n for _, n in reads) == (TOKENS - 1) * SAMPLES_PER_FRAME * 2
    first_burst, last_at = 0, reads[0][0]
    for at, n in reads:  # the first window arrives alone; the next one is 25 talker steps later
        if at - last_at > 0.04:
            break
        first_burst, last_at = first_burst + n, at
    assert first_burst == initial * SAMPLES_PER_FRAME * 2


@pytest.mark.parametrize("mode", [True, False])
def test_non_streaming_mode_is_accepted(omni_url: str, mode: bool) -> None:
    body = {
        "model": model_of(omni_url),
        "input": "Prompt mode.",
        "voice": "vivian",
        "response_format": "pcm",
        "max_new_tokens": TOKENS,
        "non_streaming_mode": mode,
    }
    response = _post(omni_url, body)
    assert response.status_code == 200, response.text
    assert len(response.content) == (TOKENS - 1) * SAMPLES_PER_FRAME * 2


def test_a_first_chunk_beyond_the_deployments_window_is_refused(omni_url: str) -> None:
    body = {"model": model_of(omni_url), "input": "Too big.", "voice": "vivian", "initial_codec_chunk_frames": 26}
    response = _post(omni_url, body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "initial_codec_chunk_frames"


def test_extra_params_sample_the_talker(omni_url: str) -> None:
    """vllm-omni 0.30's `extra_params` (temperature, top_k, top_p on the talker, the rest as its extra arguments)
    reach the real engine, which speaks every frame asked for. (Seeded requests are not reproducible on the real
    engine, measured on an H100, so what each value did to the sampling is checked in the unit tests.)"""
    body = {"input": "Sampled as asked.", "voice": "vivian", "response_format": "pcm", "max_new_tokens": TOKENS}
    for extra in ({"temperature": 0.3, "top_k": 5}, {"temperature": 1.0, "top_k": 50, "top_p": 0.9}):
        response = _post(omni_url, {**body, "extra_params": extra})
        assert response.status_code == 200, response.text
        assert len(response.content) == (TOKENS - 1) * SAMPLES_PER_FRAME * 2
