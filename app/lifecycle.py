"""Graceful drain: on SIGTERM the replica stops taking work at once, serves every request it already accepted (those
streaming and those queued for a slot, in arrival order) up to a limit, stops the rest, and only then lets the server
shut down, so a rolling restart neither drops accepted work nor truncates anybody's audio silently."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from app.admission import AdmissionGate

log = logging.getLogger(__name__)

_POLL_S = 0.05
_STOPPED_GRACE_S = 5.0  # stopped streams end within a chunk; never hold the shutdown hostage to one that does not
# A long-lived session open when the drain began may still have its next message on the way (sent right after its
# first, before it heard of the drain): for this long it may begin one more piece of work, which the drain then waits
# for. New requests and sessions are refused from the first instant.
SESSION_GRACE_S = 0.25


class Stoppable(Protocol):
    def stop(self, reason: str) -> None: ...


class Lifecycle:
    def __init__(self, drain_timeout_s: float, gate: AdmissionGate | None = None) -> None:
        self.drain_timeout_s = drain_timeout_s
        self.draining = False
        self.drained = False
        self._gate = gate
        # by a key unique to each (callers may reuse a request id): the id its request is logged under, and the stream
        self._streams: dict[str, tuple[str, Stoppable]] = {}
        self._stopping = False  # the drain ran out of time: whatever starts streaming now is stopped at once
        self._hurried = False  # told to stop waiting (a second SIGTERM): the drain's time is up now
        self._task: asyncio.Task[None] | None = None
        self.drain_started = asyncio.Event()  # long-lived connections (WebSocket sessions) wait on it
        self._drain_began: float | None = None
        # the engine's start has begun and not finished (cut short by the shutdown, it stays so): what it runs in a
        # thread (vllm-omni's AsyncOmni made, minutes on a GPU) cannot be stopped, so the process ends without it
        self.engine_loading = False

    def track(self, key: str, stream: Stoppable, request_id: str) -> None:
        """`stream` is work in progress until `untrack(key)`: `key` is unique to it; `request_id` is the id its request
        is logged under, which the drain's own lines name."""
        self._streams[key] = (request_id, stream)
        if self._stopping:
            stream.stop("drain")

    def untrack(self, key: str) -> None:
        self._streams.pop(key, None)

    @property
    def idle(self) -> bool:
        """Nothing accepted is still waiting or streaming."""
        return not self._streams and (self._gate is None or self._gate.idle)

    def session_grace_left_s(self) -> float:
        """How long an open session may still begin new work: without end before a drain, `SESSION_GRACE_S` from its
        start, none where the lifecycle was marked draining without one."""
        if not self.draining:
            return float("inf")
        if self._drain_began is None:
            return 0.0
        return max(0.0, self._drain_began + SESSION_GRACE_S - time.perf_counter())

    def begin_drain(self, on_drained: Callable[[], None] | None = None) -> None:
        """Refuse new work now; after the accepted work finishes (or the drain timeout), call `on_drained`."""
        if self.draining:
            return
        self.draining = True
        self._drain_began = time.perf_counter()
        self.drain_started.set()
        queued = self._gate.queued if self._gate is not None else 0
        log.info(
            "draining", extra={"in_flight": len(self._streams), "queued": queued, "timeout_s": self.drain_timeout_s}
        )
        self._task = asyncio.get_running_loop().create_task(self._drain(on_drained))

    def hurry(self) -> None:
        """End the drain's wait now, as if its timeout had passed: what still waits is refused and what still streams is
        stopped (each told why), then `on_drained` runs. A drain that has not begun starts hurried."""
        self._hurried = True

    async def _wait_idle(self, timeout_s: float) -> bool:
        deadline = time.perf_counter() + timeout_s
        while not self.idle:
            if time.perf_counter() >= deadline or self._hurried:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    async def _drain(self, on_drained: Callable[[], None] | None) -> None:
        started = time.perf_counter()
        await asyncio.sleep(min(SESSION_GRACE_S, self.drain_timeout_s))  # what sessions begin in their grace counts
        if not await self._wait_idle(self.drain_timeout_s - (time.perf_counter() - started)):
            self._stopping = True
            # waiters first: a stopped stream's slot would otherwise pass to a waiter that cannot finish either
            refused = self._gate.refuse_waiting("draining") if self._gate is not None else 0
            if refused:
                log.warning("drain timeout: refused queued requests", extra={"refused": refused})
            for request_id, stream in list(self._streams.values()):
                log.warning("drain timeout: stopping a stream", extra={"request_id": request_id})
                stream.stop("drain")
            self._hurried = False  # the stopped streams get their grace to end, told or not
            if not await self._wait_idle(_STOPPED_GRACE_S):  # their connections are cut (`on_drained`)
                still = [request_id for request_id, _ in self._streams.values()]
                log.warning("streams still open after the drain: cut off", extra={"request_ids": still})
        self.drained = True
        log.info("drained", extra={"seconds": round(time.perf_counter() - started, 3)})
        if on_drained is not None:
            on_drained()
