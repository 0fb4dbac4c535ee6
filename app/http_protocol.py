"""uvicorn's HTTP and WebSocket protocols with the bounds they lack: how long a request's headers may take to arrive,
and how long a client may leave what it is sent unread; and what is refused here, before any application runs (a
request whose headers never arrive, one that is not valid HTTP, a WebSocket upgrade that is no valid handshake),
answered as the application answers a refusal.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) but nothing else: a connection that never sends,
or sends its headers a byte at a time, holds a socket and a parser forever; a client that stops reading holds its
stream (and its admission slot) forever, because the response waits on the full write buffer. A WebSocket is held the
same way: uvicorn's keep-alive ping is queued behind the unread audio, and when its pong does not come uvicorn only
closes the connection, which waits for that same buffer to drain. The body's own deadline is enforced where the body
is read (`app.api.middleware.BodySizeLimitMiddleware`), so that it can answer a proper OpenAI-shaped 408 from inside
the application.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import RequestLineTooLong, SecurityError
from websockets.http11 import Request

from app.api.audio_stream import STALLED_STATE_KEY, UNSENT_STATE_KEY
from app.api.errors import error_body
from app.api.middleware import REQUEST_ID_HEADER, valid_request_id

log = logging.getLogger(__name__)


def refusal_response(
    status: HTTPStatus, message: str, code: str, request_id: str, headers: Iterable[tuple[bytes, bytes]] = ()
) -> bytes:
    """A refusal written here, below the application, as it writes one: the OpenAI error, a request id of its own
    (every response carries one), the server's own `headers` (Date, Server), and the connection closed."""
    body = json.dumps(error_body(message, code=code)).encode()
    head = [f"HTTP/1.1 {status.value} {status.phrase}".encode()]
    head += [name + b": " + value for name, value in headers]
    head += [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        REQUEST_ID_HEADER.encode() + b": " + request_id.encode(),
        b"connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def kernel_unsent_bytes(sock: socket.socket) -> int:
    """What a TCP socket holds that its peer has not acknowledged (Linux's SIOCOUTQ); 0 where it cannot be read."""
    try:
        import fcntl
        from termios import TIOCOUTQ
    except ImportError:  # not Linux: the transport's buffer alone tells
        return 0
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), TIOCOUTQ, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def unsent_bytes(transport: asyncio.Transport) -> int:
    """What waits to reach the client: the transport's buffer and what the kernel holds that the client has not
    acknowledged. A client that reads makes it shrink at once; the transport's buffer alone can stand still for tens
    of seconds under a steady reader, until the kernel's send buffer (megabytes) is half empty."""
    unsent = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        unsent += kernel_unsent_bytes(sock)
    return unsent


READ_AT_LEAST_BYTES = 4096  # what a client must have read in a stall period to be reading: 85 ms of 24 kHz pcm


class WriteStallGuard:
    """For a uvicorn protocol (listed before it): a connection whose client reads nothing for
    `write_stall_timeout_s` while data waits to be sent is aborted, and the scope of what it carried is marked
    stalled. Abort, not close: a close waits for the client to read what is buffered, which it never does. Reading
    is told by what waits to be sent shrinking (`unsent_bytes`), not by the transport resuming: a client that reads
    at real time resumes it only once megabytes have drained, which takes longer than the timeout."""

    write_stall_timeout_s: float = 30.0
    _stall_deadline: asyncio.TimerHandle | None = None
    _unsent_at_deadline_armed: int = 0
    writing_paused = False  # what it sends waits on its client: a write of the response in progress cannot go on
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        self.writing_paused = True
        if self._stall_deadline is None:
            self._arm_stall_deadline()

    def _arm_stall_deadline(self) -> None:
        self._unsent_at_deadline_armed = unsent_bytes(self.transport)
        self._stall_deadline = self.loop.call_later(self.write_stall_timeout_s, self._on_write_stall)

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        self.writing_paused = False
        self._disarm_stall_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_stall_deadline()
        super().connection_lost(exc)  # type: ignore[misc]

    def _disarm_stall_deadline(self) -> None:
        if self._stall_deadline is not None:
            self._stall_deadline.cancel()
            self._stall_deadline = None

    def _stalled_scope(self) -> dict[str, Any] | None:
        """The scope of the request or session the stall cuts off; None where there is nothing to abort."""
        raise NotImplementedError

    def _on_write_stall(self) -> None:
        self._stall_deadline = None
        # it read: a new period to read in (a few bytes the kernel moved are no reading: a real-time player reads
        # hundreds of kilobytes in a period)
        if unsent_bytes(self.transport) <= self._unsent_at_deadline_armed - READ_AT_LEAST_BYTES:
            self._arm_stall_deadline()
            return
        scope = self._stalled_scope()
        if scope is None:
            return
        scope.setdefault("state", {})[STALLED_STATE_KEY] = True
        log.warning("client stopped reading: connection aborted", extra={"client": _peer(self.client)})
        self.transport.abort()


