"""`Ahead`, the one look-ahead of sentence scheduling (the sentence pipeline and the WebSocket both read through it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.speech.sentences import Ahead, StreamCancelled

WAIT_S = 5.0  # a reader that would otherwise wait for ever fails the test instead


async def items(*values: object, fail: Exception | None = None, log: list[str] | None = None) -> AsyncIterator[object]:
    try:
        for value in values:
            await asyncio.sleep(0)
            yield value
        if fail is not None:
            raise fail
    finally:
        if log is not None:
            log.append("closed")


async def read(ahead: Ahead[object]) -> list[object]:
    return [item async for item in ahead]


async def test_items_come_in_order_and_the_stream_is_read_before_anyone_asks() -> None:
    log: list[str] = []
    ahead: Ahead[object] = Ahead(lambda: items(1, 2, 3, log=log))
    await asyncio.wait_for(ahead.task, WAIT_S)  # read to its end with no reader yet
    assert log == ["closed"]
    assert await asyncio.wait_for(read(ahead), WAIT_S) == [1, 2, 3]


async def test_an_error_comes_where_the_next_item_would_have() -> None:
    ahead: Ahead[object] = Ahead(lambda: items("a", "b", fail=ValueError("broken")))
    got: list[object] = []
    with pytest.raises(ValueError, match="broken"):
        async for item in ahead:
            got.append(item)
    assert got == ["a", "b"]


async def test_a_stream_that_cannot_open_is_an_error_for_its_reader() -> None:
    def cannot_open() -> AsyncIterator[object]:
        raise LookupError("no such voice")

    with pytest.raises(LookupError, match="no such voice"):
        await asyncio.wait_for(read(Ahead(cannot_open)), WAIT_S)


async def test_after_waits_for_the_previous_stream_to_end() -> None:
    opened: list[str] = []
    release = asyncio.Event()

    async def first() -> AsyncIterator[object]:
        opened.append("first")
        yield 1
        await release.wait()

    def second() -> AsyncIterator[object]:
        opened.append("second")
        return items(2)

    one: Ahead[object] = Ahead(first)
    two: Ahead[object] = Ahead(second, after=one)
    await asyncio.sleep(0.05)
    assert opened == ["first"]  # the second has not even opened while the first runs
    release.set()
    assert await asyncio.wait_for(read(one), WAIT_S) == [1]
    assert await asyncio.wait_for(read(two), WAIT_S) == [2]
    assert opened == ["first", "second"]


async def test_cancel_stops_the_stream_and_closes_it() -> None:
    log: list[str] = []
    endless = asyncio.Event()

    async def forever() -> AsyncIterator[object]:
        try:
            yield 1
            await endless.wait()
            yield 2
        finally:
            log.append("closed")

    ahead: Ahead[object] = Ahead(forever)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(ahead.cancel(), WAIT_S)
    assert ahead.task.cancelled() and log == ["closed"]


async def test_a_reader_is_told_when_the_stream_is_cancelled_under_it() -> None:
    """Cancelled by someone other than its reader (a task group tearing down): the reader hears of it instead of
    waiting for an end that never comes."""
    ahead: Ahead[object] = Ahead(lambda: items(1, 2, *([None] * 10_000)))
    ahead.task.cancel()
    with pytest.raises(StreamCancelled):
        await asyncio.wait_for(read(ahead), WAIT_S)
