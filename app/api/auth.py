"""API keys: `Authorization: Bearer <key>` on the API, checked in constant time; an optional per-key concurrency cap.

A WebSocket (the speech stream) may carry its key as `Authorization: Bearer <key>` or, for browsers, which cannot set
headers on a WebSocket, as the query parameter `api_key`; the parameter is removed from the request before anything
(uvicorn's connection log included) sees it. A refused WebSocket is accepted, told why in an `error` message and
closed with 1008 (1013 past the per-key limit).

Keys come from SPEECH_API_KEYS (comma list) and/or SPEECH_API_KEYS_FILE (one per line, # comments). With no keys
configured the API is open. /health, /ready, /metrics, the docs and the playground page (/) stay open: probes and
scrapers carry no keys, none of them reveals anything a key protects, and the playground sends the key its user gives
it with each API call. Keys are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.admission import HoldTime
from app.api.errors import ApiError, websocket_error_message
from app.api.middleware import refused_session, request_id_of, send_error
from app.settings import InvalidSettings

OPEN_PATHS = frozenset(
    {"/", "/health", "/ready", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"}
)
# the playground's and the docs' static files: the page asks for the key and sends it with its API calls
OPEN_PREFIXES = ("/static/", "/docs-assets/")
# what the per-key limit counts: speech (a request, a batch, the WebSocket) and a voice's upload (its audio decoded on
# the threads that encode every stream's); a key busy speaking may still list the models, its voices and the
# capabilities
COUNTED_PREFIX = "/v1/audio/speech"
UPLOAD = ("POST", "/v1/audio/voices")


def load_api_keys(keys: list[str], keys_file: str | None) -> list[str]:
    """The keys of SPEECH_API_KEYS (stripped, blanks refused, by `Settings`) and SPEECH_API_KEYS_FILE; none set: an
    open API. A file that names no key (comments, blank lines) or cannot be read is `InvalidSettings`: the operator
    meant the API closed, and a server that opened it instead would say nothing."""
    loaded = list(keys)
    if keys_file:
        try:
            text = Path(keys_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidSettings(f"SPEECH_API_KEYS_FILE: cannot read {keys_file}: {exc}") from None
        from_file = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        if not any(from_file):
            raise InvalidSettings(
                f"SPEECH_API_KEYS_FILE: {keys_file} holds no key (only comments or blank lines); the API would be "
                "open. Unset it for that."
            )
        loaded += [key for key in from_file if key]
    return loaded


def _authorization(scope: Scope) -> str | None:
    """The request's Authorization header ("" where it has none); None where it has several: which one counts is
    each proxy's own choice (this server's took the last, a gateway before it may check the first), so none does."""
    headers = [value for name, value in scope["headers"] if name == b"authorization"]
    return None if len(headers) > 1 else (headers[0] if headers else b"").decode("latin-1")


def _unauthorized(message: str) -> ApiError:
    """A 401, counted: no key, a wrong one, or several Authorization headers."""
    metrics.REJECTED.labels("unauthorized").inc()
    return ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


SEVERAL_AUTHORIZATIONS = "The request has several Authorization headers. Send one: 'Authorization: Bearer <key>'."


def _bearer(header: str) -> str:
    """The key in an `Authorization: Bearer <key>` header; empty for anything else."""
    scheme, _, presented = header.partition(" ")
    return presented.strip() if scheme.lower() == "bearer" else ""


@dataclass
class KeyPlaces:
    """What one key's counted requests hold: when each of those still running began, and how long one has held its
    place (`HoldTime`, as the admission gate's slots). The limit counts requests, not time: a place frees when a
    request ends, so when the next one will is an estimate from the key's own requests."""

    started: list[float] = field(default_factory=list)
    hold: HoldTime = field(default_factory=HoldTime)

    def free_in_s(self, now: float, every_key: HoldTime) -> int:
        """Whole seconds, rounded up (at least 1), until the key's oldest running request would end at its observed
        hold time (every key's, until one of its own has ended): the first of its places expected to free (asked
        only while one runs at least). One already past it may end any moment: 1."""
        hold = self.hold if self.hold.observed else every_key
        return max(1, math.ceil(hold.seconds - (now - min(self.started))))


class ApiKeyMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        keys: list[str],
        max_concurrency_per_key: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        # compare digests of equal length: the time taken tells nothing about how much of a key matched
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self._max_per_key = max_concurrency_per_key
        self._places: dict[int, KeyPlaces] = {}
        self._holds = HoldTime()  # every key's requests': a key's estimate until one of its own has ended
        self._clock = clock  # a test's own, so that a hold's length is what it says

    def _match(self, presented: str) -> int | None:
        digest = hashlib.sha256(presented.encode()).digest()
        found = None
        for index, known in enumerate(self._digests):  # no early exit: every key is compared every time
            if hmac.compare_digest(digest, known):
                found = index
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] != "http" or not self._digests or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        header = _authorization(scope)
        counted = path.startswith(COUNTED_PREFIX) or (scope.get("method"), path) == UPLOAD
        how = "Send it as 'Authorization: Bearer <key>'."
        admitted = (
            _unauthorized(SEVERAL_AUTHORIZATIONS)
            if header is None
            else self._admit(_bearer(header), given=bool(header), how=how, counted=counted)
        )
        if isinstance(admitted, ApiError):
            await send_error(send, admitted, request_id_of(scope))
            return
        if counted:
            await self._run_holding(admitted, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _admit(self, presented: str, given: bool, how: str, counted: bool = True) -> int | ApiError:
        """The key a request holds while it runs, or its refusal: no or a wrong key (401), or, for speech
        (`counted`), the key already running as many as it may (429, `Retry-After` when a place should free)."""
        key = self._match(presented) if presented else None
        if key is None:
            return _unauthorized("Incorrect API key provided." if given else f"You didn't provide an API key. {how}")
        places = self._places.setdefault(key, KeyPlaces())
        if counted and self._max_per_key is not None and len(places.started) >= self._max_per_key:
            metrics.REJECTED.labels("per_key_limit").inc()
            return ApiError(
                429,
                f"This API key already has {self._max_per_key} "
                f"request{'' if self._max_per_key == 1 else 's'} in progress.",
                type="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(places.free_in_s(self._clock(), self._holds))},
            )
        return key

    async def _run_holding(self, key: int, scope: Scope, receive: Receive, send: Send) -> None:
        """Runs the request holding one of its key's places, given back once it has ended for its client: before the
        response's last byte or the WebSocket's close is sent (or once the client has left the WebSocket), not when
        the app returns after it. A client that sends its next request as soon as it has read the last one is then
        never refused for a request that it has already seen end."""
        places = self._places[key]
        started = self._clock()
        places.started.append(started)
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                places.started.remove(started)
                held_s = self._clock() - started
                places.hold.observe(held_s)
                self._holds.observe(held_s)

        async def sending(message: Message) -> None:
            kind = message["type"]
            if (kind == "http.response.body" and not message.get("more_body", False)) or kind == "websocket.close":
                release()
            await send(message)

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                release()
            return message

        try:
            await self.app(scope, receiving, sending)
        finally:
            release()

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        from_query = next((value for name, value in query if name == "api_key"), "")
        # in place: uvicorn logs the connection from this very scope
        scope["query_string"] = urlencode([(n, v) for n, v in query if n != "api_key"]).encode("latin-1")
        if not self._digests:
            await self.app(scope, receive, send)
            return
        header = _authorization(scope)
        admitted = (
            _unauthorized(SEVERAL_AUTHORIZATIONS)
            if header is None
            else self._admit(
                _bearer(header) or from_query,
                given=bool(header or from_query),
                how="Send 'Authorization: Bearer <key>' or the query parameter api_key.",
            )
        )
        if isinstance(admitted, ApiError):
            refused_session(scope, admitted)
            await _refuse_websocket(receive, send, admitted, 1008 if admitted.status == 401 else 1013)
            return
        await self._run_holding(admitted, scope, receive, send)


async def _refuse_websocket(receive: Receive, send: Send, error: ApiError, close_code: int) -> None:
    """Accept, say why in an `error` message (a browser cannot read a refused handshake), close."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps(websocket_error_message(error))})
    await send({"type": "websocket.close", "code": close_code})
