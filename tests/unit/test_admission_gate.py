"""The admission gate's queue at the edges of a wait: a waiter cancelled in the step it is handed its slot."""

from __future__ import annotations

import asyncio

import pytest

from app.admission import AdmissionGate


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
