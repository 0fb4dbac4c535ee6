"""API keys on a real server: the auth table, the keys file, the per-key limit, keys never logged."""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from websockets.sync.client import connect as ws_connect

from tests.support.server import RunningServer, start_server

KEY_A = "sk-test-alpha-0123456789"
KEY_B = "sk-test-bravo-9876543210"
KEY_FROM_FILE = "sk-from-file-5555"
BODY = {"model": "tts-1", "voice": "alloy", "input": "Authorised speech.", "response_format": "pcm"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("auth")
    keys_file = folder / "keys"
    keys_file.write_text(f"# team keys\n{KEY_FROM_FILE}  # ops\n\n")
    env = {
        "SPEECH_API_KEYS": f"{KEY_A},{KEY_B}",
        "SPEECH_API_KEYS_FILE": str(keys_file),
        "SPEECH_API_KEY_MAX_CONCURRENCY": "1",
    }
    running = start_server(folder / "server.log", env=env)
    yield running
    running.stop()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": f"Bearer {KEY_A}"}, 200),
        ({"Authorization": f"Bearer {KEY_B}"}, 200),
        ({"Authorization": f"Bearer {KEY_FROM_FILE}"}, 200),
        ({"Authorization": f"bearer {KEY_A}"}, 200),
        ({"Authorization": "Bearer sk-wrong"}, 401),
        ({"Authorization": f"Bearer {KEY_A}x"}, 401),
        ({"Authorization": f"Bearer {KEY_A[:-1]}"}, 401),
        ({"Authorization": f"Basic {KEY_A}"}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": f"{KEY_A}"}, 401),
    ],
)
def test_auth_table(secured: RunningServer, headers: dict[str, str], status: int) -> None:
    response = httpx.post(f"{secured.base_url}/v1/audio/speech", json=BODY, headers=headers, timeout=60)
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    if status == 401:
        error = response.json()["error"]
        assert error["code"] == "invalid_api_key" and set(error) == {"message", "type", "param", "code"}
        assert response.headers["www-authenticate"] == "Bearer"
        # written as every other error is (the middleware's once had spaces after its separators)
        assert response.content == json.dumps(response.json(), separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("first", [f"Bearer {KEY_A}", "Bearer sk-wrong"], ids=["good-first", "wrong-first"])
def test_a_request_with_several_authorization_headers_is_refused_whichever_comes_first(
    secured: RunningServer, first: str
) -> None:
    """Which of several headers counts is each proxy's own choice (this server took the last, a gateway before it may
    check the first): none does, over HTTP and the WebSocket alike."""
    others = [("Authorization", f"Bearer {KEY_B}" if first.endswith(KEY_A) else f"Bearer {KEY_A}")]
    headers = httpx.Headers([("Authorization", first), *others])
    response = httpx.post(f"{secured.base_url}/v1/audio/speech", json=BODY, headers=headers, timeout=60)
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and "several Authorization headers" in error["message"]
    url = secured.base_url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    with ws_connect(url, additional_headers=[("Authorization", first), *others], open_timeout=30) as ws:
        told = json.loads(ws.recv(timeout=30))
    assert told["code"] == "invalid_api_key" and "several Authorization headers" in told["message"], told
    assert ws.close_code == 1008


def test_every_api_route_is_protected(secured: RunningServer) -> None:
    for method, path in [("GET", "/v1/models"), ("GET", "/v1/audio/voices"), ("POST", "/v1/audio/speech")]:
        assert httpx.request(method, f"{secured.base_url}{path}").status_code == 401, path


def test_probes_and_scrapes_stay_open(secured: RunningServer) -> None:
    for path in ("/health", "/ready", "/metrics", "/openapi.json"):
        assert httpx.get(f"{secured.base_url}{path}").status_code == 200, path


def test_openai_sdk_with_and_without_key(secured: RunningServer) -> None:
    good = openai.OpenAI(base_url=f"{secured.base_url}/v1", api_key=KEY_B, max_retries=0)
    assert next(m.id for m in good.models.list()) == "hibari"
    bad = openai.OpenAI(base_url=f"{secured.base_url}/v1", api_key="sk-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_per_key_concurrency_limit(secured: RunningServer) -> None:
    long = {**BODY, "input": " ".join(["This keeps the key busy for a moment."] * 60)}

    refusals: list[str] = []

    def call(key: str) -> int:
        response = httpx.post(
            f"{secured.base_url}/v1/audio/speech", json=long, timeout=60, headers={"Authorization": f"Bearer {key}"}
        )
        if response.status_code == 429:
            refusals.append(response.json()["error"]["message"])
        return response.status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(call, [KEY_A] * 6))
    assert 200 in statuses and 429 in statuses  # one at a time for this key
    assert refusals[0] == "This API key already has 1 request in progress."
    assert call(KEY_B) == 200  # other keys are not affected


def test_keys_never_reach_the_log(secured: RunningServer) -> None:
    httpx.post(f"{secured.base_url}/v1/audio/speech", json=BODY, headers={"Authorization": f"Bearer {KEY_A}"})
    httpx.post(f"{secured.base_url}/v1/audio/speech", json=BODY, headers={"Authorization": "Bearer sk-wrong-key"})
    log = Path(secured.log_path).read_text()
    for secret in (KEY_A, KEY_B, KEY_FROM_FILE, "sk-wrong-key"):
        assert secret not in log


def test_every_api_request_beside_speech_is_logged_once_with_its_outcome(secured: RunningServer) -> None:
    """A refused key on any route, and every other API call (the voices, which a store shared by replicas holds), is
    one log line as a speech request is: method, path, status, request id, and why it was refused; never the key.
    The probes and the scrape are not (an orchestrator calls them every few seconds)."""
    key = {"Authorization": f"Bearer {KEY_A}"}
    answers = [
        httpx.get(f"{secured.base_url}/v1/models", headers={"Authorization": "Bearer sk-guess"}),
        httpx.get(f"{secured.base_url}/v1/audio/voices", headers=key),
        httpx.delete(f"{secured.base_url}/v1/audio/voices/nobody", headers=key),
    ]
    for probe in ("/health", "/ready", "/metrics"):
        httpx.get(f"{secured.base_url}{probe}")
    ids = [answer.headers["x-request-id"] for answer in answers]
    lines = [e for e in secured.log_events() if e.get("message") == "api request"]
    mine = {line["request_id"]: line for line in lines if line.get("request_id") in ids}
    assert [(mine[i]["method"], mine[i]["path"], mine[i]["status"]) for i in ids] == [
        ("GET", "/v1/models", 401),
        ("GET", "/v1/audio/voices", 200),
        ("DELETE", "/v1/audio/voices/nobody", 404),
    ], lines
    assert mine[ids[0]]["error"] == {"type": "invalid_request_error", "code": "invalid_api_key"}, mine[ids[0]]
    assert mine[ids[2]]["error"]["code"] == "voice_not_found"
    assert not [line for line in lines if line["path"] in ("/health", "/ready", "/metrics")]
    assert "sk-guess" not in secured.log_path.read_text()
    # a WebSocket refused its key: logged too (it went unlogged, uvicorn's own line saying "accepted")
    url = secured.base_url.replace("http", "ws", 1) + "/v1/audio/speech/stream?api_key=sk-ws-guess"
    with ws_connect(url, additional_headers={"X-Request-Id": "ws-bad-key"}) as ws:
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_api_key"
    deadline = time.monotonic() + 10
    while not (refused := [e for e in secured.log_events() if e.get("request_id") == "ws-bad-key"]):
        assert time.monotonic() < deadline, "the refused WebSocket was not logged"
        time.sleep(0.05)
    [line] = refused
    assert (line["message"], line["method"], line["path"], line["status"]) == (
        "api request",
        "WEBSOCKET",
        "/v1/audio/speech/stream",
        401,
    ), line
    assert line["error"]["code"] == "invalid_api_key" and "sk-ws-guess" not in secured.log_path.read_text()


def test_a_refused_websocket_is_counted_as_a_refused_request(secured: RunningServer) -> None:
    """A WebSocket refused for its key (1008) or at its key's limit (1013) is counted in speech_requests_total, as a
    request refused for the same reason is: stream `websocket`, the status and code of the error it was told, format
    `unknown`. It was counted nowhere there, an operator watching refusals blind to every WebSocket's. Counted before
    its `error` is sent: read once the client has it, no waiting."""
    url = secured.base_url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    unauthorized = {"status": "401", "response_format": "unknown", "stream": "websocket", "code": "invalid_api_key"}
    limited = {"status": "429", "response_format": "unknown", "stream": "websocket", "code": "rate_limit_exceeded"}
    before = {"401": secured.metric("speech_requests_total", **unauthorized)}
    with ws_connect(f"{url}?api_key=sk-ws-wrong") as ws:
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_api_key"
    assert secured.metric("speech_requests_total", **unauthorized) == before["401"] + 1
    before["429"] = secured.metric("speech_requests_total", **limited)
    with ws_connect(url, additional_headers={"Authorization": f"Bearer {KEY_B}"}):  # holds KEY_B's one place
        with ws_connect(url, additional_headers={"Authorization": f"Bearer {KEY_B}"}) as second:
            assert json.loads(second.recv(timeout=10))["code"] == "rate_limit_exceeded"
    assert secured.metric("speech_requests_total", **limited) == before["429"] + 1
    assert secured.metric("speech_requests_total", **unauthorized) == before["401"] + 1  # each counted once
