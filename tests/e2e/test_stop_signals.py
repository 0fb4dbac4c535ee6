"""How the server stops at an operator's signal, from a terminal (Ctrl-C, SIGINT) as from a supervisor (SIGTERM, in
test_resilience.py): promptly, with its own status, and without a traceback, whether it has started or is still
starting."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.server import RunningServer, start_fake_omni, start_server, wait_for_log

ENDS_WITHIN_S = 60  # a shutdown takes a second or two; this leaves a busy machine its time, far below the loads below


def test_sigint_once_ready_ends_by_it_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the terminal of `make run`: the server shuts down, then ends by the signal, as a shell expects of a
    program it interrupted (a script stops there), its log ending in its own lines rather than a KeyboardInterrupt
    traceback."""
    server = start_server(tmp_path / "server.log")
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(30) == -signal.SIGINT
    assert_no_traceback(server)


def test_sigint_while_the_engine_loads_ends_it_without_waiting_for_the_load(tmp_path: Path) -> None:
    """Ctrl-C while a GPU engine loads (vllm-omni's AsyncOmni is made in a thread of the server's, for minutes): the
    server shut down at once, but the process then waited for that thread to finish the whole load before it could
    end, and a second Ctrl-C meanwhile printed a KeyboardInterrupt traceback. It ends by the signal once shut down,
    as it does after the start."""
    server = start_fake_omni(tmp_path, "--start-delay-s", "600", wait_ready=False)
    try:
        wait_for_log(server, "making AsyncOmni")
        server.process.send_signal(signal.SIGINT)
        status = server.process.wait(ENDS_WITHIN_S)
    finally:
        end(server.process)
    assert status == -signal.SIGINT
    assert_no_traceback(server)


def test_sigint_before_the_server_serves_ends_it_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C while the start still prepares what it serves with (its settings' files read, the engine made), before
    the server's own handling of signals is in place, ended the process with a KeyboardInterrupt traceback from
    wherever the start was. Here the start is held reading its API keys from a pipe, as a volume that does not answer
    would hold it: the test holds the pipe's other end, so the signal comes while the server is surely reading."""
    keys = tmp_path / "keys"
    os.mkfifo(keys)
    server = start_server(tmp_path / "server.log", env={"SPEECH_API_KEYS_FILE": str(keys)}, wait_ready=False)
    try:
        writer = open_once_read(keys, server.process)
        try:
            server.process.send_signal(signal.SIGINT)
            status = server.process.wait(ENDS_WITHIN_S)
        finally:
            os.close(writer)
    finally:
        end(server.process)
    assert status == -signal.SIGINT
    assert_no_traceback(server)


def open_once_read(fifo: Path, process: subprocess.Popen[bytes], timeout_s: float = 120.0) -> int:
    """The writing end of `fifo`, opened once `process` has opened it to read (before that, opening it without
    waiting fails with ENXIO): from then on the process waits in its read for what is never written."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or process.poll() is not None or time.monotonic() > deadline:
                raise
        time.sleep(0.02)


def assert_no_traceback(server: RunningServer) -> None:
    log = server.log_path.read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
    assert all(line.startswith("{") for line in log.splitlines()), log[-3000:]  # every line still JSON
    assert "\\u001b" not in log, log[-3000:]  # no terminal colour codes inside them


def end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
