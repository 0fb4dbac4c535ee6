"""The event loop's lag as the watcher measures it: nothing to speak of on an idle loop, and a blocked loop's stall
observed at its length. Only lower bounds on what a stall must show: a busy machine can only add to a lag."""

from __future__ import annotations

import asyncio
import time

from app import loop_lag


async def watched(seconds: float, block_s: float = 0.0) -> list[float]:
    """What the watcher observed over `seconds`, with the loop blocked for `block_s` in the middle."""
    lags: list[float] = []
    watcher = asyncio.create_task(loop_lag.watch(lags.append, sample_s=0.01))
    await asyncio.sleep(seconds / 2)
    time.sleep(block_s)  # noqa: ASYNC251  (on purpose: the whole loop stops, the watcher's timer included)
    await asyncio.sleep(seconds / 2)
    watcher.cancel()
    return lags


async def test_a_loop_that_keeps_up_is_sampled_with_no_negative_lag() -> None:
    lags = await watched(0.2)
    assert len(lags) >= 5  # sampled all along (a busy machine may stretch the samples, never remove them all)
    assert min(lags) >= 0.0


async def test_a_blocked_loop_is_observed_as_late_as_it_was_blocked() -> None:
    lags = await watched(0.2, block_s=0.3)
    assert max(lags) >= 0.3 - 0.01  # the timer due during the block woke after it: at most one sample early
    # one stall, one late sample: the next is due a sample after the late one woke, not on a schedule left behind
    assert sorted(lags)[-2] < 0.25


async def test_the_watcher_stops_when_cancelled() -> None:
    lags: list[float] = []
    watcher = asyncio.create_task(loop_lag.watch(lags.append, sample_s=0.005))
    await asyncio.sleep(0.05)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    seen = len(lags)
    await asyncio.sleep(0.05)
    assert watcher.cancelled() and len(lags) == seen
