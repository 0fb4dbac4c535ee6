"""A stand-in for `nvidia-cuda-mps-control` (NVIDIA driver 580) where no GPU driver exists, with the real one's
command line: `-f` runs the control daemon in the foreground and `-d` in the background, found through
CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps); either exits 1 with the real message when a daemon already runs
there. Without arguments it reads commands from stdin (`get_server_list`, `get_client_list PID`, `quit`) and answers
them, or exits 1 with "Cannot find MPS control daemon process" when no daemon runs; `quit` returns once the daemon has
gone. A daemon's pid stands for the control pipe, and for its one MPS server where clients are given. The real
program is exercised on a GPU host (tests/gpu).

Install it on PATH as `nvidia-cuda-mps-control` with `install(directory)`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FAIL_VARIABLE = "FAKE_MPS_CONTROL_FAIL"  # set: a daemon fails to start, as when another holds the pipe directory
QUIT_DELAY_VARIABLE = "FAKE_MPS_QUIT_DELAY_S"  # a daemon takes so long to quit (the MPS server winding down)
ANSWER_DELAY_VARIABLE = "FAKE_MPS_ANSWER_DELAY_S"  # a daemon answers only so long after it started
PIDS_VARIABLE = "FAKE_MPS_PIDS"  # a file every daemon started appends its pid to (for the tests' cleanup)
CLIENTS_VARIABLE = "FAKE_MPS_CLIENTS"  # comma-separated pids: the clients connected to the daemon's one MPS server


def install(directory: Path) -> Path:
    """An executable `nvidia-cuda-mps-control` in `directory` that runs this module."""
    program = directory / "nvidia-cuda-mps-control"
    program.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({__file__!r}, run_name='__main__')\n")
    program.chmod(0o755)
    return program


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone for every purpose here
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _pipe_directory() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def _daemon_pid() -> int | None:
    try:
        pid = int((_pipe_directory() / "control").read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def _started(pid: int) -> None:
    if os.environ.get(PIDS_VARIABLE):
        with open(os.environ[PIDS_VARIABLE], "a") as pids:
            pids.write(f"{pid}\n")
    log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")
    log.mkdir(parents=True, exist_ok=True)
    (log / "control.log").write_text("[fake] Starting control daemon using socket control\n")
    # the real daemon's MPS server serves the devices CUDA_VISIBLE_DEVICES gave the daemon, renumbered from 0
    (log / "visible-devices").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "(all)"))


def _announce(pid: int) -> None:
    time.sleep(float(os.environ.get(ANSWER_DELAY_VARIABLE) or 0))
    _pipe_directory().mkdir(parents=True, exist_ok=True)
    (_pipe_directory() / "control").write_text(str(pid))


def _foreground() -> int:
    def end(*_: object) -> None:
        (_pipe_directory() / "control").unlink(missing_ok=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, end)
    _started(os.getpid())
    _announce(os.getpid())
    while True:
        time.sleep(1)


def main(argv: list[str]) -> int:
    if argv in (["-f"], ["-d"]):
        if os.environ.get(FAIL_VARIABLE) or _daemon_pid() is not None:
            print("An instance of this daemon is already running", flush=True)
            return 1
        if argv == ["-f"]:
            return _foreground()
        daemon = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        _started(daemon.pid)
        _announce(daemon.pid)
        return 0
    if argv:
        print(f"unknown option {argv[0]}", file=sys.stderr)
        return 1
    pid = _daemon_pid()
    if pid is None:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    clients = [pid for pid in (os.environ.get(CLIENTS_VARIABLE) or "").split(",") if pid]
    for command in sys.stdin.read().split("\n"):
        words = command.split()
        if words == ["get_server_list"] and clients:  # the real daemon lists one pid a line; no server, no line
            print(pid)
        elif words[:1] == ["get_client_list"]:
            if words[1:] != [str(pid)]:
                print(f"Cannot find MPS server {' '.join(words[1:])}", file=sys.stderr)
                return 1
            print("\n".join(clients))
        if command.strip() == "quit":
            time.sleep(float(os.environ.get(QUIT_DELAY_VARIABLE) or 0))
            os.kill(pid, signal.SIGTERM)
            while alive(pid):
                time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
