"""The sglang engine behind the real server (tests/fakes/sglang_server.py: a `speech-server` process over the
sglang-omni 0.1.8 stand-ins), through real clients: every format streamed and whole, SSE with its usage, speed, the
WebSocket text stream, the batch endpoint, cloning on a Base checkpoint (a reference, x-vector only, a registered
voice), what the engine refuses, admission, the pipeline's death and a client that leaves.

The stand-in's talker speaks `4 + 3 * words` codec frames of 1920 samples at 24 kHz (fewer with `max_new_tokens`), and
its tokenizer counts one token a word: every duration and count below follows from the text."""

from __future__ import annotations

import base64
import json
import math
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from websockets.sync.client import connect

from loadtest.audio import decode
from tests.support.server import RunningServer, start_fake_sglang
from tests.support.wav import tone_wav

RATE, FRAME = 24_000, 1920
FORMATS = ["pcm", "wav", "mp3", "opus", "aac", "flac"]
LOSSLESS = {"pcm", "wav", "flac"}
TEXT = "The quick brown fox jumps over the lazy dog."  # 9 words: 31 frames, 2.48 s
REFERENCE_S = 3.0  # an in-context clone prefills its reference's frames: ceil(3.0 * 12.5) = 38
LONG = " ".join(["Streaming speech keeps going for a good while longer."] * 20)  # 180 words: 14.72 s


def frames(text: str) -> int:
    return 4 + 3 * len(text.split())


def seconds(count: int) -> float:
    return count * FRAME / RATE


def speech(server: RunningServer, timeout: float = 30, **body: object) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/audio/speech", json={"input": TEXT, **body}, timeout=timeout)


def sdk(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="not-needed", max_retries=0)


def sse_events(response: httpx.Response) -> list[dict[str, object]]:
    assert response.status_code == 200, response.text
    return [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]


