"""A route's work that runs before its response starts, stopped when the client leaves meanwhile: ASGI servers do
not cancel a handler whose client went away, and a response that has not started does not listen for it."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request


async def unless_disconnected(request: Request, work: asyncio.Future[Any]) -> bool:
    """Wait for `work`, or cancel it (and wait for it to stop) when the client goes first, or when this handler is
    cancelled itself: whether the client is still there (`work` may have been stopped from elsewhere: a drain)."""

    async def disconnected() -> None:  # the body has been read: the next message is the client leaving
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watcher, work):
            if not task.done():
                task.cancel()
        await asyncio.gather(watcher, work, return_exceptions=True)
    return not (watcher.done() and not watcher.cancelled())
