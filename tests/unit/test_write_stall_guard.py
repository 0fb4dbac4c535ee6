"""app.http_protocol.WriteStallGuard, driven by hand: a client is reading while what waits for it shrinks by at least
READ_AT_LEAST_BYTES a stall period, and is cut off once a period passes without that."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.http_protocol import READ_AT_LEAST_BYTES, WriteStallGuard


class Clock:
    """A loop's call_later, fired by hand."""

    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        self.due.append(callback)
        return self

    def cancel(self) -> None:
        self.due.clear()

    def fire(self) -> None:
        callback = self.due.pop()
        callback()


class Transport:
    def __init__(self, unsent: int) -> None:
        self.unsent = unsent
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def get_extra_info(self, name: str) -> None:
        return None  # no socket: the buffer alone tells

    def abort(self) -> None:
        self.aborted = True


class Paused:
    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


class Guarded(WriteStallGuard, Paused):
    client = None

    def __init__(self, unsent: int) -> None:
        self.loop = Clock()  # type: ignore[assignment]
        self.transport = Transport(unsent)  # type: ignore[assignment]
        self.scope: dict[str, Any] = {}

    def _stalled_scope(self) -> dict[str, Any] | None:
        return self.scope


def test_a_client_that_reads_keeps_its_connection_and_one_that_stops_is_cut_off() -> None:
    guard = Guarded(unsent=1_000_000)
    guard.pause_writing()
    transport: Transport = guard.transport  # type: ignore[assignment]
    for _ in range(5):  # a slow reader: a real-time player's worth a period, never enough to resume the transport
        transport.unsent -= 48_000
        guard.loop.fire()  # type: ignore[attr-defined]
        assert not transport.aborted
    transport.unsent -= READ_AT_LEAST_BYTES - 1  # a few bytes the kernel moved: no reading
    guard.loop.fire()  # type: ignore[attr-defined]
    assert transport.aborted and guard.scope["state"]