class GuardedHTTPProtocol(WriteStallGuard, AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """A request's headers must arrive within `header_timeout_s` of its first byte (of the connection's opening, for
    the first request); a response whose client reads nothing for `write_stall_timeout_s` is aborted."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._header_deadline: asyncio.TimerHandle | None = None
        super().__init__(*args, **kwargs)

    # uvicorn (httptools and h11 alike) assigns a new cycle once a request's headers are parsed: that ends the wait.
    @property
    def cycle(self) -> Any:
        return self.__dict__.get("_guarded_cycle")

    @cycle.setter
    def cycle(self, value: Any) -> None:
        self.__dict__["_guarded_cycle"] = value
        if value is not None:
            self._disarm_header_deadline()

    # A WebSocket upgrade hands the connection to another protocol without assigning a cycle: its headers have
    # arrived all the same, and a deadline left armed would write a 408 into the WebSocket stream.
    def handle_websocket_upgrade(self, *args: Any) -> None:
        self._disarm_header_deadline()
        self._disarm_stall_deadline()
        super().handle_websocket_upgrade(*args)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if self._header_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_deadline()  # the first bytes of a new request on a kept-alive connection
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _on_header_timeout(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        request_id = valid_request_id(None)
        log.info("request headers not received in time", extra={"client": _peer(self.client), "request_id": request_id})
        message = "The request was not received in time; the connection is closed."
        self._refuse(HTTPStatus.REQUEST_TIMEOUT, message, "request_timeout", request_id)

    # Replaces uvicorn's answer to bytes its HTTP parser cannot read (a malformed request line, a header no parser
    # takes), which its httptools and h11 protocols alike call before any application runs, and which was plain text
    # without a request id where every other refusal is an OpenAI error with one. (uvicorn logs it too, without id.)
    def send_400_response(self, msg: str) -> None:
        request_id = valid_request_id(None)
        log.info("request not valid HTTP", extra={"client": _peer(self.client), "request_id": request_id})
        message = "The request is not valid HTTP (its request line or a header); the connection is closed."
        self._refuse(HTTPStatus.BAD_REQUEST, message, "invalid_http", request_id)

    def _refuse(self, status: HTTPStatus, message: str, code: str, request_id: str) -> None:
        headers = self.server_state.default_headers  # Date and Server, as on every other answer
        self.transport.write(refusal_response(status, message, code, request_id, headers))
        self.transport.close()

    def _stalled_scope(self) -> dict[str, Any] | None:
        if self.transport.is_closing():
            return None
        # between requests there is no cycle: the connection is still aborted, with no request to mark
        return self.cycle.scope if self.cycle is not None else {}


# what websockets' refusal of a handshake says of how to ask again, kept on the refusal written here
HANDSHAKE_REFUSAL_HEADERS = ("allow", "upgrade")


class GuardedWebSocketProtocol(WriteStallGuard, WebSocketsSansIOProtocol):  # type: ignore[misc]
    """A WebSocket whose client reads nothing for `write_stall_timeout_s` while frames wait to be sent is aborted, as
    an HTTP response is: the session sees its client gone, and its scope's state says it stalled. An upgrade request
    that is no valid WebSocket handshake is refused as the application refuses a request."""

    def _stalled_scope(self) -> dict[str, Any] | None:
        # aborted even where uvicorn already closes (a pong that never came): that close waits for the unread frames
        return getattr(self, "scope", {})  # the session's, once its upgrade request was read

    def handle_connect(self, event: Request) -> None:
        # websockets' verdict on the handshake (its sans-I/O `accept`, which sends nothing; uvicorn asks it again for
        # a valid one, and gets the same answer): uvicorn wrote its refusal (no or a malformed Sec-WebSocket-Key, a
        # Sec-WebSocket-Version other than 13, a method other than GET) as websockets words it, plain text without a
        # request id, where every other refusal is the OpenAI error with one
        verdict = self.conn.accept(event)
        if verdict.status_code != 101:
            sent = event.headers.get_all(REQUEST_ID_HEADER)
            # what websockets' refusal says of how to ask again (Allow: GET) is kept
            again = [(k, v) for k, v in verdict.headers.raw_items() if k.lower() in HANDSHAKE_REFUSAL_HEADERS]
            self._refuse_handshake(HTTPStatus(verdict.status_code), sent[0] if sent else None, again)
            return
        super().handle_connect(event)
        # the session asks it before calling itself idle: a client still reading its audio is listening
        self.scope.setdefault("state", {})[UNSENT_STATE_KEY] = lambda: unsent_bytes(self.transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # websockets gave up reading the upgrade request that uvicorn's HTTP parser read (a line or more headers than
        # it reads, a body): it queues an answer of its own, which uvicorn never sends, and the connection stayed
        # open, its headers' deadline ended, for as long as the client held it
        if not self.handshake_initiated and self.conn.handshake_exc is not None and not self.transport.is_closing():
            fault = self.conn.handshake_exc
            # its request id as sent, read from the request uvicorn passed on whole in `data`: the library, which
            # gave up on it, has none to tell
            given_id = sent_request_id(data)
            if isinstance(fault, RequestLineTooLong):
                self._refuse_handshake(HTTPStatus.REQUEST_URI_TOO_LONG, given_id)
            elif isinstance(fault, SecurityError):  # a header line too long, too many headers
                self._refuse_handshake(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, given_id)
            else:
                self._refuse_handshake(HTTPStatus.BAD_REQUEST, given_id)

    def _refuse_handshake(
        self, status: HTTPStatus, given_id: str | None = None, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """The upgrade refused before any session, as the application refuses a request: the OpenAI error saying
        why websockets refused it (`handshake_exc`), the caller's request id where it sent a valid one (as for any
        upgrade), the server's headers and `headers`, and the connection closed."""
        request_id = valid_request_id(given_id)
        reason = handshake_fault(self.conn.handshake_exc) or status.phrase
        log.info(
            "websocket handshake refused",
            extra={"client": _peer(self.client), "request_id": request_id, "detail": reason},
        )
        message = f"The WebSocket handshake is invalid: {reason}; the connection is closed."
        own = [(name.lower().encode(), value.encode()) for name, value in headers]
        answer = refusal_response(status, message, "invalid_handshake", request_id, [*self.default_headers, *own])
        # as uvicorn marks an upgrade it refuses: no session, nothing more to send or to wait for
        self.handshake_initiated = self.handshake_complete = self.close_sent = True
        self.transport.write(answer)
        self.transport.close()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # an upgrade refused with an HTTP response (the drain's 503) is answered in full; uvicorn 0.54 does not
            # count it as the handshake's end and logs "ASGI callable returned without completing handshake" at
            # error level for every such refusal
            self.handshake_complete = True


def sent_request_id(request: bytes) -> str | None:
    """The first X-Request-Id of an HTTP request's head (`request`, as uvicorn passes an upgrade on: its request line
    and a header a line), as sent; None where it has none."""
    for line in request.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == REQUEST_ID_HEADER.encode():
            return value.strip().decode("latin-1")
    return None


def handshake_fault(exc: BaseException | None) -> str:
    """What websockets found wrong with a handshake, with the causes it gives ("did not receive a valid HTTP
    request; unsupported request body"); "" for none."""
    faults = []
    while exc is not None:
        faults.append(str(exc))
        exc = exc.__cause__
    return "; ".join(fault for fault in faults if fault)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else ""


def guarded_protocol(header_timeout_s: float, write_stall_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn.Config(http=...), with these bounds."""
    return type(
        "GuardedHTTPProtocol",
        (GuardedHTTPProtocol,),
        {"header_timeout_s": header_timeout_s, "write_stall_timeout_s": write_stall_timeout_s},
    )


def guarded_websocket_protocol(write_stall_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn.Config(ws=...), with this bound."""
    return type(
        "GuardedWebSocketProtocol", (GuardedWebSocketProtocol,), {"write_stall_timeout_s": write_stall_timeout_s}
    )
