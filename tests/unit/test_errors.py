"""OpenAI-shaped error bodies, and the ASGI middlewares driven directly with hand-made scope/receive/send."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.testclient import WebSocketDenialResponse

from app.api.errors import (
    INVALID_REQUEST,
    SERVER_ERROR,
    ApiError,
    error_body,
    internal_error,
    invalid_param,
    to_api_error,
    validation_error,
)
from app.api.middleware import (
    REQUEST_ID_HEADER,
    BodySizeLimitMiddleware,
    RequestIdMiddleware,
    refused_for,
    request_id_of,
)
from app.engine_protocol import EngineUnavailable
from app.server import create_app
from app.settings import Settings
from app.speech.errors import (
    EngineFailed,
    Failed,
    Full,
    Refused,
    ShuttingDown,
    SpeechError,
    Stopped,
    Unavailable,
    UnknownModel,
)
from tests.support.asgi import ready_client

Message = dict[str, Any]
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Any]

# -- error bodies --------------------------------------------------------------------------------------------------


def test_api_error_body_has_exactly_the_openai_keys() -> None:
    error = ApiError(400, "Bad thing.", param="speed", code="invalid_value")
    assert error.body() == {
        "error": {"message": "Bad thing.", "type": "invalid_request_error", "param": "speed", "code": "invalid_value"}
    }
    assert list(error.body()) == ["error"]
    assert str(error) == "Bad thing."


def test_api_error_defaults_and_response() -> None:
    error = ApiError(409, "Conflict.", headers={"Retry-After": "1"})
    assert error.body()["error"] == {"message": "Conflict.", "type": INVALID_REQUEST, "param": None, "code": None}
    response = error.response()
    assert response.status_code == 409
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == "application/json"
    assert json.loads(response.body) == error.body()


def test_error_body_and_invalid_param() -> None:
    assert error_body("m", type="t", param="p", code="c") == {
        "error": {"message": "m", "type": "t", "param": "p", "code": "c"}
    }
    error = invalid_param("voice", "No such voice.")
    assert (error.status, error.param, error.code, error.type) == (400, "voice", "invalid_value", INVALID_REQUEST)
    assert invalid_param("input", "Too long.", "string_too_long").code == "string_too_long"


def test_internal_error_carries_the_request_id() -> None:
    error = internal_error("abc123")
    assert error.status == 500
    assert error.type == SERVER_ERROR == "server_error"
    assert error.code == "internal_error"
    assert "abc123" in error.message
    assert error.param is None


@pytest.mark.parametrize("loc", [("body", 1), ()])
def test_validation_error_json_invalid(loc: tuple[Any, ...]) -> None:
    error = validation_error([{"type": "json_invalid", "loc": loc, "msg": "JSON decode error"}])
    assert (error.status, error.code, error.param) == (400, "invalid_json", None)
    assert "JSON" in error.message


@pytest.mark.parametrize(
    "errors",
    [
        [{"type": "model_attributes_type", "loc": ("body",), "msg": "Input should be a valid dictionary"}],
        [{"type": "model_attributes_type", "loc": (), "msg": "Input should be a valid dictionary"}],  # pydantic's own
        [{"type": "missing", "loc": ("body",), "msg": "Field required"}],  # no body at all
        [{"type": "list_type", "loc": ("body", 0), "msg": "Input should be a valid list"}],  # a non-string loc
    ],
)
def test_validation_error_for_a_non_object_body(errors: list[dict[str, Any]]) -> None:
    error = validation_error(errors)
    assert (error.status, error.code, error.param) == (400, "invalid_request", None)
    assert error.message == "The request body must be a JSON object."


def test_a_body_not_read_as_json_names_the_content_type_it_needs() -> None:
    """FastAPI hands a body whose Content-Type is not JSON to the model as bytes."""
    sent_as_text = [{"type": "model_attributes_type", "loc": ("body",), "msg": "m", "input": b'{"input": "Hi."}'}]
    assert validation_error(sent_as_text).message == (
        "The request body must be a JSON object, sent with Content-Type: application/json."
    )


def test_a_body_that_is_a_json_string_says_so() -> None:
    """A JSON string (a body encoded twice: `json=json.dumps(...)`) came as JSON: naming the Content-Type, which the
    client did send, pointed at the wrong fault."""
    encoded_twice = [{"type": "model_attributes_type", "loc": ("body",), "msg": "m", "input": '{"input": "Hi."}'}]
    assert validation_error(encoded_twice).message == (
        "The request body must be a JSON object, not a JSON string (a body encoded as JSON twice?)."
    )


@pytest.mark.parametrize(
    ("loc", "kind", "says"),
    [
        (("body", "voice", "VoiceRef", "id"), "missing", "Missing required parameter: 'voice.id'."),
        (("voice", "VoiceRef", "id"), "missing", "Missing required parameter: 'voice.id'."),  # a batch item, a message
        (
            ("body", "voice", "VoiceRef", "Extra"),
            "extra_forbidden",
            "Unrecognized request argument supplied: voice.Extra",
        ),
        (("voice", "VoiceRef", "my-key"), "extra_forbidden", "Unrecognized request argument supplied: voice.my-key"),
        (("body", "seed"), "missing", "Missing required parameter: 'seed'."),
    ],
)
def test_a_key_within_a_field_is_named_with_it(loc: tuple[str, ...], kind: str, says: str) -> None:
    """The union's other branch reports first (`voice` a string); the object form's key at fault is what is named."""
    branch = ("body", "voice", "function-after[check_single_line(), str]")[: len(loc) - 1 if loc[0] == "body" else 2]
    errors = [
        {"type": "string_type", "loc": branch, "msg": "Input should be a valid string"},
        {"type": kind, "loc": loc},
    ]
    error = validation_error(errors if "voice" in loc else errors[1:])
    assert error.message == says and error.param == loc[1 if loc[0] == "body" else 0]


def test_validation_error_without_errors() -> None:
    error = validation_error([])
    assert (error.status, error.code, error.param) == (400, "invalid_request", None)
    assert error.message
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


def test_validation_error_names_the_top_level_field_of_a_nested_error() -> None:
    error = validation_error([{"type": "string_too_short", "loc": ("body", "voice", "VoiceRef", "id"), "msg": "m"}])
    assert (error.param, error.code) == ("voice", "invalid_value")
    assert error.message == "Invalid value for 'voice': m."


@pytest.mark.parametrize(
    ("kind", "code"),
    [("int_type", "invalid_type"), ("int_parsing", "invalid_type"), ("greater_than_equal", "invalid_value")],
)
def test_validation_error_codes(kind: str, code: str) -> None:
    assert validation_error([{"type": kind, "loc": ("seed",), "msg": "m"}]).code == code


# -- a tiny ASGI harness -------------------------------------------------------------------------------------------


class Exchange:
    def __init__(self, sent: list[Message]) -> None:
        self.sent = sent

    @property
    def start(self) -> Message:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        assert len(starts) == 1, self.sent
        return starts[0]

    @property
    def status(self) -> int:
        return self.start["status"]

    def header(self, name: str) -> list[str]:
        return [v.decode("latin-1") for k, v in self.start["headers"] if k.decode("latin-1").lower() == name]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def json(self) -> Any:
        return json.loads(self.body)


async def call(
    app: ASGIApp,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    messages: list[Message] | None = None,
    scope_type: str = "http",
) -> Exchange:
    scope: dict[str, Any] = {
        "type": scope_type,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/v1/audio/speech",
        "headers": headers or [],
    }
    pending = list(messages if messages is not None else [{"type": "http.request", "body": b"", "more_body": False}])
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return Exchange(sent)


class EchoApp:
    """Answers 200 with the body it received; records the scope and every message it was handed."""

    def __init__(self, *, request_id_header: bytes | None = None) -> None:
        self.scope: dict[str, Any] | None = None
        self.received: list[Message] = []
        self.request_id_header = request_id_header

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        body = b""
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(b"content-type", b"application/octet-stream")]
        if self.request_id_header is not None:
            headers.append((b"X-Request-ID", self.request_id_header))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


# -- RequestIdMiddleware -------------------------------------------------------------------------------------------

HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.mark.parametrize("given", ["abc-123", "req_1.2:3", "A" * 128, "0"])
async def test_sane_request_id_is_echoed(given: str) -> None:
    inner = EchoApp()
    exchange = await call(RequestIdMiddleware(inner), headers=[(b"x-request-id", given.encode())])
    assert exchange.status == 200
    assert exchange.header(REQUEST_ID_HEADER) == [given]
    assert inner.scope is not None and request_id_of(inner.scope) == given


@pytest.mark.parametrize("given", ["has space", "A" * 129, "semi;colon", "a/b", ""])
async def test_insane_request_id_is_replaced(given: str) -> None:
    inner = EchoApp()
    exchange = await call(RequestIdMiddleware(inner), headers=[(b"x-request-id", given.encode())])
    [echoed] = exchange.header(REQUEST_ID_HEADER)
    assert echoed != given
    assert HEX32.fullmatch(echoed)
    assert inner.scope is not None and request_id_of(inner.scope) == echoed


@pytest.mark.parametrize(
    "given", [b"new\nline", "ünïcode".encode(), b"\xed\xa0\x80", b"esc\x1b[31m", b"del\x7f", b"nul\x00"]
)
async def test_request_id_with_control_characters_or_non_text_is_a_400(given: bytes) -> None:
    inner = EchoApp()
    exchange = await call(RequestIdMiddleware(inner), headers=[(b"x-request-id", given)])
    assert exchange.status == 400
    assert json.loads(exchange.body)["error"]["param"] == "X-Request-Id"
    [echoed] = exchange.header(REQUEST_ID_HEADER)
    assert HEX32.fullmatch(echoed)
    assert inner.scope is None  # refused before the application saw it


async def test_a_request_refused_for_its_request_id_is_counted_and_logged_as_every_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's own stack (app/server.py): the 400 for an X-Request-Id that is no text passes through the speech
    accounting and the API request log as a 400 from the schema or a refused key does, under the id it answered
    with; it had been answered before either saw it, neither counted nor logged."""
    app = create_app(Settings(engine="embedded"))
    labels = {"status": "400", "response_format": "unknown", "stream": "unknown", "code": "invalid_value"}
    before = REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0
    bad = {"X-Request-Id": b"esc\x1b[31m"}
    with caplog.at_level(logging.INFO, logger="app.api.middleware"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            speech = await client.post("/v1/audio/speech", json={"input": "Hi."}, headers=bad)
            models = await client.get("/v1/models", headers=bad)
    assert speech.status_code == models.status_code == 400
    assert (REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0) - before == 1
    logged = ("speech request", "api request")
    lines = {getattr(r, "request_id", ""): r for r in caplog.records if r.getMessage() in logged}
    refused = {"type": "invalid_request_error", "code": "invalid_value", "param": "X-Request-Id"}
    for answer, message in ((speech, "speech request"), (models, "api request")):
        line = lines.get(answer.headers[REQUEST_ID_HEADER])
        assert line is not None and line.getMessage() == message, caplog.text
        assert (getattr(line, "status", None), getattr(line, "error", None)) == (400, refused)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"input": "Hi.", "bogus": 1}, "unknown_parameter"),
        ({"voice": "alloy"}, "missing_required_parameter"),
        ({"input": "Hi.", "speed": "fast"}, "invalid_type"),
        ("not an object", "invalid_request"),
    ],
)
async def test_a_request_the_schema_refuses_is_counted_with_the_code_its_error_carries(body: object, code: str) -> None:
    """The server's own stack: a 400 from the request's schema is counted under the `code` of the error body it was
    answered with, as every error is. It was told from the others by no label (its format and stream `unknown`, as
    the body was never read as a request)."""
    app = create_app(Settings(engine="embedded"))
    labels = {"status": "400", "response_format": "unknown", "stream": "unknown", "code": code}
    before = REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        answer = await client.post("/v1/audio/speech", json=body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, code)
    assert (REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0) - before == 1


