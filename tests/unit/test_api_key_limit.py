"""SPEECH_API_KEY_MAX_CONCURRENCY as a client that never runs two requests at once meets it: the key's place is free
again by the time the client has seen its request end (the response's last byte, the WebSocket's close), so that its
next request, sent at once, is never refused for the one before; and a client refused is told when to come back."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import ApiKeyMiddleware
from app.api.middleware import SpeechAccountingMiddleware

KEY = "sk-unit-0123456789"
AUTH = [(b"authorization", f"Bearer {KEY}".encode())]


def http_scope() -> Scope:
    return {"type": "http", "method": "POST", "path": "/v1/audio/speech", "headers": AUTH, "query_string": b""}


def ws_scope() -> Scope:
    return {"type": "websocket", "path": "/v1/audio/speech/stream", "headers": AUTH, "query_string": b""}


async def http_receive() -> Message:
    return {"type": "http.request", "body": b"{}", "more_body": False}


class NextRequestOnEnd:
    """The client: the moment its request ends for it (what `ends` names is sent), it sends its next request through
    the same middleware, and keeps the status that request was answered with."""

    def __init__(self, middleware: ASGIApp, ends: Any) -> None:
        self.middleware = middleware
        self.ends = ends
        self.next_status: int | None = None

    async def __call__(self, message: Message) -> None:
        if self.ends(message) and self.next_status is None:
            self.next_status = 0
            statuses: list[int] = []

            async def record(sent: Message) -> None:
                if sent["type"] == "http.response.start":
                    statuses.append(sent["status"])

            await self.middleware(http_scope(), http_receive, record)
            self.next_status = statuses[0]


def answering_app(after_close: Any = None) -> Any:
    """A streamed response in two chunks; a WebSocket that runs until its client leaves, then still has work of its
    own (its speech stopped, its accounting), during which `after_close` runs: the client's next request."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            assert (await receive())["type"] == "websocket.connect"
            await send({"type": "websocket.accept"})
            while (await receive())["type"] != "websocket.disconnect":
                pass
            await after_close()
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"audio", "more_body": True})
        await send({"type": "http.response.body", "body": b"more", "more_body": False})

    return app


def last_byte(message: Message) -> bool:
    return message["type"] == "http.response.body" and not message.get("more_body", False)


async def test_a_request_sent_as_the_last_one_ends_is_not_refused() -> None:
    """Before, the place was given back only once the app had returned, after the last byte had left: a client
    that read it and sent its next request at once was refused 429 now and then (4 in 60 in a row, one at a time)."""
    middleware = ApiKeyMiddleware(answering_app(), [KEY], max_concurrency_per_key=1)
    client = NextRequestOnEnd(middleware, last_byte)
    await middleware(http_scope(), http_receive, client)
    assert client.next_status == 200
    assert middleware._places[0].started == []


async def test_a_request_sent_once_the_client_left_its_websocket_is_not_refused() -> None:
    statuses: list[int] = []

    async def next_request() -> None:
        async def record(sent: Message) -> None:
            if sent["type"] == "http.response.start":
                statuses.append(sent["status"])

        await middleware(http_scope(), http_receive, record)

    middleware = ApiKeyMiddleware(answering_app(next_request), [KEY], max_concurrency_per_key=1)
    messages = iter([{"type": "websocket.connect"}, {"type": "websocket.receive", "text": "{}"}])

    async def receive() -> Message:
        return next(messages, {"type": "websocket.disconnect", "code": 1000})

    async def send(message: Message) -> None:
        pass

    await middleware(ws_scope(), receive, send)
    assert statuses == [200]
    assert middleware._places[0].started == []


async def test_the_limit_still_holds_while_a_request_runs() -> None:
    middleware = ApiKeyMiddleware(answering_app(), [KEY], max_concurrency_per_key=1)
    client = NextRequestOnEnd(middleware, lambda message: message.get("more_body") is True)
    await middleware(http_scope(), http_receive, client)
    assert client.next_status == 429
    assert middleware._places[0].started == []


