"""Admission: at most N syntheses run; up to Q more wait, first come first served, for a bounded time (and never past
their own deadline); the rest are refused at once with a retry hint. A speech API is judged at p95: answering "not
now" quickly beats answering late, and a queue without bound only converts overload into latency for everyone.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass


class Rejected(Exception):
    """No slot: `reason` is queue_full, queue_timeout or draining; `retry_after_s` is when a retry should succeed."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class HoldTime:
    """How long a place is held (a slot of the gate, a place of an API key's): a moving average of the holds
    observed, the first five weighed alike, then each a fifth; 1 s before any, so that a hint can be given at once."""

    def __init__(self) -> None:
        self.seconds = 1.0
        self._observed = 0

    @property
    def observed(self) -> bool:
        """Whether any hold has been observed (else `seconds` is the 1-s stand-in)."""
        return self._observed > 0

    def observe(self, held_s: float) -> None:
        self._observed += 1
        weight = 0.2 if self._observed > 5 else 1.0 / self._observed
        self.seconds += weight * (held_s - self.seconds)


@dataclass
class Ticket:
    granted_at: float
    queued_s: float
    released: bool = False


class AdmissionGate:
    def __init__(self, max_concurrency: int, max_queue: int, queue_timeout_s: float) -> None:
        if max_concurrency < 1 or max_queue < 0 or queue_timeout_s < 0:
            raise ValueError("max_concurrency >= 1, max_queue >= 0 and queue_timeout_s >= 0 are required")
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._service = HoldTime()

    @property
    def queued(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead would have drained at the observed service time (at least 1)."""
        ahead = self.in_flight + self.queued
        return max(1, math.ceil(self._service.seconds * max(ahead, 1) / self.max_concurrency))

    async def acquire(self, deadline: float | None = None) -> Ticket:
        """A slot: at once where one is free, else after a wait in the queue of at most `queue_timeout_s`, and never
        past `deadline` (the caller's own, a `time.perf_counter()` time; None: none). A waiter whose own deadline comes
        first is refused then as the queue refuses one whose time in it is up (`queue_timeout`): handed a slot later,
        it would reach the engine with no time left, only to be stopped there. A free slot is granted whatever the
        deadline: no wait is spent, and what is left of the caller's time is its synthesis's to meet."""
        arrived = time.perf_counter()
        if self.in_flight < self.max_concurrency and not self.queued:
            self.in_flight += 1
            return Ticket(arrived, 0.0)
        if self.queued >= self.max_queue:
            raise Rejected("queue_full", self.retry_after_s())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        patience = self.queue_timeout_s if deadline is None else min(self.queue_timeout_s, deadline - arrived)
        try:
            # asyncio.wait, not wait_for: Python 3.11's wait_for returns a result that came in the step its caller
            # was cancelled and drops the cancel, so a caller stopped as it was handed the slot (a batch item its
            # batch's drain, deadline or departed client stopped) ran on past its stop; wait always raises it
            await asyncio.wait((waiter,), timeout=max(patience, 0.0))
            if not waiter.done():  # no slot in time (one granted in the same instant is taken)
                waiter.cancel()
                raise Rejected("queue_timeout", self.retry_after_s())
        except asyncio.CancelledError:  # the caller went away while queued
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._release_slot()  # it was handed a slot it will never use
            else:
                waiter.cancel()
            raise
        finally:
            self._prune()
        waiter.result()  # raises Rejected if refused (a drain out of time)
        now = time.perf_counter()
        return Ticket(now, now - arrived)

    @property
    def idle(self) -> bool:
        """No slot held and nobody waiting: every request admitted or queued has finished."""
        return self.in_flight == 0 and not self.queued

    def refuse_waiting(self, reason: str) -> int:
        """Turn every waiter away with `reason` (a drain out of time); returns how many there were."""
        refused = 0
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(Rejected(reason, 1))
                refused += 1
        return refused

    def release(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        self._service.observe(time.perf_counter() - ticket.granted_at)
        self._release_slot()

    def _release_slot(self) -> None:
        """Hand the slot to the longest waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # in_flight unchanged: the slot changes hands
                return
        self.in_flight -= 1

    def _prune(self) -> None:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