def test_a_websocket_upgrade_refused_or_accepted_carries_its_request_id() -> None:
    """A session's handshake is answered with its id as every response is: the drain's 503 before the upgrade (a
    balancer retries it elsewhere, and the id is what ties its log lines together), and an accepted upgrade's 101."""
    app = create_app(Settings(engine="embedded"))
    with ready_client(app) as client:
        with client.websocket_connect("/v1/audio/speech/stream", headers={"X-Request-Id": "ws-open"}) as accepted:
            assert (REQUEST_ID_HEADER.encode(), b"ws-open") in accepted.extra_headers
        app.state.lifecycle.draining = True
        with (
            pytest.raises(WebSocketDenialResponse) as refused,
            client.websocket_connect("/v1/audio/speech/stream", headers={"X-Request-Id": "ws-in-drain"}),
        ):
            pass
        assert refused.value.status_code == 503 and refused.value.json()["error"]["code"] == "server_shutting_down"
        assert refused.value.headers.get_list(REQUEST_ID_HEADER) == ["ws-in-drain"]
        with pytest.raises(WebSocketDenialResponse) as generated, client.websocket_connect("/v1/audio/speech/stream"):
            pass
        assert HEX32.fullmatch(generated.value.headers[REQUEST_ID_HEADER])


WS_KEY = "sk-unit-ws-0123456789"


