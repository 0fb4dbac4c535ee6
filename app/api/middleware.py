"""ASGI middleware: request ids with the last-resort 500, and the request body cap."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.api.audio_stream import StreamCut
from app.api.errors import CLIENT_LEFT, REFUSAL_KEYS, ApiError, internal_error, invalid_param
from app.logs import cut_on_purpose

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def valid_request_id(given: str | None) -> str:
    """The caller's X-Request-Id where it is one (echoed in logs and headers: plain text, bounded), else a new one."""
    return given if given and _VALID_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def request_id_of(scope: Scope) -> str:
    return scope.get("state", {}).get("request_id", "")


async def send_error(send: Send, error: ApiError, request_id: str) -> None:
    body = JSONResponse(error.body()).body  # as every route's error is written
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (REQUEST_ID_HEADER.encode(), request_id.encode()),
        *((name.lower().encode(), value.encode()) for name, value in (error.headers or {}).items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def with_request_id(headers: list[tuple[bytes, bytes]], request_id: str) -> list[tuple[bytes, bytes]]:
    """A response's headers with the request's id as its one X-Request-Id (one the app set is replaced)."""
    own = [(k, v) for k, v in headers if k.lower() != REQUEST_ID_HEADER.encode()]
    return [*own, (REQUEST_ID_HEADER.encode(), request_id.encode())]


class RequestIdMiddleware:
    """Gives every request and WebSocket session an id (the caller's X-Request-Id when it is sane), echoes it on every
    response (a WebSocket's handshake answer too), and turns an unhandled exception into a 500 that carries the id
    and no stack trace."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"")
        given = raw.decode("latin-1")
        request_id = valid_request_id(given)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["started_at"] = time.perf_counter()  # TTFA and the request deadline count from arrival
        if any(byte < 0x20 or byte >= 0x7F for byte in raw):
            # control characters or bytes that are not text: refused, never logged or echoed (an id merely in an
            # unusual shape, too long or with other punctuation, is replaced by a fresh one instead)
            error = invalid_param(
                "X-Request-Id", "The X-Request-Id header must be printable ASCII ([A-Za-z0-9._:-], up to 128)."
            )
            await send_error(send, error, request_id)
            return
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = with_request_id(message.get("headers", []), request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except StreamCut as exc:
            # a stream the server ended on purpose (timeout, drain): returning without finishing the body makes the
            # server close the connection, which the client reads as an incomplete response
            log.warning("stream ended early", extra={"request_id": request_id, "reason": exc.reason})
            cut_on_purpose()  # said here: the ASGI server's own error line for it would be a false alarm
        except Exception:
            log.exception("unhandled error", extra={"request_id": request_id})
            if not started:
                await send_error(send, internal_error(request_id), request_id)
            # else: the body was already streaming; the connection is cut, so the client sees an incomplete response

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A session's id, which its log lines carry, on the answer to its upgrade: the 101 that accepts it, or the
        HTTP answer that refuses it (the drain's 503). An id in an unusual shape is replaced by a fresh one, as a
        request's is."""
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        request_id = valid_request_id(given)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["started_at"] = time.perf_counter()  # a refusal's log line times it from here (`refused_session`)

        async def send_with_id(message: Message) -> None:
            if message["type"] in ("websocket.accept", "websocket.http.response.start"):
                message["headers"] = with_request_id(message.get("headers", []), request_id)
            await send(message)

        await self.app(scope, receive, send_with_id)


class BodySizeLimitMiddleware:
    """413 for bodies over `max_bytes`, whether announced by Content-Length or found while reading; 408 (and the
    connection closed) for a body that has not fully arrived `read_timeout_s` after its headers, a trickle or a
    Content-Length that promises more than comes; 415 for a body in a Content-Encoding (gzip...), which nothing here
    decodes. The body is read here, before the app runs (the app would buffer it whole anyway), so these answers come
    before any other."""

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    def _timed_out(self) -> ApiError:
        return ApiError(
            408,
            f"The request body did not arrive within {self.read_timeout_s:g} s; the connection is closed.",
            code="request_timeout",
            headers={"Connection": "close"},
        )

    def _too_large(self) -> ApiError:
        return ApiError(
            413,
            f"The request body exceeds the limit of {self.max_bytes} bytes.",
            code="request_too_large",
            headers={"Connection": "close"},  # the rest of the body is never read
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        encodings = [v.decode("latin-1").strip() for k, v in scope["headers"] if k.lower() == b"content-encoding"]
        encoding = next((e for e in encodings if e and e.lower() != "identity"), None)
        declared = headers.get(b"content-length")
        # HTTP/1.1: no Content-Length and no Transfer-Encoding, no body (a probe's GET): its encoding says nothing
        has_body = (declared is not None and declared.strip() != b"0") or b"transfer-encoding" in headers
        if encoding is not None and has_body:
            await send_error(send, _encoded(encoding), request_id_of(scope))
            return
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await send_error(send, self._too_large(), request_id_of(scope))
            return
        body = bytearray()
        try:
            async with asyncio.timeout(self.read_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    body += message.get("body", b"")
                    if len(body) > self.max_bytes:
                        await send_error(send, self._too_large(), request_id_of(scope))
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            log.info("request body not received in time", extra={"request_id": request_id_of(scope)})
            await send_error(send, self._timed_out(), request_id_of(scope))
            return
        if message["type"] != "http.request":  # the client left before sending it all: nobody to answer, nothing
            # to parse (a body cut short would read as invalid JSON); counted and logged as any client that left, 499
            headers = [(b"content-length", b"0"), (REQUEST_ID_HEADER.encode(), request_id_of(scope).encode())]
            await send({"type": "http.response.start", "status": CLIENT_LEFT, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, _replay({"type": "http.request", "body": bytes(body), "more_body": False}, receive), send)


def _encoded(encoding: str) -> ApiError:
    shown = encoding if len(encoding) <= 40 else f"{encoding[:40]}..."
    return ApiError(
        415,
        f"The request body is sent with Content-Encoding {shown!r}; this server reads bodies uncompressed only.",
        code="unsupported_content_encoding",
        headers={"Connection": "close"},  # the body is never read
    )


def _replay(first: Message, receive: Receive) -> Receive:
    """A receive that hands out `first` once, then listens to the client again (for disconnects)."""
    pending: list[Message] = [first]

    async def replay_receive() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay_receive


def refused_for(body: bytes) -> dict[str, Any]:
    """An OpenAI-shaped error body's type, code and param (those that are set); {} for any other body."""
    try:
        error = json.loads(body).get("error") if len(body) < 8192 else None
    except (ValueError, AttributeError):
        return {}
    if not isinstance(error, dict):
        return {}
    return {key: error[key] for key in REFUSAL_KEYS if isinstance(error.get(key), str)}


class Outcome:
    """A response's status and, where it is an error, why (`refused_for`), as it is sent through `send`."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 500  # until a response starts: what the server's own error answers
        self.refusal: dict[str, Any] = {}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif self.status >= 400 and not self.refusal and message["type"] == "http.response.body":
            self.refusal.update(refused_for(message.get("body", b"")))
        await self._send(message)


class ApiRequestLogMiddleware:
    """One JSON log line per API request that is not speech (whose own line `SpeechAccountingMiddleware` writes): a
    key refused on any route, the voices a store shared by replicas holds, the models. The probes and the scrape are
    not logged: an orchestrator calls them every few seconds."""

    PREFIXES = ("/v1/", "/admin/")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if not path.startswith(self.PREFIXES) or path in SpeechAccountingMiddleware.PATHS:
            await self.app(scope, receive, send)
            return
        outcome = Outcome(send)
        started = time.perf_counter()
        try:
            await self.app(scope, receive, outcome.send)
        finally:
            log_api_request(scope, scope["method"], outcome.status, started, outcome.refusal)


def log_api_request(scope: Scope, method: str, status: int, started: float, refusal: dict[str, Any]) -> None:
    """The "api request" line (`ApiRequestLogMiddleware`); also a WebSocket's whose key was refused (method
    WEBSOCKET), which is no HTTP request."""
    line: dict[str, Any] = {
        "request_id": request_id_of(scope),
        "method": method,
        "path": scope["path"],
        "status": status,
        "e2e_s": round(time.perf_counter() - started, 4),
    }
    if refusal:
        line["error"] = refusal
    log.info("api request", extra=line)


class SpeechAccountingMiddleware:
    """One count and one JSON log line per speech request, whatever its outcome (a 400 from the schema, a 429, a
    stream cut by a drain...). The route leaves what it learned in `scope["state"]["speech"]`. A batch's items are
    counted by its route, one by one (`state["batch_items_counted"]`); a batch refused whole (its body, its caps) is
    counted here, once, with the stream label `batch`."""

    PATH = "/v1/audio/speech"
    BATCH_PATH = "/v1/audio/speech/batch"
    PATHS = (PATH, BATCH_PATH)  # its requests: `ApiRequestLogMiddleware` logs the others

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.PATHS:
            await self.app(scope, receive, send)
            return
        outcome = Outcome(send)
        try:
            await self.app(scope, receive, outcome.send)
        finally:
            state = scope.get("state", {})
            if not state.get("batch_items_counted"):  # a batch's items were, one by one: nothing to add
                self._account(scope, state, outcome.status, outcome.refusal)

    def _account(self, scope: Scope, state: dict[str, Any], status: int, refusal: dict[str, Any]) -> None:
        summary = dict(state.get("speech") or {})
        if refusal:  # which field and why, so that a refusal can be told from the log (never its message: it may quote)
            summary["error"] = refusal
        if scope["path"] == self.BATCH_PATH:
            summary.setdefault("stream_format", "batch")
        response_format = str(summary.get("response_format", "unknown"))
        stream = str(summary.get("stream_format", "unknown"))
        metrics.count_request(status, response_format, stream, refusal.get("code"))  # the code the client was told
        summary.update(request_id=state.get("request_id", ""), status=status)
        if (timeline := state.get("ttfa_timeline")) is not None:  # milestones reached, in s since arrival
            summary["timeline_s"] = timeline.offsets()
        summary.setdefault("e2e_s", round(time.perf_counter() - state.get("started_at", time.perf_counter()), 4))
        log.info("speech request", extra=summary)


STREAM_PATH = "/v1/audio/speech/stream"  # the speech WebSocket: its refusals are counted where made (`refused_session`)


def refused_session(scope: Scope, error: ApiError) -> None:
    """A WebSocket session refused before it spoke: for its key or its key's limit, by a drain, for its page's origin,
    for want of a valid session.config (closed 1008 or 1013, or its upgrade answered 403 or 503). Logged as the "api
    request" line of method WEBSOCKET, with its status and why, under the id its refusal carries: a refusal counted
    but never logged could not be found from the dashboard or from the id a client quotes. On the speech WebSocket it
    is also counted as a request refused with the same error is, under its status and code, `stream` websocket and
    `response_format` unknown (no session.config taken). Both before its client is told, so that a client that has
    read the refusal finds it counted and logged, and one that left meanwhile was refused all the same. A session that
    spoke is not counted here: its utterances are (`speech_ws_utterances_total`), one a full server refused among
    them, each logged as a "speech utterance"."""
    if scope["path"] == STREAM_PATH:  # as the key refused on other routes is not counted
        metrics.count_request(error.status, "unknown", "websocket", error.code)
    started = scope.get("state", {}).get("started_at", time.perf_counter())
    log_api_request(scope, "WEBSOCKET", error.status, started, error.refusal())
