"""How the server stops at an operator's signal, from a terminal (Ctrl-C, SIGINT) as from a supervisor (SIGTERM; its
drain once serving is in test_resilience.py): promptly, with its own status, and without a traceback, whether it has
started or is still starting."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import INTERRUPTED_STATUS
from tests.support.server import RunningServer, server_command, start_fake_omni, start_server, wait_for_log

ENDS_WITHIN_S = 60  # a shutdown takes a second or two; this leaves a busy machine its time, far below the loads below
# the lines an operator reads where a stop came before the server served
STOPPED_LOADING = "stopped while the engine was loading"
STOPPED_STARTING = "stopped while the server was starting"


def test_sigint_once_ready_ends_by_it_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the terminal of `make run`: the server shuts down, then ends by the signal, as a shell expects of a
    program it interrupted (a script stops there), its log ending in its own lines rather than a KeyboardInterrupt
    traceback."""
    server = start_server(tmp_path / "server.log")
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(30) == -signal.SIGINT
    assert_no_traceback(server)


@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, 0)])
def test_a_signal_while_the_engine_loads_ends_it_without_waiting_for_the_load(
    tmp_path: Path, sig: signal.Signals, expected: int
) -> None:
    """Ctrl-C while a GPU engine loads (vllm-omni's AsyncOmni is made in a thread of the server's, for minutes): the
    server shut down at once, but the process then waited for that thread to finish the whole load before it could
    end, and a second Ctrl-C meanwhile printed a KeyboardInterrupt traceback. SIGTERM there (a pod deleted while its
    engine loads) began the drain, which had nothing to wait for, then waited for the load likewise, until the pod's
    grace period ran out into a SIGKILL. Each ends once shut down: SIGINT by the signal, as after the start, SIGTERM
    with the status a drain ends with, saying why."""
    server = start_fake_omni(tmp_path, "--start-delay-s", "600", wait_ready=False)
    try:
        wait_for_log(server, "making AsyncOmni")
        server.process.send_signal(sig)
        status = server.process.wait(ENDS_WITHIN_S)
    finally:
        end(server.process)
    assert status == expected
    if sig == signal.SIGTERM:
        assert STOPPED_LOADING in messages(server), server.log_path.read_text()[-3000:]
    assert_no_traceback(server)


@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, 0)])
def test_a_signal_before_the_server_serves_ends_it_without_a_traceback(
    tmp_path: Path, sig: signal.Signals, expected: int
) -> None:
    """Ctrl-C while the start still prepares what it serves with (its settings' files read, the engine made), before
    the server's own handling of signals is in place, ended the process with a KeyboardInterrupt traceback from
    wherever the start was; SIGTERM there killed it by the signal (status -15, which a supervisor reads as a crash),
    where SIGTERM once serving ends it with 0. SIGINT now ends it by the signal, SIGTERM with 0, saying why. Here the
    start is held reading its API keys from a pipe, as a volume that does not answer would hold it: the test holds the
    pipe's other end, so the signal comes while the server is surely reading."""
    keys = tmp_path / "keys"
    os.mkfifo(keys)
    server = start_server(tmp_path / "server.log", env={"SPEECH_API_KEYS_FILE": str(keys)}, wait_ready=False)
    try:
        writer = open_once_read(keys, server.process)
        try:
            server.process.send_signal(sig)
            status = server.process.wait(ENDS_WITHIN_S)
        finally:
            os.close(writer)
    finally:
        end(server.process)
    assert status == expected
    if sig == signal.SIGTERM:
        assert STOPPED_STARTING in messages(server), server.log_path.read_text()[-3000:]
    assert_no_traceback(server)


# a command run as its own PID namespace's first process, as a container's entrypoint is: a program launched with
# SIGINT ignored (a background job's) passes that on, so it is put back to the default first
AS_INIT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])",
    "unshare",
    "--pid",
    "--fork",
    "--mount-proc",
]


def runs_as_init() -> bool:
    """Whether this machine lets a test run a process as its PID namespace's init (root and util-linux's unshare)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*AS_INIT[3:], "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not runs_as_init(), reason="needs unshare --pid (root)")
@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, INTERRUPTED_STATUS), (signal.SIGTERM, 0)])
def test_a_signal_before_the_server_serves_ends_it_as_a_containers_init_process(
    tmp_path: Path, sig: signal.Signals, expected: int
) -> None:
    """The image runs the server as its container's init process (its ENTRYPOINT, PID 1), which the kernel kills by
    no signal it leaves to the default action: Ctrl-C during the start (`docker run -it`) was ignored, and so was
    SIGTERM (a pod deleted while it started waited out its grace period into a SIGKILL); the start went on, and the
    server served. Either ends the start there too: SIGINT with the status a shell gives a program it interrupted,
    SIGTERM with 0, as once serving."""
    keys = tmp_path / "keys"
    os.mkfifo(keys)
    command = [*AS_INIT, *server_command(), "--engine", "embedded"]
    server = start_server(
        tmp_path / "server.log", env={"SPEECH_API_KEYS_FILE": str(keys)}, wait_ready=False, command=command
    )
    try:
        writer = open_once_read(keys, server.process)  # the server, its namespace's PID 1, now reads its keys
        try:
            (init,) = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
            os.kill(int(init), sig)
            status = server.process.wait(ENDS_WITHIN_S)  # unshare's: its child's
        finally:
            os.close(writer)
    finally:
        end(server.process)
    assert status == expected
    log = server.log_path.read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
    if sig == signal.SIGTERM:
        assert STOPPED_STARTING in messages(server), log[-3000:]


def messages(server: RunningServer) -> list[object]:
    return [record.get("message") for record in server.log_events()]


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
