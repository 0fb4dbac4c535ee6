from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import RunningServer, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real speech-server (embedded engine) for the e2e session, on a free loopback port."""
    log_path: Path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(log_path)
    yield running
    running.stop()
