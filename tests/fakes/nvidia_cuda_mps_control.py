"""A stand-in for `nvidia-cuda-mps-control` (NVIDIA driver 580) where no GPU driver exists, with the real one's
command line: `-d` starts the control daemon in the background, found through CUDA_MPS_PIPE_DIRECTORY (default
/tmp/nvidia-mps) and exits 0, or exits 1 with the real message when one already runs there; without arguments it
reads commands from stdin (`get_server_list`, `quit`) and answers them, or exits 1 with "Cannot find MPS control
daemon process" when no daemon runs. The daemon here is a sleeping process whose pid stands for the control pipe.
The real one is exercised on the GPU machine (tests/gpu, deploy/gpu/side-by-side.sh MPS=1).

Install it on PATH as `nvidia-cuda-mps-control` with `install(directory)`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FAIL_VARIABLE = "FAKE_MPS_CONTROL_FAIL"  # set: `-d` fails as when another daemon holds the pipe directory
QUIT_DELAY_VARIABLE = "FAKE_MPS_QUIT_DELAY_S"  # `quit` returns once the MPS server has gone: so many seconds


def install(directory: Path) -> Path:
    """An executable `nvidia-cuda-mps-control` in `directory` that runs this module."""
    program = directory / "nvidia-cuda-mps-control"
    program.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({__file__!r}, run_name='__main__')\n")
    program.chmod(0o755)
    return program


def _pipe_directory() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def _daemon_pid() -> int | None:
    try:
        pid = int((_pipe_directory() / "control").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def main(argv: list[str]) -> int:
    if argv == ["-d"]:
        if os.environ.get(FAIL_VARIABLE) or _daemon_pid() is not None:
            print("An instance of this daemon is already running")
            return 1
        daemon = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        _pipe_directory().mkdir(parents=True, exist_ok=True)
        (_pipe_directory() / "control").write_text(str(daemon.pid))
        log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")
        log.mkdir(parents=True, exist_ok=True)
        (log / "control.log").write_text("[fake] Starting control daemon using socket control\n")
        return 0
    if argv:
        print(f"unknown option {argv[0]}", file=sys.stderr)
        return 1
    pid = _daemon_pid()
    if pid is None:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    for command in sys.stdin.read().split("\n"):
        if command.strip() == "quit":
            time.sleep(float(os.environ.get(QUIT_DELAY_VARIABLE) or 0))
            os.kill(pid, signal.SIGTERM)
            (_pipe_directory() / "control").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