def websocket_refusals() -> dict[tuple[str, str], float]:
    """speech_requests_total's WebSocket series so far, their format `unknown`: by status and code."""
    samples = [sample for family in REGISTRY.collect() if family.name == "speech_requests" for sample in family.samples]
    return {
        (sample.labels["status"], sample.labels["code"]): sample.value
        for sample in samples
        if sample.name == "speech_requests_total"
        and (sample.labels["stream"], sample.labels["response_format"]) == ("websocket", "unknown")
    }


def refusals_since(before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """What `websocket_refusals` counted since `before`: the series that moved, by how much."""
    now = websocket_refusals()
    return {key: now[key] - before.get(key, 0.0) for key in now if now[key] != before.get(key, 0.0)}


def test_a_websocket_session_refused_is_counted_as_the_request_refused_for_the_same_reason() -> None:
    """The server's own stack: a session refused before it spoke is counted in speech_requests_total (it went
    uncounted), once, with stream `websocket`, the status of the error it was told (the HTTP status a request gets for
    the same refusal) and that error's code; its format `unknown`, as no session.config was taken. Counted before the
    client is told: by the time it reads its `error`, the count has moved. A session that ends without a refusal is
    not counted there (its utterances are, in speech_ws_utterances_total)."""
    app = create_app(Settings(engine="embedded", api_keys=[WS_KEY], api_key_max_concurrency=1))
    with ready_client(app) as client:
        path = "/v1/audio/speech/stream"
        before = websocket_refusals()
        with client.websocket_connect(f"{path}?api_key=sk-wrong") as refused:  # a wrong key: 1008
            assert refused.receive_json()["code"] == "invalid_api_key"
            assert refusals_since(before) == {("401", "invalid_api_key"): 1}
        before = websocket_refusals()
        with client.websocket_connect(f"{path}?api_key={WS_KEY}") as held:
            with client.websocket_connect(f"{path}?api_key={WS_KEY}") as refused:  # the key's one place is held: 1013
                assert refused.receive_json()["code"] == "rate_limit_exceeded"
            assert refusals_since(before) == {("429", "rate_limit_exceeded"): 1}
            before = websocket_refusals()
            held.send_json({"type": "input.text", "text": "Too early."})  # no valid session.config first: 1008
            assert held.receive_json()["code"] == "session_config_required"
            assert refusals_since(before) == {("400", "session_config_required"): 1}
        before = websocket_refusals()
        with client.websocket_connect(f"{path}?api_key={WS_KEY}") as closed:  # closed by its client: no refusal
            closed.send_json({"type": "session.close"})
            closed.receive()
        with client.websocket_connect("/v1/elsewhere?api_key=sk-wrong") as elsewhere:  # no speech: not counted, as a
            assert elsewhere.receive_json()["code"] == "invalid_api_key"  # key refused on GET /v1/models is not
        assert refusals_since(before) == {}
        app.state.lifecycle.draining = True
        with pytest.raises(WebSocketDenialResponse), client.websocket_connect(f"{path}?api_key={WS_KEY}"):  # before the
            pass  # upgrade, as the HTTP 503 a request gets
        assert refusals_since(before) == {("503", "server_shutting_down"): 1}


def test_a_websocket_session_refused_before_it_spoke_is_logged_once_with_its_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every session refused before it spoke writes the one log line a refused request does ("api request", method
    WEBSOCKET, its status and why), under the id its refusal carried: those refused for want of a session.config, for
    their page's origin or by a drain were counted in speech_requests_total but logged nowhere, so a refusal seen on
    the dashboard, or by a client quoting its X-Request-Id, could not be found in the log. Logged before the client is
    told, as it is counted: no waiting for it."""
    app = create_app(Settings(engine="embedded", cors_origins=["https://app.example.com"]))
    with ready_client(app) as client:
        path = "/v1/audio/speech/stream"

        def lines(request_id: str) -> list[tuple[str, str, int, dict[str, str]]]:
            return [
                (r.method, r.path, r.status, r.error)  # type: ignore[attr-defined]
                for r in caplog.records
                if r.getMessage() == "api request" and getattr(r, "request_id", "") == request_id
            ]

        with caplog.at_level(logging.INFO, logger="app.api.middleware"):
            with client.websocket_connect(path, headers={"X-Request-Id": "ws-no-config"}) as refused:
                refused.send_json({"type": "input.text", "text": "Too early."})
                assert refused.receive_json()["code"] == "session_config_required"
                assert lines("ws-no-config") == [
                    (
                        "WEBSOCKET",
                        path,
                        400,
                        {"type": "invalid_request_error", "code": "session_config_required", "param": "type"},
                    )
                ]
            foreign = {"X-Request-Id": "ws-foreign", "Origin": "https://elsewhere.example"}
            with pytest.raises(WebSocketDenialResponse), client.websocket_connect(path, headers=foreign):
                pass
            assert lines("ws-foreign") == [
                ("WEBSOCKET", path, 403, {"type": "invalid_request_error", "code": "origin_not_allowed"})
            ]
            with client.websocket_connect(path, headers={"X-Request-Id": "ws-spoke"}) as spoke:  # not refused: no line
                spoke.send_json({"type": "session.close"})
                spoke.receive()
            app.state.lifecycle.draining = True
            with (
                pytest.raises(WebSocketDenialResponse),
                client.websocket_connect(path, headers={"X-Request-Id": "ws-in-drain"}),
            ):
                pass
            assert lines("ws-in-drain") == [
                ("WEBSOCKET", path, 503, {"type": "server_error", "code": "server_shutting_down"})
            ]
        assert lines("ws-spoke") == []


async def test_missing_request_id_is_generated_and_unique() -> None:
    ids = set()
    for _ in range(5):
        [echoed] = (await call(RequestIdMiddleware(EchoApp()))).header(REQUEST_ID_HEADER)
        assert HEX32.fullmatch(echoed)
        ids.add(echoed)
    assert len(ids) == 5


async def test_request_id_header_set_by_the_app_is_replaced_not_duplicated() -> None:
    inner = EchoApp(request_id_header=b"from-the-app")
    exchange = await call(RequestIdMiddleware(inner), headers=[(b"x-request-id", b"mine")])
    assert exchange.header(REQUEST_ID_HEADER) == ["mine"]
    assert exchange.header("content-type") == ["application/octet-stream"]


async def test_exception_before_response_start_becomes_an_openai_500(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("secret database password in a stack frame")

    with caplog.at_level(logging.ERROR):
        exchange = await call(RequestIdMiddleware(broken), headers=[(b"x-request-id", b"trace-me")])
    assert exchange.status == 500
    assert exchange.header(REQUEST_ID_HEADER) == ["trace-me"]
    assert exchange.header("content-type") == ["application/json"]
    assert exchange.header("content-length") == [str(len(exchange.body))]
    error = exchange.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert "trace-me" in error["message"]
    text = exchange.body.decode()
    assert "Traceback" not in text and "RuntimeError" not in text and "secret" not in text
    assert any(getattr(r, "request_id", None) == "trace-me" and r.exc_info for r in caplog.records)  # logged, with id


async def test_exception_after_response_start_does_not_send_a_second_start() -> None:
    async def dies_mid_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("engine died")

    exchange = await call(RequestIdMiddleware(dies_mid_stream))
    assert exchange.status == 200  # exactly one start (checked by .start)
    assert exchange.body == b"partial"
    assert not any(m.get("more_body") is False for m in exchange.sent)  # the response is left incomplete


async def test_non_http_scopes_pass_through() -> None:
    seen: list[dict[str, Any]] = []

    async def lifespan_app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)
        await send({"type": "lifespan.startup.complete"})

    exchange = await call(RequestIdMiddleware(lifespan_app), scope_type="lifespan", messages=[])
    assert exchange.sent == [{"type": "lifespan.startup.complete"}]
    assert "state" not in seen[0]


# -- BodySizeLimitMiddleware ---------------------------------------------------------------------------------------

CAP = 1024


def assert_413(exchange: Exchange) -> None:
    assert exchange.status == 413
    error = exchange.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "request_too_large", None)
    assert str(CAP) in error["message"]
    assert exchange.header("content-length") == [str(len(exchange.body))]
    # the rest of the body is not read: the connection closes rather than wait on (or misread) what follows
    assert exchange.header("connection") == ["close"]


async def test_declared_content_length_over_the_cap() -> None:
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-length", str(CAP + 1).encode())],
        messages=[{"type": "http.request", "body": b"x" * 10, "more_body": True}],
    )
    assert_413(exchange)
    assert inner.scope is None  # the app never ran


async def test_chunked_body_over_the_cap() -> None:
    inner = EchoApp()
    messages = [{"type": "http.request", "body": b"x" * 400, "more_body": True} for _ in range(3)]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    exchange = await call(BodySizeLimitMiddleware(inner, max_bytes=CAP), messages=messages)
    assert_413(exchange)
    assert inner.scope is None


async def test_understated_content_length_is_caught_while_reading() -> None:
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-length", b"10")],
        messages=[{"type": "http.request", "body": b"x" * (CAP + 1), "more_body": False}],
    )
    assert_413(exchange)
    assert inner.scope is None


@pytest.mark.parametrize("encoding", [b"gzip", b"br", b"deflate, gzip"])
async def test_a_compressed_body_is_a_415_naming_its_encoding_not_a_json_error(encoding: bytes) -> None:
    """The server reads no Content-Encoding: a gzip body would otherwise reach the JSON parser and be called
    invalid JSON, which sends its author looking in the wrong place."""
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-encoding", encoding), (b"content-length", b"3")],
        messages=[{"type": "http.request", "body": b"\x1f\x8b\x08", "more_body": False}],
    )
    assert exchange.status == 415
    error = exchange.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "unsupported_content_encoding")
    assert encoding.decode() in error["message"] and "Content-Encoding" in error["message"]
    assert exchange.header("connection") == ["close"]  # the body is never read: nothing more on this connection
    assert inner.scope is None


async def test_any_content_encoding_header_of_several_is_refused_and_not_echoed_at_length() -> None:
    exchange = await call(
        BodySizeLimitMiddleware(EchoApp(), max_bytes=CAP),
        headers=[(b"content-encoding", b"x" * 5000), (b"content-encoding", b"identity"), (b"content-length", b"2")],
        messages=[{"type": "http.request", "body": b"{}", "more_body": False}],
    )
    assert exchange.status == 415
    assert len(exchange.json()["error"]["message"]) < 200


@pytest.mark.parametrize("length", [None, b"0"], ids=["no-length", "length-0"])
async def test_a_request_without_a_body_passes_whatever_its_content_encoding(length: bytes | None) -> None:
    """A probe's GET with a stray Content-Encoding (a client's default headers) has no body to be encoded: it was
    refused with a 415 all the same."""
    inner = EchoApp()
    headers = [(b"content-encoding", b"gzip"), *([(b"content-length", length)] if length is not None else [])]
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=headers,
        messages=[{"type": "http.request", "body": b"", "more_body": False}],
    )
    assert exchange.status == 200 and inner.scope is not None


@pytest.mark.parametrize("encoding", [b"identity", b"IDENTITY", b""])
async def test_an_identity_content_encoding_passes(encoding: bytes) -> None:
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-encoding", encoding)],
        messages=[{"type": "http.request", "body": b"{}", "more_body": False}],
    )
    assert exchange.status == 200 and exchange.body == b"{}"


@pytest.mark.parametrize("total", [0, 1, CAP - 1, CAP])
async def test_body_under_the_cap_passes_through_reassembled(total: int) -> None:
    inner = EchoApp()
    payload = bytes(i % 251 for i in range(total))
    pieces = [payload[i : i + 100] for i in range(0, total, 100)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": True} for p in pieces]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-length", str(total).encode())],
        messages=messages,
    )
    assert exchange.status == 200
    assert exchange.body == payload
    assert inner.received[0] == {"type": "http.request", "body": payload, "more_body": False}  # one message


async def test_after_the_body_the_app_still_hears_a_disconnect() -> None:
    seen: list[Message] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    await call(
        BodySizeLimitMiddleware(app, max_bytes=CAP),
        messages=[{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}],
    )
    assert seen == [{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}]


async def test_client_leaving_mid_body_is_answered_499_without_the_app() -> None:
    """Nothing of a body cut short is parsed (it would read as invalid JSON, a 400 the client never caused)."""
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        messages=[{"type": "http.request", "body": b"abc", "more_body": True}, {"type": "http.disconnect"}],
    )
    assert inner.scope is None and exchange.status == 499 and exchange.body == b""


async def test_invalid_content_length_falls_back_to_counting() -> None:
    inner = EchoApp()
    exchange = await call(
        BodySizeLimitMiddleware(inner, max_bytes=CAP),
        headers=[(b"content-length", b"lots")],
        messages=[{"type": "http.request", "body": b"hello", "more_body": False}],
    )
    assert exchange.status == 200 and exchange.body == b"hello"


async def test_413_carries_the_request_id_once_when_both_middlewares_are_stacked() -> None:
    inner = EchoApp()
    app = RequestIdMiddleware(BodySizeLimitMiddleware(inner, max_bytes=CAP))  # the order app/server.py uses
    exchange = await call(app, headers=[(b"x-request-id", b"big-one"), (b"content-length", b"999999")])
    assert_413(exchange)
    assert exchange.header(REQUEST_ID_HEADER) == ["big-one"]
    assert inner.scope is None


# -- one wording of every failure (HTTP and WebSocket alike) -----------------------------------------------------------


WORDED: list[tuple[BaseException, int, str, str | None, str, dict[str, str] | None]] = [
    (Refused("speed", "too fast"), 400, INVALID_REQUEST, "speed", "invalid_value", None),
    (Refused("voice", "no such voice", "voice_not_found"), 400, INVALID_REQUEST, "voice", "voice_not_found", None),
    (UnknownModel("no such model"), 404, INVALID_REQUEST, "model", "model_not_found", None),
    (Unavailable("loading"), 503, SERVER_ERROR, None, "engine_unavailable", {"Retry-After": "5"}),
    (EngineUnavailable("gone"), 503, SERVER_ERROR, None, "engine_unavailable", {"Retry-After": "5"}),
    (EngineFailed("it died"), 503, SERVER_ERROR, None, "engine_failed", None),  # only a restart mends it
    (
        ShuttingDown(),
        503,
        SERVER_ERROR,
        None,
        "server_shutting_down",
        {"Retry-After": "1", "Connection": "close"},
    ),
    (  # work a drain stopped: retried elsewhere, as a request refused by the drain is
        Stopped("drain"),
        503,
        SERVER_ERROR,
        None,
        "server_shutting_down",
        {"Retry-After": "1", "Connection": "close"},
    ),
    (Stopped("timeout"), 504, SERVER_ERROR, None, "timeout", None),
    (Full("queue_full", 3), 429, "requests", None, "rate_limit_exceeded", {"Retry-After": "3"}),
    (Full("queue_timeout", 7), 429, "requests", None, "rate_limit_exceeded", {"Retry-After": "7"}),
    (Failed("req-1"), 500, SERVER_ERROR, None, "internal_error", None),
    (RuntimeError("boom"), 500, SERVER_ERROR, None, "internal_error", None),
]


def test_every_kind_of_speech_error_is_worded_here() -> None:
    """So that each one's `server_fault` is checked against its status below, a new kind among them."""
    kinds: set[type] = set()
    pending: list[type] = [SpeechError]
    while pending:
        kind = pending.pop()
        kinds.add(kind)
        pending.extend(kind.__subclasses__())
    assert kinds - {SpeechError} <= {type(failure) for failure, *_ in WORDED}


