"""The service on its sglang engine (sglang-omni 0.1.8 in the server's process) through our HTTP API on a GPU: real
talker, code predictor and streaming codec decoder (talker on random weights, 0.6B shape, SPEECH_SGLANG__FIXED_LENGTH,
so that a request for N tokens returns exactly N codec frames: sglang-omni counts frames, no end token).

SPEECH_GPU_SGLANG_URL: a CustomVoice server; SPEECH_GPU_SGLANG_CLONE_URL: a Base one; SPEECH_GPU_SGLANG_LOG: the
CustomVoice server's log. `test_engine_death` kills that server's pipeline: run it last, on its own (-k death).
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import signal
import time
import uuid

import httpx
import numpy as np
import pytest

from loadtest.audio import decode
from tests.gpu.support import SAMPLES_PER_FRAME, model_of, speak
from tests.gpu.test_omni_voice_clone import reference_wav

FORMATS = ["pcm", "wav", "mp3", "opus", "aac", "flac"]
FRAMES = 50


def _url(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set: no server on the sglang engine to test")
    return value.rstrip("/")


@pytest.fixture(scope="module")
def sglang_url() -> str:
    return _url("SPEECH_GPU_SGLANG_URL")


@pytest.fixture(scope="module")
def sglang_clone_url() -> str:
    return _url("SPEECH_GPU_SGLANG_CLONE_URL")


@pytest.mark.parametrize("response_format", FORMATS)
def test_every_format_streams_and_decodes(sglang_url: str, response_format: str) -> None:
    chunks, body = 0, bytearray()
    payload = {
        "model": model_of(sglang_url),
        "voice": "vivian",
        "input": "Every format streams.",
        "response_format": response_format,
        "max_new_tokens": FRAMES,
    }
    with httpx.stream("POST", f"{sglang_url}/v1/audio/speech", json=payload, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_raw():
            chunks += 1
            body += chunk
    assert chunks >= 2
    audio = decode(bytes(body), response_format)
    if response_format in ("pcm", "wav", "flac"):
        assert len(audio.samples) == FRAMES * SAMPLES_PER_FRAME
    else:
        assert abs(audio.duration_s - FRAMES * 0.08) < 0.15


def test_sse_usage_and_a_whole_file(sglang_url: str) -> None:
    response = speak(sglang_url, response_format="pcm", stream_format="sse", max_new_tokens=FRAMES)
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] == FRAMES
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2 * FRAMES * SAMPLES_PER_FRAME
    whole = speak(sglang_url, response_format="wav", stream=False, max_new_tokens=FRAMES)
    assert whole.status_code == 200 and len(decode(whole.content, "wav").samples) == FRAMES * SAMPLES_PER_FRAME


def test_speed_stretches_time_and_refusals_name_the_field(sglang_url: str) -> None:
    fast = speak(sglang_url, response_format="pcm", speed=2.0, max_new_tokens=FRAMES)
    assert fast.status_code == 200
    assert len(fast.content) // 2 == pytest.approx(FRAMES * SAMPLES_PER_FRAME / 2, rel=0.02)
    refused = speak(sglang_url, speaker_embedding=[0.1] * 1024, task_type="CustomVoice")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "speaker_embedding"
    refused = speak(sglang_url, non_streaming_mode=False)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "non_streaming_mode"


@pytest.mark.parametrize("concurrency", [32, 64])
def test_audio_length_integrity_under_load(sglang_url: str, concurrency: int) -> None:
    """Every response holds exactly the frames asked for, at c=32 and c=64, twice."""

    def one(i: int) -> int:
        response = speak(sglang_url, input=f"Integrity check {uuid.uuid4().hex[:6]} {i}.", response_format="pcm",
                         max_new_tokens=100)  # fmt: skip
        assert response.status_code == 200, response.text
        return len(response.content) // 2

    for _ in range(2):
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            lengths = list(pool.map(one, range(concurrency)))
        wrong = [n / SAMPLES_PER_FRAME for n in lengths if n != 100 * SAMPLES_PER_FRAME]
        assert not wrong, f"{len(wrong)} of {concurrency} responses had the wrong length (frames): {wrong}"


def test_a_client_that_leaves_frees_its_slot(sglang_url: str) -> None:
    before = _metric(sglang_url, "speech_aborted_total")
    payload = {"model": model_of(sglang_url), "voice": "vivian", "input": "A long one.", "response_format": "pcm",
               "max_new_tokens": 3000}  # fmt: skip
    with httpx.stream("POST", f"{sglang_url}/v1/audio/speech", json=payload, timeout=300) as response:
        assert response.status_code == 200 and next(response.iter_raw())
    deadline = time.monotonic() + 5
    while _metric(sglang_url, "speech_aborted_total") <= before or _metric(sglang_url, "speech_in_flight") > 0:
        assert time.monotonic() < deadline, "the abandoned request was not aborted, nor its slot freed, within 5 s"
        time.sleep(0.05)


def _metric(url: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_clone_in_context_and_x_vector_only(sglang_clone_url: str) -> None:
    transcript = "This is the reference transcript."
    response = speak(sglang_clone_url, input="Cloned speech.", ref_audio=reference_wav(), ref_text=transcript,
                     response_format="wav", max_new_tokens=25)  # fmt: skip
    assert response.status_code == 200, response.text
    assert len(decode(response.content, "wav").samples) == 25 * SAMPLES_PER_FRAME
    response = speak(sglang_clone_url, input="Only the speaker.", ref_audio=reference_wav(), x_vector_only_mode=True,
                     response_format="pcm", max_new_tokens=25)  # fmt: skip
    assert response.status_code == 200, response.text
    assert len(response.content) == 2 * 25 * SAMPLES_PER_FRAME
    assert np.abs(np.frombuffer(response.content, "<i2")).max() > 0


def test_engine_death(sglang_url: str) -> None:
    """The pipeline's process killed: /ready fails within 5 s and stays failed; liveness fails too."""
    pid = int(os.environ["SPEECH_GPU_SGLANG_PIPELINE_PID"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while httpx.get(f"{sglang_url}/ready", timeout=5).status_code == 200:
        assert time.monotonic() < deadline, "/ready still answered 200 five seconds after the pipeline died"
        time.sleep(0.1)
    assert speak(sglang_url, max_new_tokens=4).status_code == 503
