"""SPEECH_OMNI__CUDA_MPS's daemon against the real nvidia-cuda-mps-control, with a CUDA client (torch) through it.

Needs only the GPU host's driver utilities and torch, no server: skipped where either is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from app.engines.omni.cuda_mps import PIPE_VARIABLE, CudaMpsDaemon, gpu_neighbours

pytestmark = pytest.mark.skipif(
    shutil.which("nvidia-cuda-mps-control") is None, reason="no nvidia-cuda-mps-control on this host"
)

CLIENT = (
    "import sys, time, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
    "print('context', flush=True); time.sleep(float(sys.argv[1]))"
)


def client(hold_s: float) -> subprocess.Popen[str]:
    """A CUDA context held for hold_s, in a child that inherits the daemon's pipe directory; returns once it is up."""
    process = subprocess.Popen([sys.executable, "-c", CLIENT, str(hold_s)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "context"
    return process


def server_pids(pipe: str) -> list[int]:
    listed = subprocess.run(
        ["nvidia-cuda-mps-control"], input="get_server_list\n", env=os.environ | {PIPE_VARIABLE: pipe},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return [int(word) for word in listed.stdout.split() if word.isdigit()]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(autouse=True)
def no_daemon_given(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)


def test_a_cuda_client_runs_through_the_daemon_and_stop_leaves_nothing() -> None:
    daemon = CudaMpsDaemon()
    daemon.start()
    pid, pipe = daemon.pid, daemon.environment[PIPE_VARIABLE]
    assert pid is not None and running(pid)
    process = client(0.5)
    servers = server_pids(pipe)
    assert len(servers) == 1, servers  # the client's context went to an MPS server of this daemon
    process.wait(timeout=30)
    started = time.monotonic()
    daemon.stop()
    took = time.monotonic() - started
    print(f"quit took {took:.1f} s")
    assert took < 10  # no client left: 5 s allowed, not the 30 s every stop on H200s used to wait
    assert not running(pid) and not any(running(s) for s in servers)
    assert PIPE_VARIABLE not in os.environ and not os.path.exists(pipe)


def test_a_daemon_that_cannot_quit_in_time_is_killed_with_its_server() -> None:
    daemon = CudaMpsDaemon(quit_timeout_s=3)
    daemon.start()
    pid, pipe = daemon.pid, daemon.environment[PIPE_VARIABLE]
    assert pid is not None
    process = client(120)  # still connected when the stop comes: the quit waits for it
    servers = server_pids(pipe)
    try:
        started = time.monotonic()
        daemon.stop()
        assert time.monotonic() - started < 10
        assert not running(pid)
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 10
    while any(running(s) for s in servers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(running(s) for s in servers)  # the MPS server, with its client gone


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi on this host")
def test_auto_starts_no_daemon_beside_a_process_nvidia_smi_lists_on_the_gpu() -> None:
    """SPEECH_OMNI__CUDA_MPS=auto against the real nvidia-smi: a plain CUDA process (no MPS) on the GPU is listed as
    a neighbour, and the daemon is then not started."""
    process = client(120)
    try:
        neighbours = gpu_neighbours(os.environ.get("CUDA_VISIBLE_DEVICES"))
        assert neighbours is not None, "nvidia-smi could not list the GPU's processes"
        if str(process.pid) not in neighbours:
            pytest.skip(f"nvidia-smi does not show this process's pid (its PID namespace?): {neighbours}")
        daemon = CudaMpsDaemon(only_alone=True)
        daemon.start()
        assert daemon.pid is None and PIPE_VARIABLE not in os.environ
    finally:
        process.kill()
        process.wait()
