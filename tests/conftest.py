from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.server import RunningServer, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real speech-server (embedded engine) for the e2e session, on a free loopback port."""
    log_path: Path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(log_path)
    yield running
    running.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """One headless Debian chromium (fresh profile) for every browser test of the session: a Playwright context.
    Async: Playwright's sync API would keep an event loop running in the main thread, and the async tests could not
    run after it; browser tests run on the session loop (`pytest.mark.asyncio(loop_scope="session")`)."""
    from playwright.async_api import async_playwright

    from tests.support.browser import CHROMIUM_ARGS, ensure_chromium

    executable = ensure_chromium()
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        yield context
        await context.close()


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where browser tests keep screenshots and measurements; each test prints the paths it wrote."""
    return tmp_path_factory.mktemp("browser-artifacts")