def wait_idle(server: RunningServer, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while server.metric("speech_in_flight") != 0:
        assert time.monotonic() < deadline, "a request still holds its slot"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def custom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A CustomVoice checkpoint, the stand-in at full speed, its profiler on request."""
    folder = tmp_path_factory.mktemp("sglang-custom")
    server = start_fake_sglang(folder, SPEECH_PROFILER_DIR=str(folder / "profiles"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A Base checkpoint: it clones."""
    server = start_fake_sglang(tmp_path_factory.mktemp("sglang-base"), variant="base")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One slot, no queue, and a window of audio every 200 ms."""
    folder = tmp_path_factory.mktemp("sglang-slow")
    server = start_fake_sglang(folder, "--step-delay-s", "0.2", SPEECH_MAX_CONCURRENCY="1", SPEECH_MAX_QUEUE="0")
    yield server
    server.stop()


# -- audio -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole-file"])
@pytest.mark.parametrize("response_format", FORMATS)
def test_every_format_decodes_to_the_talkers_length(custom: RunningServer, response_format: str, whole: bool) -> None:
    expected = frames(TEXT)
    if whole:  # vllm-omni's `stream: false`: one file with its length and its usage in headers
        response = speech(custom, voice="vivian", response_format=response_format, stream=False)
        assert response.status_code == 200, response.text
        assert int(response.headers["content-length"]) == len(response.content)
        assert int(response.headers["x-vllm-omni-output-tokens"]) == expected
        assert int(response.headers["x-vllm-omni-input-tokens"]) == len(TEXT.split())
        data = response.content
    else:  # streamed, read through the OpenAI SDK
        with sdk(custom).audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format=response_format
        ) as streamed:
            assert streamed.headers.get("transfer-encoding") == "chunked"
            data = b"".join(streamed.iter_bytes())
    audio = decode(data, response_format)
    assert audio.channels == 1 and audio.sample_rate == (48_000 if response_format == "opus" else RATE)
    if response_format in LOSSLESS:
        assert len(audio.samples) == expected * FRAME
    else:  # a lossy codec pads to its own frames
        assert abs(audio.duration_s - seconds(expected)) <= 0.1, audio.duration_s


def test_a_stream_is_measured_by_every_speech_metric(custom: RunningServer) -> None:
    """One streamed request on this engine: each TTFA phase, the time to uninterrupted audio, the ran-dry series, the
    RTF, E2E and the seconds of audio, each observed once for it; the start's phases as the engine reported them."""

    def now() -> dict[str, float]:
        values = {
            "ttfa": custom.metric("speech_ttfa_seconds_count", response_format="pcm", stream="audio"),
            "uninterrupted": custom.metric("speech_uninterrupted_seconds_count", response_format="pcm", stream="audio"),
            "rtf": custom.metric("speech_rtf_count"),
            "rtf_sum": custom.metric("speech_rtf_sum"),
            "e2e": custom.metric("speech_e2e_seconds_count", stream="audio"),
            "audio_s": custom.metric("speech_audio_seconds_total"),
            "dry": custom.metric("speech_streams_ran_dry_total", response_format="pcm", stream="audio"),
            "engine_s": custom.metric("speech_ttfa_phase_seconds_sum", phase="engine"),
        }
        for phase in ("validate", "queue", "prepare", "engine", "encode_write"):
            values[phase] = custom.metric("speech_ttfa_phase_seconds_count", phase=phase)
        return values

    wait_idle(custom)
    before = now()
    with httpx.stream(
        "POST", f"{custom.base_url}/v1/audio/speech", json={"input": TEXT, "voice": "vivian", "response_format": "pcm"}
    ) as response:
        assert response.status_code == 200
        assert len(response.read()) == frames(TEXT) * FRAME * 2
    wait_idle(custom)
    after = now()
    for key in ("ttfa", "uninterrupted", "rtf", "e2e", "validate", "queue", "prepare", "engine", "encode_write"):
        assert after[key] - before[key] == 1, key
    assert after["engine_s"] > before["engine_s"] and after["rtf_sum"] > before["rtf_sum"]
    assert after["audio_s"] - before["audio_s"] == pytest.approx(seconds(frames(TEXT)))
    assert after["dry"] - before["dry"] in (0, 1)  # the series is this stream's, whether or not it ran dry
    text = httpx.get(f"{custom.base_url}/metrics", timeout=30).text
    assert 'speech_streams_ran_dry_total{response_format="pcm",stream="audio"}' in text
    assert 'engine="sglang"' in next(line for line in text.splitlines() if line.startswith("speech_build_info"))
    assert custom.metric("speech_start_seconds", phase="total") > 0
    for phase in ("imports", "pipeline", "warmup"):  # the stand-in's take well under the 0.1 s they are rounded to
        assert f'speech_start_seconds{{phase="{phase}"}}' in text, phase


def test_max_new_tokens_cuts_the_talker_short(custom: RunningServer) -> None:
    response = speech(custom, voice="vivian", response_format="pcm", max_new_tokens=10)
    assert response.status_code == 200, response.text
    assert len(response.content) == 10 * FRAME * 2


def test_sse_streams_deltas_then_done_with_the_usage(custom: RunningServer) -> None:
    events = sse_events(speech(custom, voice="vivian", response_format="pcm", stream_format="sse"))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) > 2
    pcm = b"".join(base64.b64decode(str(event["audio"])) for event in events[:-1])
    assert len(pcm) == frames(TEXT) * FRAME * 2
    words = len(TEXT.split())
    assert events[-1]["usage"] == {
        "input_tokens": words,
        "output_tokens": frames(TEXT),
        "total_tokens": words + frames(TEXT),
        "input_token_details": {"text_tokens": words, "audio_tokens": 0},
    }


def test_speed_two_halves_the_duration_at_the_same_rate(custom: RunningServer) -> None:
    normal = decode(speech(custom, voice="vivian", response_format="wav").content, "wav")
    fast = decode(speech(custom, voice="vivian", response_format="wav", speed=2.0).content, "wav")
    assert fast.sample_rate == normal.sample_rate == RATE
    assert abs(fast.duration_s / normal.duration_s - 0.5) <= 0.01, fast.duration_s / normal.duration_s


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_word_timestamps_time_every_word_within_the_audio_heard(custom: RunningServer, speed: float) -> None:
    """Qwen3-TTS times no words itself: the forced aligner times them on the audio as sent, stretched included. The
    stand-in speaks noise, so this checks the words, their order and their bounds, not their accuracy."""
    text = "Every word is timed here."
    body = {"voice": "vivian", "input": text, "response_format": "pcm", "stream_format": "sse", "speed": speed}
    events = sse_events(speech(custom, word_timestamps=True, language="English", **body))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and kinds.count("speech.audio.timestamps") == 1 and "error" not in kinds
    pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    duration_ms = len(pcm) / 2 / RATE * 1000
    assert duration_ms == pytest.approx(seconds(frames(text)) * 1000 / speed, rel=0.02)
    words = next(e for e in events if e["type"] == "speech.audio.timestamps")["words"]
    assert [w["word"] for w in words] == ["Every", "word", "is", "timed", "here"]  # type: ignore[union-attr]
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= duration_ms + 0.5 for w in words), (words, duration_ms)


