"""A stream whose engine ends just as its client leaves: the engine's last answer (the end of its generator) is read,
not left in a task for the event loop to report as "Task exception was never retrieved ... StopAsyncIteration"."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np

from app.engine_protocol import AudioChunk
from app.speech.encoding import EncodedAudio


async def _ends_at_once() -> AsyncGenerator[AudioChunk]:
    return
    yield  # an async generator with nothing to give


async def _closed(_: str) -> None:
    return None


async def test_an_engine_that_ends_as_the_client_leaves_leaves_no_unretrieved_exception() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        for _ in range(20):
            first = AudioChunk(np.zeros(240, np.float32), 24_000)
            audio = EncodedAudio(first, _ends_at_once(), "pcm", 24_000, _closed)
            reading = asyncio.create_task(audio._next_chunk())
            await asyncio.sleep(0)  # the reader waits on the engine's next answer...
            await asyncio.sleep(0)  # ...which comes (the generator's end) in the same turn the client leaves
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            del audio, reading
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    unretrieved = [c for c in reported if isinstance(c.get("exception"), StopAsyncIteration)]
    assert not unretrieved, unretrieved[0]["message"]
