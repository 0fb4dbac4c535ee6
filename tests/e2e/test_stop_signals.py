"""How the server stops at an operator's signal, from a terminal (Ctrl-C, SIGINT) as from a supervisor (SIGTERM, in
test_resilience.py): promptly, with its own status, and without a traceback."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.server import start_server


def test_sigint_once_ready_ends_by_it_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the terminal of `make run`: the server shuts down, then ends by the signal, as a shell expects of a
    program it interrupted (a script stops there), its log ending in its own lines rather than a KeyboardInterrupt
    traceback."""
    server = start_server(tmp_path / "server.log")
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(30) == -signal.SIGINT
    log = server.log_path.read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
    assert all(line.startswith("{") for line in log.splitlines()), log[-3000:]  # every line still JSON
