from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import RunningServer, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real speech-server (embedded engine) for the e2e session, on a free loopback port."""
    log_path: Path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(log_path)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Debian chromium (fresh profile) for every browser test of the session: a Playwright context."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM_ARGS, ensure_chromium

    executable = ensure_chromium()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        yield context
        context.close()


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where browser tests keep screenshots and measurements; each test prints the paths it wrote."""
    return tmp_path_factory.mktemp("browser-artifacts")
