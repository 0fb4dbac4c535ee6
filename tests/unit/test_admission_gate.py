"""The admission gate's queue at the edges of a wait: a waiter cancelled in the step it is handed its slot, and a
waiter whose own deadline comes before the queue's timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.admission import AdmissionGate, Rejected


async def test_a_waiter_cancelled_in_the_step_it_is_handed_the_slot_is_cancelled_and_gives_the_slot_back() -> None:
    """Python 3.11's `asyncio.wait_for` returned a result that came in the step its caller was cancelled, and dropped
    the cancel: the waiter went on with a slot its caller had stopped wanting. The cancel stands, the slot is free."""
    gate = AdmissionGate(max_concurrency=1, max_queue=1, queue_timeout_s=60)
    held = await gate.acquire()
    waiting = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)  # it runs up to its wait in the queue
    assert gate.queued == 1
    gate.release(held)  # the slot goes to the waiter...
    waiting.cancel()  # ...in the step its caller is cancelled
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.idle and gate.in_flight == 0


async def test_a_waiter_whose_own_deadline_comes_before_the_queues_timeout_is_refused_at_its_deadline() -> None:
    """The queue would keep it a minute; its own deadline is sooner. It is refused when its deadline passes, as the
    queue refuses a waiter whose time is up (`queue_timeout`, with a retry hint), not kept waiting for a slot it
    could no longer use: handed one later, it would reach the engine only to be stopped there at once."""
    gate = AdmissionGate(max_concurrency=1, max_queue=1, queue_timeout_s=60)
    held = await gate.acquire()
    waiting = asyncio.create_task(gate.acquire(deadline=time.perf_counter() + 0.05))
    done, _ = await asyncio.wait((waiting,), timeout=30)  # far sooner than the queue's minute
    assert waiting in done
    with pytest.raises(Rejected) as refused:
        waiting.result()
    assert refused.value.reason == "queue_timeout" and refused.value.retry_after_s >= 1
    assert gate.queued == 0
    gate.release(held)
    assert gate.idle


async def test_a_waiter_whose_deadline_has_passed_is_refused_at_once_and_a_free_slot_is_still_granted() -> None:
    """A deadline already past (a slow reference audio took the request's time) never buys a wait in the queue; a
    free slot is no wait, and is granted: what is left of the request's time is its synthesis's to meet."""
    gate = AdmissionGate(max_concurrency=1, max_queue=1, queue_timeout_s=60)
    past = time.perf_counter() - 1.0
    held = await gate.acquire(deadline=past)
    with pytest.raises(Rejected) as refused:
        await asyncio.wait_for(gate.acquire(deadline=past), 30)
    assert refused.value.reason == "queue_timeout"
    gate.release(held)
    assert gate.idle


async def test_a_deadline_later_than_the_queues_timeout_leaves_the_queues_timeout_in_force() -> None:
    gate = AdmissionGate(max_concurrency=1, max_queue=1, queue_timeout_s=0.05)
    held = await gate.acquire()
    with pytest.raises(Rejected) as refused:
        await asyncio.wait_for(gate.acquire(deadline=time.perf_counter() + 3600), 30)
    assert refused.value.reason == "queue_timeout"
    gate.release(held)
    assert gate.idle
