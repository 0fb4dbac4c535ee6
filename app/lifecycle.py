"""Graceful drain: on SIGTERM the replica stops taking work at once, lets what is streaming finish (up to a limit),
stops the rest, and only then lets the server shut down, so a rolling restart truncates nobody's audio silently."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    def stop(self, reason: str) -> None: ...


class Lifecycle:
    def __init__(self, drain_timeout_s: float) -> None:
        self.drain_timeout_s = drain_timeout_s
        self.draining = False
        self._streams: dict[str, Stoppable] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def track(self, request_id: str, stream: Stoppable) -> None:
        self._streams[request_id] = stream
        self._idle.clear()

    def untrack(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        if not self._streams:
            self._idle.set()

    def begin_drain(self, on_drained: Callable[[], None] | None = None) -> None:
        """Refuse new work now; after in-flight streams finish (or the drain timeout), call `on_drained`."""
        if self.draining:
            return
        self.draining = True
        log.info("draining", extra={"in_flight": len(self._streams), "timeout_s": self.drain_timeout_s})
        self._task = asyncio.get_running_loop().create_task(self._drain(on_drained))

    async def _drain(self, on_drained: Callable[[], None] | None) -> None:
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self._idle.wait(), self.drain_timeout_s)
        except TimeoutError:
            for request_id, stream in list(self._streams.items()):
                log.warning("drain timeout: stopping a stream", extra={"request_id": request_id})
                stream.stop("drain")
            try:  # stopped streams end within a chunk; never hold the shutdown hostage to one that does not
                await asyncio.wait_for(self._idle.wait(), 5.0)
            except TimeoutError:
                log.error("streams still open after the drain", extra={"streams": list(self._streams)})
        log.info("drained", extra={"seconds": round(time.perf_counter() - started, 3)})
        if on_drained is not None:
            on_drained()