def test_the_websocket_text_stream_speaks_each_sentence(custom: RunningServer) -> None:
    sentences = ["Hello from the sglang engine.", "Text arrives in pieces."]
    with connect(custom.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream") as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "vivian", "response_format": "pcm"}))
        for piece in ("Hello from the sg", "lang engine. Text arri", "ves in pieces."):
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        events, audio, current = [], {}, -1
        while not events or events[-1]["type"] not in ("session.done", "error"):
            message = ws.recv(timeout=30)
            if isinstance(message, bytes):
                audio[current] = audio.get(current, b"") + message
                continue
            events.append(json.loads(message))
            if events[-1]["type"] == "audio.start":
                current = int(events[-1]["sentence_index"])
    assert [e["type"] for e in events] == ["audio.start", "audio.done", "audio.start", "audio.done", "session.done"]
    assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == sentences
    assert [len(audio[i]) for i in (0, 1)] == [frames(s) * FRAME * 2 for s in sentences]


def test_the_batch_endpoint_returns_every_item(custom: RunningServer) -> None:
    items = [
        {"input": TEXT},
        {"input": "Second item here.", "response_format": "mp3", "voice": "ryan"},
        {"input": "A third one, cut short.", "response_format": "flac", "max_new_tokens": 5},
    ]
    response = httpx.post(
        f"{custom.base_url}/v1/audio/speech/batch", json={"voice": "vivian", "items": items}, timeout=60
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["total"], answer["succeeded"], answer["failed"]) == (3, 3, 0)
    expected = [frames(TEXT), frames(items[1]["input"]), 5]
    for result, fmt, count in zip(answer["results"], ["wav", "mp3", "flac"], expected, strict=True):
        assert result["status"] == "success" and result["usage"]["output_tokens"] == count, result.get("error")
        audio = decode(base64.b64decode(result["audio_data"]), fmt)
        assert abs(audio.duration_s - seconds(count)) <= 0.1, (fmt, audio.duration_s)


# -- cloning (Base) ----------------------------------------------------------------------------------------------------


def reference_wav() -> bytes:
    return tone_wav(REFERENCE_S, RATE)


@pytest.mark.parametrize(
    ("fields", "audio_tokens"),
    [({"ref_text": "A steady tone."}, math.ceil(REFERENCE_S * 12.5)), ({"x_vector_only_mode": True}, 0)],
    ids=["in-context", "x-vector-only"],
)
def test_cloning_from_a_reference(base: RunningServer, fields: dict[str, object], audio_tokens: int) -> None:
    ref_audio = base64.b64encode(reference_wav()).decode()
    response = speech(base, response_format="wav", ref_audio=ref_audio, stream=False, **fields)
    assert response.status_code == 200, response.text
    assert int(response.headers["x-vllm-omni-input-audio-tokens"]) == audio_tokens  # the reference reached the talker
    assert int(response.headers["x-vllm-omni-output-tokens"]) == frames(TEXT)
    assert len(decode(response.content, "wav").samples) == frames(TEXT) * FRAME


def test_a_registered_voice_is_used_by_name(base: RunningServer) -> None:
    created = httpx.post(
        f"{base.base_url}/v1/audio/voices",
        data={"name": "tone-voice", "consent": "true", "ref_text": "A steady tone."},
        files={"audio_sample": ("tone.wav", reference_wav(), "audio/wav")},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    assert created.json()["has_ref_text"] is True
    try:
        response = speech(base, voice="tone-voice", response_format="pcm", stream=False)
        assert response.status_code == 200, response.text
        assert int(response.headers["x-vllm-omni-input-audio-tokens"]) == math.ceil(REFERENCE_S * 12.5)
        assert len(response.content) == frames(TEXT) * FRAME * 2
        unknown = speech(base, voice="no-such-voice", response_format="pcm")
        assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "voice"
    finally:
        httpx.delete(f"{base.base_url}/v1/audio/voices/tone-voice", timeout=30)


# -- refusals ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"non_streaming_mode": False}, "non_streaming_mode"),
        ({"ignore_eos": True, "max_new_tokens": 50}, "ignore_eos"),  # not in fixed-length mode
        ({"extra_params": {"min_p": 0.1}}, "extra_params"),
    ],
)
def test_what_sglang_omni_cannot_do_is_an_openai_400_naming_the_field(
    custom: RunningServer, fields: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(custom).audio.speech.create(model="tts-1", voice="vivian", input=TEXT, extra_body=fields)
    assert refused.value.status_code == 400 and refused.value.param == param
    assert refused.value.body["type"] == "invalid_request_error" and refused.value.body["message"]


def test_a_speaker_embedding_is_refused_on_the_base_model(base: RunningServer) -> None:
    response = speech(base, response_format="pcm", speaker_embedding=[0.1] * 1024)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "speaker_embedding" and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}


