"""Waiting in async tests for what another task makes true, bounded so that a test that waits in vain fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Return once `condition()` holds; TimeoutError after `timeout_s` of looking every 5 ms."""
    for _ in range(int(timeout_s / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise TimeoutError
