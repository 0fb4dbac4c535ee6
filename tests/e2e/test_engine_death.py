"""The engine dying inside a running server (the vllm-omni stand-in's stage process killed: SIGUSR1), as a fleet's
balancer and an orchestrator meet it: the streams in flight end with an error their clients see, readiness fails at
once (a balancer takes the replica out), liveness fails (an orchestrator restarts it), and nothing more is accepted
(503s, never a 500)."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.server import RunningServer, start_fake_omni, wait_for_log

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

# long enough to be still streaming when the engine dies, however late a busy machine starts the other client
LONG = {"input": "A long stream cut short.", "voice": "vivian", "max_new_tokens": 1000, "ignore_eos": True}


def test_an_engine_that_dies_fails_its_streams_visibly_then_readiness_and_liveness(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = start_fake_omni(tmp_path_factory.mktemp("death"), "--step-delay-s", "0.1")
    try:
        outcomes: dict[str, str] = {}
        # set by each client once its first audio has come: the engine dies while both stream, however late a busy
        # machine runs them (a fixed wait once let the SSE request reach a dead engine: a 503, not a stream cut short)
        streaming = {"pcm": threading.Event(), "sse": threading.Event()}

        def pcm() -> None:
            try:
                with httpx.stream(
                    "POST", f"{server.base_url}/v1/audio/speech", json={**LONG, "response_format": "pcm"}, timeout=30
                ) as r:
                    size = 0
                    for chunk in r.iter_raw():
                        size += len(chunk)
                        streaming["pcm"].set()
                outcomes["pcm"] = f"whole {size}"
            except httpx.HTTPError as exc:
                outcomes["pcm"] = f"cut {type(exc).__name__}"

        def sse() -> None:
            body = {**LONG, "response_format": "pcm", "stream_format": "sse"}
            events = []
            with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        streaming["sse"].set()
            outcomes["sse"] = events[-1]["type"] + " " + str(events[-1].get("error", {}).get("code"))

        clients = [threading.Thread(target=pcm), threading.Thread(target=sse)]
        for client in clients:
            client.start()
        assert all(started.wait(30) for started in streaming.values()), (streaming, outcomes)  # both streaming
        server.process.send_signal(signal.SIGUSR1)
        died = time.monotonic()
        for client in clients:
            client.join(timeout=30)
        assert outcomes["pcm"].startswith("cut"), outcomes  # an incomplete chunked body, never a short file
        assert outcomes["sse"] == "error engine_unavailable", outcomes
        ready = httpx.get(f"{server.base_url}/ready", timeout=5)
        assert ready.status_code == 503 and time.monotonic() - died < 5
        health = httpx.get(f"{server.base_url}/health", timeout=5)
        assert health.status_code == 503 and health.json()["error"]["code"] == "engine_failed"
        refused = httpx.post(f"{server.base_url}/v1/audio/speech", json={**LONG, "response_format": "pcm"}, timeout=10)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "engine_failed"
        assert "Retry-After" not in refused.headers and "Retry-After" not in ready.headers  # no retry here mends it
        status, headers, error = websocket_refusal(server)
        assert status == 503 and error["code"] == "engine_failed"
        assert "Retry-After" not in headers
        assert server.process.poll() is None  # alive, for its orchestrator to restart
    finally:
        server.stop()


def websocket_refusal(server: RunningServer) -> tuple[int, Headers, dict[str, object]]:
    """The HTTP answer to a WebSocket upgrade that is refused (a failure where it is accepted): its status, headers
    and OpenAI error."""
    url = server.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with pytest.raises(InvalidStatus) as refused:
        with connect(url, open_timeout=10) as ws:
            ws.send(json.dumps({"type": "session.config", "voice": "vivian"}))
            ws.send(json.dumps({"type": "input.text", "text": "Never spoken."}))
            ws.send(json.dumps({"type": "input.done"}))
            pytest.fail(f"a session was opened on an engine that cannot speak: {ws.recv(timeout=10)}")
    answer = refused.value.response
    return answer.status_code, answer.headers, json.loads(bytes(answer.body or b""))["error"]


def test_a_websocket_session_is_refused_before_the_upgrade_while_the_engine_loads(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A session asked for while the engine is not ready is refused before the upgrade, with the 503 a request gets
    (`engine_unavailable`, Retry-After), which a balancer retries on another replica, as a draining server's is (and
    once the engine has failed for good, `engine_failed`: above). Before, it was accepted, its config too, and each of
    its sentences then failed after its audio.start, counted as the server's error."""
    server = start_fake_omni(tmp_path_factory.mktemp("loading"), "--start-delay-s", "600", wait_ready=False)
    try:
        wait_for_log(server, "making AsyncOmni")
        request = httpx.post(f"{server.base_url}/v1/audio/speech", json={"input": "Hello.", "voice": "vivian"})
        assert request.status_code == 503 and request.json()["error"]["code"] == "engine_unavailable"
        status, headers, error = websocket_refusal(server)
        assert status == 503 and error == request.json()["error"]
        assert headers["Retry-After"] == request.headers["Retry-After"]
        assert headers["X-Request-Id"]
    finally:
        server.stop()
