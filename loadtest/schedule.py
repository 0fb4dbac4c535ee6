"""When requests are sent: the closed and the open loop, one implementation for speech-loadtest and for the engine
baseline (loadtest.engine_alone), so that both hand their targets the same load.

Each loop also measures its steady window: the stretch in which it held its load, without the closed loop's ramp-up
(staggered workers) and drain (the last answers, fewer than the level in flight), and without the open loop's first
latency (nothing is answered yet) and the answers after its last arrival. A window opens at a successful answer and
counts the successful answers after it: with both ends at an answer, it spans whole turnovers even where workers
that start together end together, in cohorts (a window opened at a send would miss most of a cohort)."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


class TextCycle:
    """Texts in a fixed order, the same sequence for every target, so A and B speak the same words. With a `label`,
    each text opens with "Take LABEL-N, " (N its place in the cycle): no prompt is sent twice with the same label, so
    that a server caching prompt prefixes (sglang's radix cache) prefills every request in full, as for new text."""

    def __init__(self, texts: list[str], start: int = 0, label: str | None = None) -> None:
        self.texts = texts
        self.next = start
        self.label = label

    def take(self) -> str:
        text = self.texts[self.next % len(self.texts)]
        if self.label is not None:
            text = f"Take {self.label}-{self.next}, {text}"  # a clause, not a sentence: the first is still the text's
        self.next += 1
        return text

    def take_many(self, count: int) -> list[str]:
        return [self.take() for _ in range(count)]


@dataclass(frozen=True)
class LoopRun:
    """One run of a loop. `wall_s`: from the start to the last answer. `held_s`: the steady window's length;
    `finished_while_held`: the successful answers inside it (after the one that opened it); `window`: its bounds,
    perf_counter values of the process that ran the loop (None: no window), so that the caller can tell which of its
    results were answered inside; `audio_s`: their audio seconds, where the caller adds them (the loop cannot)."""

    wall_s: float
    held_s: float = 0.0
    finished_while_held: int = 0
    window: tuple[float, float] | None = None
    audio_s: float = 0.0

    def holds(self, finished_at: float | None) -> bool:
        """Whether an answer at `finished_at` (a perf_counter value, taken before the loop saw the answer) counts."""
        if self.window is None or finished_at is None:
            return False
        return self.window[0] < finished_at <= self.window[1]


def succeeded(answer: bool | None) -> bool:
    """A send's answer: False is a failed request; None (a send that reports nothing) counts as a success."""
    return answer is not False


class _Hold:
    """A closed loop's steady window: it opens at the first successful answer once every worker has had a request in
    flight at once (the last staggered worker has started) and closes when a worker first finds the queue empty."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.in_flight = 0
        self.full = False
        self.opened_at: float | None = None
        self.closed_at: float | None = None
        self.finished = 0

    def sent(self) -> None:
        self.in_flight += 1
        self.full = self.full or self.in_flight == self.workers

    def answered(self, ok: bool) -> None:
        # no await between an answer and its worker's next send: in flight stays at the level from here on
        self.in_flight -= 1
        if not ok or not self.full or self.closed_at is not None:
            return
        if self.opened_at is None:
            self.opened_at = time.perf_counter()
        else:
            self.finished += 1

    def drained(self) -> None:
        if self.closed_at is None:
            self.closed_at = time.perf_counter()

    def run(self, wall_s: float) -> LoopRun:
        if self.opened_at is None or self.closed_at is None:
            return LoopRun(wall_s)
        window = (self.opened_at, self.closed_at)
        return LoopRun(wall_s, self.closed_at - self.opened_at, self.finished, window)


async def closed_loop(
    items: list[str], concurrency: int, send: Callable[[str], Awaitable[bool | None]], stagger_s: float = 0.0
) -> LoopRun:
    """`concurrency` workers take the items in order, each sending the next once its last is answered; worker i
    starts i * stagger_s / workers after the first. `send` answers whether the request succeeded."""
    pending = collections.deque(items)
    workers = min(concurrency, len(items))
    hold = _Hold(workers)

    async def worker(index: int) -> None:
        await asyncio.sleep(index * stagger_s / workers)
        while pending:
            hold.sent()
            hold.answered(succeeded(await send(pending.popleft())))
        hold.drained()

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return hold.run(time.perf_counter() - started)


def arrivals_window(answers: list[float], end: float, wall_s: float) -> LoopRun:
    """An open loop's steady window: from its first successful answer to its last arrival's due time (`end`),
    counting the successful answers (perf_counter values) after the first, up to `end`."""
    inside = sorted(at for at in answers if at <= end)
    if not inside:
        return LoopRun(wall_s)
    return LoopRun(wall_s, end - inside[0], len(inside) - 1, (inside[0], end))


async def open_loop(
    rng: random.Random, rate: float, duration_s: float, send: Callable[[float], Awaitable[bool | None]]
) -> LoopRun:
    """Poisson arrivals at `rate` per second for `duration_s`: `send(planned)` at each arrival, given its planned time
    (a perf_counter value), so that a late start counts against the target. `send` answers whether the request
    succeeded. The wall time runs from the first send to the last answer."""
    answers: list[float] = []

    async def timed(planned: float) -> None:
        if succeeded(await send(planned)):
            answers.append(time.perf_counter())

    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    next_at = rng.expovariate(rate)
    first_send = started + min(next_at, duration_s)  # (none at all: the wall time is nil)
    while next_at < duration_s:
        delay = started + next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed(started + next_at)))
        next_at += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    return arrivals_window(answers, started + duration_s, max(0.0, time.perf_counter() - first_send))