# -- admission and disconnects (one slot, a slow pipeline) -------------------------------------------------------------


def test_a_second_request_past_the_one_slot_is_refused_429_with_retry_after(slow: RunningServer) -> None:
    wait_idle(slow)
    body = {"input": LONG, "voice": "vivian", "response_format": "pcm"}
    with httpx.stream("POST", f"{slow.base_url}/v1/audio/speech", json=body, timeout=30) as first:
        assert first.status_code == 200
        chunks = first.iter_raw()  # kept: a dropped iterator closes the response
        next(chunks)  # streaming: the slot is held
        refused = speech(slow, voice="vivian", response_format="pcm")
        assert len(next(chunks)) > 0  # the first stream goes on
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_client_that_leaves_mid_stream_aborts_its_engine_request(slow: RunningServer) -> None:
    wait_idle(slow)
    before = slow.metric("speech_aborted_total", reason="client_gone")
    request_id = "sglang-leaves"
    body = {"input": LONG, "voice": "vivian", "response_format": "pcm"}
    url = f"{slow.base_url}/v1/audio/speech"
    with httpx.stream("POST", url, json=body, headers={"X-Request-Id": request_id}, timeout=30) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()  # kept: a dropped iterator closes the response at once
        next(chunks)
        next(chunks)  # then leave, 14 s of audio unheard
    deadline = time.monotonic() + 10
    while slow.metric("speech_aborted_total", reason="client_gone") <= before:
        assert time.monotonic() < deadline, "the engine request was not aborted"
        time.sleep(0.05)
    records = [e for e in slow.log_events() if e.get("request_id") == request_id]
    [record] = [e for e in records if e.get("message") == "speech request"]
    assert record["outcome"] == "client_gone" and record["completed"] is False, record
    wait_idle(slow)  # the one slot is free again, long before the 14 s of audio would have been made
    assert speech(slow, voice="vivian", response_format="pcm", max_new_tokens=3).status_code == 200


# -- the pipeline's death ----------------------------------------------------------------------------------------------


def test_a_dead_pipeline_fails_its_streams_then_readiness_and_liveness(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = start_fake_sglang(tmp_path_factory.mktemp("sglang-death"), "--step-delay-s", "0.1")
    try:
        outcomes: dict[str, str] = {}
        streaming = threading.Barrier(3)

        def pcm() -> None:
            body = {"input": LONG, "voice": "vivian", "response_format": "pcm"}
            try:
                with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=30) as r:
                    chunks = r.iter_raw()
                    size = len(next(chunks))
                    streaming.wait(timeout=10)
                    size += sum(len(chunk) for chunk in chunks)
                outcomes["pcm"] = f"whole {size}"
            except httpx.HTTPError as exc:
                outcomes["pcm"] = f"cut {type(exc).__name__}"

        def sse() -> None:
            body = {"input": LONG, "voice": "vivian", "response_format": "pcm", "stream_format": "sse"}
            with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=30) as r:
                lines = r.iter_lines()
                first = next(line for line in lines if line.startswith("data: "))
                streaming.wait(timeout=10)
                events = [first, *(line for line in lines if line.startswith("data: "))]
            last = json.loads(events[-1][len("data: ") :])
            outcomes["sse"] = f"{last['type']} {last.get('error', {}).get('code')}"

        clients = [threading.Thread(target=pcm), threading.Thread(target=sse)]
        for client in clients:
            client.start()
        streaming.wait(timeout=10)  # both have audio
        server.process.send_signal(signal.SIGUSR1)
        died = time.monotonic()
        while httpx.get(f"{server.base_url}/ready", timeout=5).status_code != 503:
            assert time.monotonic() - died < 5, "still ready 5 s after the pipeline died"
            time.sleep(0.05)
        for client in clients:
            client.join(timeout=30)
        assert outcomes["pcm"].startswith("cut"), outcomes  # an incomplete chunked body, never a short file
        assert outcomes["sse"] == "error engine_unavailable", outcomes
        # both began as 200s: the error alert counts them from here
        assert server.metric("speech_requests_total", status="200") == 2
        assert server.metric("speech_stream_errors_total", stream="audio") == 1
        assert server.metric("speech_stream_errors_total", stream="sse") == 1
        health = httpx.get(f"{server.base_url}/health", timeout=5)
        assert health.status_code == 503 and health.json()["error"]["code"] == "engine_failed"
        refused = speech(server, voice="vivian", response_format="pcm")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "engine_failed"
        assert server.process.poll() is None  # alive, for its orchestrator to restart
    finally:
        server.stop()