@pytest.mark.parametrize(("failure", "status", "type_", "param", "code", "headers"), WORDED)
def test_to_api_error_words_each_failure_once(
    failure: BaseException, status: int, type_: str, param: str | None, code: str, headers: dict[str, str] | None
) -> None:
    error = to_api_error(failure, "req-1")
    assert (error.status, error.type, error.param, error.code, error.headers) == (status, type_, param, code, headers)
    assert error.message  # the client always reads why
    if isinstance(failure, SpeechError):  # where HTTP answers 5xx, a WebSocket utterance counts as the server's error
        assert failure.server_fault == (status >= 500)


def test_to_api_error_keeps_the_message_the_client_reads() -> None:
    assert to_api_error(Refused("speed", "Speed must be at most 4.")).message == "Speed must be at most 4."
    assert "Retry after 3 s" in to_api_error(Full("queue_full", 3)).message
    assert "req-9" in to_api_error(RuntimeError("boom"), "req-9").message  # an unknown failure names the request
    assert "loading" in to_api_error(Unavailable("loading")).message
    assert "gone" in to_api_error(EngineUnavailable("gone")).message
    same = ApiError(418, "teapot", code="teapot")
    assert to_api_error(same) is same


def test_the_access_log_names_a_refusals_field_and_code_never_its_message() -> None:
    body = json.dumps(invalid_param("input", "Invalid value for 'input': nothing to read in 'x'.").body()).encode()
    assert refused_for(body) == {"type": "invalid_request_error", "code": "invalid_value", "param": "input"}
    assert refused_for(json.dumps(error_body("Too many requests.", type="requests")).encode()) == {"type": "requests"}
    assert refused_for(b"not json") == refused_for(b'{"error": "text"}') == refused_for(b"[1]") == {}
    assert refused_for(b" " * 8192 + body) == {}  # not an error body the service writes
