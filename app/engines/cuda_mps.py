"""A CUDA MPS control daemon of the server's own, whose clients are the omni engine's stage processes.

vllm-omni runs the talker and the codec decoder (code2wav) as separate processes on one GPU. Without MPS the GPU
time-slices between processes: a talker step and a decoder step never run at the same time, though each alone leaves
most of the GPU idle. Under MPS (NVIDIA's Multi-Process Service) both are clients of one MPS server and their kernels
run side by side. The daemon is started with private pipe and log directories before vllm-omni spawns its stages,
which inherit them through the environment, and is told to quit after the engine has shut down.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"


class CudaMpsError(RuntimeError):
    """The MPS daemon could not be started or does not answer."""


class CudaMpsDaemon:
    def __init__(
        self,
        control: str = CONTROL,
        root: str | None = None,
        answer_timeout_s: float = 10.0,
        quit_timeout_s: float = 30.0,
    ) -> None:
        self._control = control
        self._root = root  # where the private directory goes (default: the temporary directory)
        self._answer_timeout_s = answer_timeout_s
        # `quit` returns only once the MPS server has gone: on an H100, 10 s after vllm-omni's last stage had stopped
        self._quit_timeout_s = quit_timeout_s
        self._binary: str | None = None
        self._directory: str | None = None
        self._environment: dict[str, str] = {}

    @property
    def environment(self) -> dict[str, str]:
        """What this process's environment gained, for the stage processes to inherit (empty: not started, or an
        operator's daemon serves)."""
        return dict(self._environment)

    def start(self) -> None:
        """Start the daemon and point this process's environment at it; raise CudaMpsError if it cannot serve."""
        binary = shutil.which(self._control)
        if binary is None:
            raise CudaMpsError(
                f"SPEECH_OMNI_CUDA_MPS is on but {self._control} is not on PATH: it ships with the NVIDIA driver's "
                "utilities (in a container, the NVIDIA runtime mounts it with the compute and utility capabilities)"
            )
        self._binary = binary
        if os.environ.get(PIPE_VARIABLE):
            # an operator's daemon (e.g. a GPU shared through the device plugin's MPS): use it, start none
            if not self._answers(os.environ):
                raise CudaMpsError(f"no MPS control daemon answers at {PIPE_VARIABLE}={os.environ[PIPE_VARIABLE]}")
            log.info("omni engine under the MPS daemon given", extra={PIPE_VARIABLE: os.environ[PIPE_VARIABLE]})
            return
        self._directory = tempfile.mkdtemp(prefix="speech-mps-", dir=self._root)
        environment = {
            PIPE_VARIABLE: os.path.join(self._directory, "pipe"),
            LOG_VARIABLE: os.path.join(self._directory, "log"),
        }
        for path in environment.values():
            os.makedirs(path)
        env = os.environ | environment
        # the daemon's output goes to a file, not a pipe: a daemon holding a pipe open would keep run() waiting
        output = os.path.join(environment[LOG_VARIABLE], "start.txt")
        with open(output, "w") as sink:
            started = subprocess.run(
                [binary, "-d"], env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                timeout=30, check=False, start_new_session=True,
            )  # fmt: skip
        if started.returncode != 0:
            with open(output) as said:
                detail = said.read().strip()
            self._remove_directory()
            raise CudaMpsError(f"{self._control} -d failed (exit {started.returncode}): {detail}")
        deadline = time.monotonic() + self._answer_timeout_s
        while not self._answers(env):
            if time.monotonic() >= deadline:
                self._send("quit", env, self._quit_timeout_s)
                self._remove_directory()
                raise CudaMpsError(f"the MPS control daemon did not answer within {self._answer_timeout_s:g} s")
            time.sleep(0.1)
        self._environment = environment
        os.environ.update(environment)
        log.info("omni engine under its own MPS daemon", extra=environment)

    def stop(self) -> None:
        """Tell the daemon (and its MPS server) to quit, once every client is gone; forget its environment."""
        if not self._environment:
            return
        env = os.environ | self._environment
        quit_ = self._send("quit", env, self._quit_timeout_s)
        if quit_ is None:
            log.warning("the MPS control daemon did not finish quitting", extra={"timeout_s": self._quit_timeout_s})
        elif quit_.returncode != 0:
            log.warning("the MPS control daemon refused quit", extra={"detail": (quit_.stderr or quit_.stdout).strip()})
        for key, value in self._environment.items():
            if os.environ.get(key) == value:
                del os.environ[key]
        self._environment = {}
        self._remove_directory()

    def _answers(self, env: dict[str, str]) -> bool:
        answer = self._send("get_server_list", env)
        return answer is not None and answer.returncode == 0

    def _send(
        self, command: str, env: dict[str, str], timeout_s: float = 10.0
    ) -> subprocess.CompletedProcess[str] | None:
        assert self._binary is not None
        try:
            return subprocess.run(
                [self._binary], input=command + "\n", env=env, capture_output=True, text=True, timeout=timeout_s,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return None

    def _remove_directory(self) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
