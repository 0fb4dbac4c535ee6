"""How late the event loop runs what is due. Every stream's next step (a chunk handed on, a byte written, and with the
sglang engine sglang-omni's own client and coordinator, which share this loop) waits behind whatever else the loop is
doing; a timer that asks to wake every `SAMPLE_S` and notes how late it woke measures that wait from the inside."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SAMPLE_S = 0.05  # 20 samples a second: a stall of one frame's time (80 ms of audio) cannot fall between two


async def watch(observe: Callable[[float], None], sample_s: float = SAMPLE_S) -> None:
    """Observe, every `sample_s` until cancelled, how many seconds past its due time the loop woke this task. Timed
    by the process's own clock, not the loop's: uvloop's `loop.time()` counts whole milliseconds, and its timers may
    fire a little early (a negative lag, counted as none)."""
    while True:
        due = time.perf_counter() + sample_s
        await asyncio.sleep(sample_s)
        observe(max(0.0, time.perf_counter() - due))