async def test_a_key_busy_speaking_may_still_list_models_and_voices_but_not_speak_again() -> None:
    """The limit is on speech (syntheses: the speech routes and their WebSocket), which is what it protects: a key
    streaming one reply could not list the models or its voices (a client checking its voice before the next
    sentence was refused 429)."""
    statuses: dict[str, int] = {}

    async def while_speaking(message: Message) -> None:
        if message.get("more_body") is True and not statuses:
            for method, path in (
                ("GET", "/v1/models"),
                ("GET", "/v1/audio/voices"),
                ("POST", "/v1/audio/speech/batch"),
                ("POST", "/v1/audio/voices"),  # an upload decodes its audio: counted
            ):
                sent: list[int] = []

                async def record(reply: Message, sent: list[int] = sent) -> None:
                    if reply["type"] == "http.response.start":
                        sent.append(reply["status"])

                scope = {**http_scope(), "method": method, "path": path}
                await middleware(scope, http_receive, record)
                statuses[f"{method} {path}"] = sent[0]

    middleware = ApiKeyMiddleware(answering_app(), [KEY], max_concurrency_per_key=1)
    await middleware(http_scope(), http_receive, while_speaking)
    assert statuses == {
        "GET /v1/models": 200,
        "GET /v1/audio/voices": 200,
        "POST /v1/audio/speech/batch": 429,
        "POST /v1/audio/voices": 429,
    }
    assert middleware._places[0].started == []


class FakeClock:
    """The middleware's clock, moved by the test alone: a hold lasts exactly as long as the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def answer(middleware: ApiKeyMiddleware) -> tuple[int, dict[bytes, bytes]]:
    """A counted request's status and headers."""
    started: list[Message] = []

    async def record(sent: Message) -> None:
        if sent["type"] == "http.response.start":
            started.append(sent)

    await middleware(http_scope(), http_receive, record)
    return started[0]["status"], dict(started[0]["headers"])


async def test_a_key_at_its_limit_is_told_when_its_oldest_request_should_end() -> None:
    """The limit counts requests, not time: a place frees when one of the key's requests ends. Retry-After is when
    the oldest running one should, at how long the key's requests have held their places, rounded up to whole
    seconds; one already past that may end any moment (1). Before, it was 1 whatever the key was running."""
    clock = FakeClock()
    middleware = ApiKeyMiddleware(answering_app(), [KEY], max_concurrency_per_key=1, clock=clock)

    async def ten_seconds_of_audio(message: Message) -> None:
        if message.get("more_body") is True:
            clock.now += 10.0

    await middleware(http_scope(), http_receive, ten_seconds_of_audio)  # the key's requests hold a place 10 s
    told: dict[float, tuple[int, bytes | None]] = {}

    async def refused_while_streaming(message: Message) -> None:
        if message.get("more_body") is True:
            began = clock.now
            for running_s in (3.5, 9.0, 12.0):
                clock.now = began + running_s
                status, headers = await answer(middleware)
                told[running_s] = (status, headers.get(b"retry-after"))

    await middleware(http_scope(), http_receive, refused_while_streaming)
    assert told == {3.5: (429, b"7"), 9.0: (429, b"1"), 12.0: (429, b"1")}
    assert middleware._places[0].started == []


async def test_a_key_none_of_whose_requests_has_ended_is_told_from_every_keys_requests() -> None:
    """A key's first requests have no hold time of their own yet: its Retry-After comes from every key's requests
    (here another key's, 10 s each), not the 1-s stand-in that had a new client come back nine times too early."""
    clock = FakeClock()
    other = "sk-unit-other-9876543210"
    middleware = ApiKeyMiddleware(answering_app(), [KEY, other], max_concurrency_per_key=1, clock=clock)

    async def ten_seconds_of_audio(message: Message) -> None:
        if message.get("more_body") is True:
            clock.now += 10.0

    other_scope = {**http_scope(), "headers": [(b"authorization", f"Bearer {other}".encode())]}
    await middleware(other_scope, http_receive, ten_seconds_of_audio)  # the other key's request held 10 s
    told: list[tuple[int, bytes | None]] = []

    async def refused_while_streaming(message: Message) -> None:
        if message.get("more_body") is True:
            clock.now += 3.5
            status, headers = await answer(middleware)
            told.append((status, headers.get(b"retry-after")))

    await middleware(http_scope(), http_receive, refused_while_streaming)  # this key's first request
    assert told == [(429, b"7")]


async def test_a_request_refused_at_its_keys_limit_is_counted_with_the_code_its_error_carries() -> None:
    """As the server stacks them (app/server.py): the speech accounting counts the 429 under `rate_limit_exceeded`,
    the code of the error body it was answered with. It was told from the others by no label (its format and stream
    `unknown`: refused before its body was read)."""
    limited = ApiKeyMiddleware(answering_app(), [KEY], max_concurrency_per_key=1)
    counted = SpeechAccountingMiddleware(limited)
    labels = {"status": "429", "response_format": "unknown", "stream": "unknown", "code": "rate_limit_exceeded"}
    before = REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0
    client = NextRequestOnEnd(counted, lambda message: message.get("more_body") is True)  # the whole stack again
    await counted(http_scope(), http_receive, client)
    assert client.next_status == 429
    assert (REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0) - before == 1
