"""When requests are sent: the closed and the open loop, one implementation for speech-loadtest and for the engine
baseline (loadtest.engine_alone), so that both hand their targets the same load."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class TextCycle:
    """Texts in a fixed order, the same sequence for every target, so A and B speak the same words."""

    def __init__(self, texts: list[str], start: int = 0) -> None:
        self.texts = texts
        self.next = start

    def take(self) -> str:
        text = self.texts[self.next % len(self.texts)]
        self.next += 1
        return text

    def take_many(self, count: int) -> list[str]:
        return [self.take() for _ in range(count)]


async def closed_loop(
    items: list[str], concurrency: int, send: Callable[[str], Awaitable[None]], stagger_s: float = 0.0
) -> float:
    """`concurrency` workers take the items in order, each sending the next once its last is answered; worker i
    starts i * stagger_s / workers after the first. Returns the wall time from the start to the last answer."""
    pending = collections.deque(items)
    workers = min(concurrency, len(items))

    async def worker(index: int) -> None:
        await asyncio.sleep(index * stagger_s / workers)
        while pending:
            await send(pending.popleft())

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return time.perf_counter() - started


async def open_loop(
    rng: random.Random, rate: float, duration_s: float, send: Callable[[float], Coroutine[Any, Any, None]]
) -> float:
    """Poisson arrivals at `rate` per second for `duration_s`: `send(planned)` at each arrival, given its planned time
    (a perf_counter value), so that a late start counts against the target. Returns the wall time until the last
    answer."""
    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    next_at = rng.expovariate(rate)
    while next_at < duration_s:
        delay = started + next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(started + next_at)))
        next_at += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    return time.perf_counter() - started