def test_sigterm_drains_a_stream_then_stops_the_pipeline_and_exits_zero(tmp_path: Path) -> None:
    """A stream in flight when SIGTERM comes plays to its end; meanwhile /ready says the server is shutting down;
    then the engine stops sglang-omni's pipeline and the process exits 0."""
    server = start_fake_sglang(tmp_path, "--step-delay-s", "0.05", SPEECH_DRAIN_TIMEOUT_S="60")
    body = {"input": LONG, "voice": "vivian", "response_format": "pcm"}
    try:
        with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=60) as response:
            chunks = response.iter_raw()
            data = bytearray(next(chunks))
            server.process.send_signal(signal.SIGTERM)
            ready = httpx.get(f"{server.base_url}/ready", timeout=10)
            assert ready.status_code == 503 and ready.json()["error"]["code"] == "server_shutting_down"
            for chunk in chunks:
                data += chunk
        assert len(data) == frames(LONG) * FRAME * 2  # every frame, none cut by the shutdown
        assert server.process.wait(60) == 0
        assert any(e.get("message") == "sglang engine stopped" for e in server.log_events())
    finally:
        server.stop()


def test_a_profile_run_through_the_admin_routes_leaves_the_pipelines_trace(custom: RunningServer) -> None:
    """POST /admin/profile/start and /stop (served where SPEECH_PROFILER_DIR is set): the pipeline's profiler runs
    between them, and its trace lands under the directory, in the run's folder."""
    profiles = Path(custom.env["SPEECH_PROFILER_DIR"])
    started = httpx.post(f"{custom.base_url}/admin/profile/start", json={"run_id": "e2e-c1"}, timeout=30)
    assert started.status_code == 200, started.text
    assert started.json() == {"run_id": "e2e-c1", "traces": str(profiles / "e2e-c1")}
    spoken = speech(custom, voice="vivian", response_format="pcm")
    assert spoken.status_code == 200 and spoken.content
    stopped = httpx.post(f"{custom.base_url}/admin/profile/stop", json={"run_id": "e2e-c1"}, timeout=30)
    assert stopped.status_code == 200 and stopped.json() == {"run_id": "e2e-c1", "stopped": True}
    assert [path.name.split("_pid")[0] for path in (profiles / "e2e-c1").iterdir()] == ["trace"]
    for outside in ("../elsewhere", "..", ".", "a/b"):  # a run's folder is a name under the directory, never a path
        refused = httpx.post(f"{custom.base_url}/admin/profile/start", json={"run_id": outside}, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "run_id", outside
    assert sorted(path.name for path in profiles.iterdir()) == ["e2e-c1"]
    anyone = httpx.post(f"{custom.base_url}/admin/profile/stop", timeout=30)  # no body: whichever run is on
    assert anyone.status_code == 200 and anyone.json() == {"run_id": None, "stopped": True}


def test_a_timeline_run_records_each_requests_events_without_the_profiler(custom: RunningServer) -> None:
    """{"timeline": true}: sglang-omni's request events instead of the PyTorch profiler, from the pipeline's stages
    and from the coordinator in the server's process, one JSON line each, in the run's folder; no trace."""
    profiles = Path(custom.env["SPEECH_PROFILER_DIR"])
    started = httpx.post(
        f"{custom.base_url}/admin/profile/start", json={"run_id": "burst", "timeline": True}, timeout=30
    )
    assert started.status_code == 200 and started.json() == {"run_id": "burst", "traces": str(profiles / "burst")}
    spoken = speech(custom, voice="vivian", response_format="pcm")
    assert spoken.status_code == 200 and spoken.content
    request_id = spoken.headers["x-request-id"]
    stopped = httpx.post(f"{custom.base_url}/admin/profile/stop", json={"run_id": "burst"}, timeout=30)
    assert stopped.status_code == 200
    files = sorted((profiles / "burst").iterdir())
    assert [path.name.split("_")[1] for path in files] == ["coordinator", "preprocessing"]  # no trace among them
    events = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    mine = {(e["stage"], e["event_name"]) for e in events if e["request_id"].startswith(request_id)}
    assert ("coordinator", "request_admission") in mine and ("vocoder", "stage_first_stream_chunk_sent") in mine
    after = speech(custom, voice="vivian", response_format="pcm")  # the run stopped: nothing more recorded
    assert after.status_code == 200
    assert sum(len(path.read_text().splitlines()) for path in files) == len(events)
