"""The omni engine through our HTTP API on a GPU: real vllm-omni two-stage synthesis (random weights, 0.6B shape)."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from loadtest.audio import decode
from tests.gpu.support import SAMPLES_PER_FRAME, model_of, speak
from tests.support.server import json_log_records

FORMATS = ["pcm", "wav", "mp3", "opus", "aac", "flac"]
TOKENS = 51  # -> 50 codec frames = 4.0 s of audio


@pytest.mark.parametrize("response_format", FORMATS)
def test_every_format_streams_and_decodes(omni_url: str, response_format: str) -> None:
    chunks = 0
    body = bytearray()
    payload = {
        "model": model_of(omni_url),
        "voice": "vivian",
        "input": "Every format streams.",
        "response_format": response_format,
        "max_new_tokens": TOKENS,
    }
    with httpx.stream("POST", f"{omni_url}/v1/audio/speech", json=payload, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_raw():
            chunks += 1
            body += chunk
    assert chunks >= 2  # the first window (1 frame) leaves before the rest
    audio = decode(bytes(body), response_format)
    assert audio.channels == 1
    expected = (TOKENS - 1) * SAMPLES_PER_FRAME / 24_000
    if response_format in ("pcm", "wav", "flac"):
        assert len(audio.samples) == (TOKENS - 1) * SAMPLES_PER_FRAME  # exactly what the talker generated
    else:
        assert abs(audio.duration_s - expected) < 0.15  # codec priming / padding only


def test_sse_events_and_usage(omni_url: str) -> None:
    response = speak(omni_url, response_format="pcm", stream_format="sse", max_new_tokens=TOKENS)
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    assert all(e["type"] == "speech.audio.delta" for e in events[:-1]) and len(events) >= 3
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2 * (TOKENS - 1) * SAMPLES_PER_FRAME
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == TOKENS - 1 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_voices_and_languages_come_from_the_model_config(omni_url: str) -> None:
    voices = httpx.get(f"{omni_url}/v1/audio/voices", timeout=30).json()["data"]
    ids = {v["id"] for v in voices}
    assert {"vivian", "serena", "ryan", "aiden", "uncle_fu", "ono_anna", "sohee", "eric", "dylan"} == ids
    assert all(v["engine"] == "omni" for v in voices)
    assert "English" in voices[0]["languages"] and "Chinese" in voices[0]["languages"]
    for language in ("English", "chinese", "Auto"):
        response = speak(omni_url, language=language, response_format="pcm", max_new_tokens=6)
        assert response.status_code == 200, (language, response.text)
    for voice in ("alloy", "Ryan"):  # an OpenAI alias, and a speaker in another case
        assert speak(omni_url, voice=voice, response_format="pcm", max_new_tokens=6).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"language": "Klingon"}, "language"),
        ({"voice": "nobody"}, "voice"),
        ({"task_type": "Base"}, "task_type"),
        ({"ref_audio": "UklGRg=="}, "ref_audio"),  # cloning on a CustomVoice checkpoint
        ({"max_new_tokens": 5000}, "max_new_tokens"),
        ({"instructions": "x" * 501}, "instructions"),
        ({"speed": 9}, "speed"),
    ],
)
def test_engine_mismatches_are_openai_errors(omni_url: str, body: dict[str, object], param: str) -> None:
    response = speak(omni_url, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_disconnect_aborts_the_engine_request(omni_url: str, server_log: Path) -> None:
    """vllm-omni logs "[Orchestrator] Aborted request(s) ['<our request id>-<suffix>']" once the engine has dropped
    the request (its gauges are only refreshed by later scheduler steps, so they cannot tell)."""
    request_id = f"gpu-abort-{uuid.uuid4().hex[:12]}"
    payload = {
        "model": model_of(omni_url),
        "voice": "vivian",
        "input": "A long one.",
        "response_format": "pcm",
        "max_new_tokens": 3000,
    }  # 4 minutes of audio: far longer than the test waits
    with httpx.stream(
        "POST", f"{omni_url}/v1/audio/speech", json=payload, timeout=300, headers={"X-Request-Id": request_id}
    ) as response:
        assert response.status_code == 200
        assert next(response.iter_raw())
    deadline = time.monotonic() + 5
    aborted = re.compile(r"Aborted request\(s\) \['" + re.escape(request_id))
    while not aborted.search(server_log.read_text(errors="replace")):
        assert time.monotonic() < deadline, "the engine did not abort the abandoned request within 5 s"
        time.sleep(0.01)
    assert speak(omni_url, response_format="pcm", max_new_tokens=6).status_code == 200


def test_metrics_expose_vllm_omni_families(omni_url: str) -> None:
    text = httpx.get(f"{omni_url}/metrics", timeout=30).text
    assert "vllm_omni:" in text and "vllm:" in text


@pytest.mark.parametrize("concurrency", [32, 64])
def test_audio_length_integrity_under_load(omni_url: str, concurrency: int) -> None:
    """Every response holds exactly the frames the talker generated (100 tokens -> 99 frames), at c=32 and c=64."""
    tokens = 100

    def one(i: int) -> int:
        response = speak(omni_url, input=f"Integrity check number {i}.", response_format="pcm", max_new_tokens=tokens)
        assert response.status_code == 200, response.text
        return len(response.content) // 2

    for _ in range(2):  # twice: the first round at a new batch size also pays its JIT
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            lengths = list(pool.map(one, range(concurrency)))
        wrong = [n / SAMPLES_PER_FRAME for n in lengths if n != (tokens - 1) * SAMPLES_PER_FRAME]
        assert not wrong, f"{len(wrong)} of {concurrency} responses had the wrong length (frames): {wrong}"
    silent = speak(omni_url, response_format="pcm", max_new_tokens=tokens).content
    assert np.abs(np.frombuffer(silent, "<i2")).max() > 0  # random weights still make (noisy) audio


def test_sentence_pipeline_speaks_every_sentence(omni_url: str, server_log: Path, sentence_tokens: int) -> None:
    """Three sentences, no token budget: the pipeline sends each sentence to vllm-omni as its own request (their
    ids extend the job id in the server's log) and streams the first while the next is made. The joiner trims the
    silent edges of each utterance, so the audio is at most three sentences and their pauses."""
    request_id = f"gpu-pipeline-{uuid.uuid4().hex[:12]}"
    sentences = ["The first sentence is here.", "A second one follows it.", "And the third one ends it."]
    started = time.perf_counter()
    first_audio: float | None = None
    body = bytearray()
    payload = {"model": model_of(omni_url), "voice": "vivian", "input": " ".join(sentences), "response_format": "pcm"}
    headers = {"X-Request-Id": request_id}
    with httpx.stream("POST", f"{omni_url}/v1/audio/speech", json=payload, timeout=300, headers=headers) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_raw():
            if chunk and first_audio is None:
                first_audio = time.perf_counter() - started
            body += chunk
    assert first_audio is not None and first_audio < 1.0
    one = (sentence_tokens - 1) * SAMPLES_PER_FRAME
    assert 0 < len(body) // 2 <= 3 * one + 2 * 24_000 // 4  # three utterances, two quarter-second pauses at most
    deadline = time.monotonic() + 5  # the request's log record is written as its response ends: it may trail
    while True:
        log = server_log.read_text(errors="replace")
        jobs = [r["job_id"] for r in json_log_records(log) if r.get("request_id") == request_id and "job_id" in r]
        if jobs:
            break
        assert time.monotonic() < deadline, "the request was not logged"
        time.sleep(0.05)
    job_id = jobs[0]
    assert "[OmniTiming]" in log, "no vllm-omni request summary in the log: start the server with the summaries on"
    engine_requests = set(re.findall(r"\[OmniTiming\] req=(" + re.escape(job_id) + r"-\w+)", log))
    assert len(engine_requests) == 3, engine_requests


def test_code2wav_runs_first_audio_first(omni_url: str, server_log: Path) -> None:
    """vLLM loaded the service's code2wav scheduler, and on the real engine new streams' first windows made streams
    holding enough audio sit out a step (its probe lines count them). Needs the profile's engine probes on."""
    log = server_log.read_text(errors="replace")
    assert (
        "Using custom scheduler class app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler" in log
    )
    settings = re.search(r"code2wav scheduler: first audio first[^(]*\(margin ([\d.]+) s.*probe every (\d+) s", log)
    assert settings, "the scheduler did not log its settings"
    margin, interval = float(settings.group(1)), int(settings.group(2))
    if margin <= 0 or interval <= 0:
        pytest.skip(f"the profile turns the policy ({margin}) or the probes ({interval}) off")
    probes_before = log.count("code2wav probe")

    def one(i: int) -> int:
        time.sleep(0.15 * (i % 12))  # arrivals spread out: later streams start while earlier ones play
        response = speak(omni_url, input=f"Stream {i}.", response_format="pcm", max_new_tokens=150)
        assert response.status_code == 200, response.text
        return len(response.content) // 2

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        lengths = list(pool.map(one, range(48)))
    assert set(lengths) == {149 * SAMPLES_PER_FRAME}
    deadline = time.monotonic() + interval + 10
    while True:
        lines = server_log.read_text(errors="replace").split("code2wav probe")[probes_before + 1 :]
        deferred = sum(int(m) for line in lines for m in re.findall(r"'deferred_windows': (\d+)", line[:400]))
        firsts = sum(int(m) for line in lines for m in re.findall(r"'first_windows': (\d+)", line[:400]))
        if firsts >= 48:
            break
        assert time.monotonic() < deadline, f"probe lines counted {firsts} first windows of 48"
        # a probe line is written by the scheduler's next step once its interval is over: keep it stepping
        assert speak(omni_url, response_format="pcm", max_new_tokens=4).status_code == 200
        time.sleep(1)
    assert deferred > 0, "no stream sat out a step for a first window"


def test_code2wav_counts_its_eager_windows(omni_url: str, server_log: Path) -> None:
    """With the profile's engine probes on, the service asks vllm-omni's code2wav decoder to count the windows it
    decoded in a CUDA graph and those that fell back to eager; on the real engine it logs them."""
    log = server_log.read_text(errors="replace")
    settings = re.search(r"code2wav scheduler: first audio first[^(]*\(margin [\d.]+ s.*probe every (\d+) s", log)
    assert settings, "the scheduler did not log its settings"
    if int(settings.group(1)) <= 0:
        pytest.skip("the profile turns the engine probes off")
    if "Code2Wav decoder CUDA Graph enabled" not in log:
        # vLLM's dummy loader skips code2wav's load_weights, where vllm-omni 0.30.0 turns the decoder's graphs on
        pytest.skip("the code2wav decoder runs without its CUDA graphs (random weights?), so it counts nothing")
    # vllm-omni 0.30.0's segmented decoder graphs (segmented_graph_wrapper.py, log_decode_stats): requests decoded
    # in a graph (hits) and eagerly (fallbacks)
    stats = r"Segmented Code2Wav CUDA Graph stats: requests=(\d+) hits=(\d+) fallbacks=(\d+)"

    def one(i: int) -> None:
        response = speak(omni_url, input=f"Count {i}.", response_format="pcm", max_new_tokens=150)
        assert response.status_code == 200, response.text

    deadline = time.monotonic() + 180
    while not re.search(stats, server_log.read_text(errors="replace")):
        assert time.monotonic() < deadline, "the decoder never logged its CUDA graph stats"
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(32)))
        time.sleep(1)
    total, hits, fallbacks = (int(n) for n in re.findall(stats, server_log.read_text(errors="replace"))[-1])
    assert total == hits + fallbacks and total >= 500, (total, hits, fallbacks)


def test_code2wav_captured_every_decoder_graph_the_profile_asks_for(server_log: Path) -> None:
    """Each decoder graph holds GPU memory for good; a list that does not fit leaves graphs uncaptured (their
    windows run eagerly) or, as the profile once did (every batch up to 16: 70 GiB), stops code2wav from starting."""
    log = server_log.read_text(errors="replace")
    if "Code2Wav decoder CUDA Graph enabled" not in log:
        pytest.skip("the code2wav decoder runs without its CUDA graphs (random weights?): it captured none")
    # vllm-omni 0.30.0 captures the stateful decoder's graphs segment by segment and logs each one, or its failure
    # ("Failed to capture ... CUDA Graph" / "... graph"), in segmented_graph_wrapper.py
    assert not re.search(r"Failed to capture .*(CUDA Graph|graph) for batch", log), "a decoder graph was not captured"
    captured = re.findall(r"Captured (?:ICL prefix|xvec prefix|combined suffix|xvec suffix) CUDA Graph", log)
    assert captured, "code2wav captured no decoder graph"
