"""A CUDA MPS control daemon of the server's own, whose clients are the omni engine's stage processes.

vllm-omni runs the talker and the codec decoder (code2wav) as separate processes on one GPU. Without MPS the GPU
time-slices between processes: a talker step and a decoder step never run at the same time, though each alone leaves
most of the GPU idle. Under MPS (NVIDIA's Multi-Process Service) both are clients of one MPS server and their kernels
run side by side. The daemon runs in the foreground as this server's child (`-f`), with private pipe and log
directories, started before vllm-omni spawns its stages, which inherit them through the environment (and, where
CUDA_VISIBLE_DEVICES numbers the server's GPUs, their numbers as the MPS server gives them: 0, 1, ...); after the engine
has shut down it is told to quit, and killed if it has not within the time allowed, so that it never outlives the
server holding GPU memory.

SPEECH_OMNI__CUDA_MPS=auto (the default) starts it only where the two stages share a GPU that is this server's alone:
where, at the start, `nvidia-smi` lists no compute process on the server's GPUs and the control program is there; a
daemon that then fails to start leaves the server without MPS, its log saying why. A neighbour that is not an MPS
client would take turns with the MPS server as a whole, and the measured gains were on a GPU a server had to itself.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
SMI = "nvidia-smi"
SMI_TIMEOUT_S = 10.0
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
DEVICES_VARIABLE = "CUDA_VISIBLE_DEVICES"
CLIENT_LIST_TIMEOUT_S = 2.0  # each of the questions asked at a stop about the clients still connected
# `quit` with no client left: on H200s it still ran the whole 30 s allowance at every stop (`clients_at_stop: {}`,
# benchmarks/gpu/2026-12-02-h200-omni-code2wav-cap-8-two-starts/). With no client there is nothing to wait for and
# nothing a kill can cut short: a drain is not held for it
CLIENTLESS_QUIT_TIMEOUT_S = 5.0
COMMAND_LINE_CHARS = 200
AUTO_DECLINED = "omni engine without MPS (SPEECH_OMNI__CUDA_MPS=auto): "  # then why


def command_line(pid: str) -> str:
    """A process's command line as `ps` shows it, cut short; empty where it is gone or not readable here."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            words = source.read().split(b"\0")
    except OSError:
        return ""
    return " ".join(word.decode(errors="replace") for word in words if word)[:COMMAND_LINE_CHARS]


def client_devices(daemon_devices: str | None) -> str | None:
    """What CUDA_VISIBLE_DEVICES must say to an MPS client of a daemon started with `daemon_devices`, or None where
    it can stay as it is. The MPS server renumbers the devices the daemon was given from 0 (NVIDIA's MPS guide,
    "CUDA_VISIBLE_DEVICES"): a client still asking for device 2 of a daemon given only GPU 2 finds no GPU at all. GPU
    and MIG UUIDs name the same device on both sides and stay."""
    if not daemon_devices or not daemon_devices.strip():
        return None
    entries = [entry.strip() for entry in daemon_devices.split(",")]
    if not all(entry.isdigit() for entry in entries):
        return None
    return ",".join(str(index) for index in range(len(entries)))


def gpu_neighbours(devices: str | None, smi: str = SMI) -> dict[str, str] | None:
    """The compute processes on the GPUs `devices` names (CUDA_VISIBLE_DEVICES' indices or UUIDs; every GPU of the
    host where it names none), each pid with its name, as `nvidia-smi` lists them; None where it is missing or fails.
    In a container it lists only the processes its PID namespace shows: others' may be left out."""
    binary = shutil.which(smi)
    if binary is None:
        return None
    command = [binary, "--query-compute-apps=pid,process_name", "--format=csv,noheader"]
    if devices and devices.strip():
        command += ["-i", devices.strip()]
    try:
        listed = subprocess.run(command, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    neighbours: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        pid, _, name = line.partition(",")
        if pid.strip().isdigit():  # not "No running processes found" nor "[N/A]"
            neighbours[pid.strip()] = name.strip()
    return neighbours


class CudaMpsError(RuntimeError):
    """The MPS daemon could not be started or does not answer."""


class CudaMpsDaemon:
    def __init__(
        self,
        control: str = CONTROL,
        root: str | None = None,
        answer_timeout_s: float = 10.0,
        quit_timeout_s: float = 30.0,
        clientless_quit_timeout_s: float = CLIENTLESS_QUIT_TIMEOUT_S,
        only_alone: bool = False,
        smi: str = SMI,
        stages_share_a_gpu: bool = True,
    ) -> None:
        self._control = control
        # SPEECH_OMNI__CUDA_MPS=auto: started only where the stages share a GPU with no other compute process,
        # otherwise none, and why said
        self._only_alone = only_alone
        self._stages_share_a_gpu = stages_share_a_gpu  # MPS shares one GPU: with a GPU each, it has nothing to share
        self._smi = smi
        self._root = root  # where the private directory goes (default: the temporary directory)
        self._answer_timeout_s = answer_timeout_s
        # `quit` returns only once the MPS server has gone: on an H100, 10 s after vllm-omni's last stage had stopped
        self._quit_timeout_s = quit_timeout_s
        self._clientless_quit_timeout_s = min(clientless_quit_timeout_s, quit_timeout_s)
        self._binary: str | None = None
        self._directory: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._environment: dict[str, str] = {}
        self._replaced: dict[str, str] = {}  # what the environment said before the daemon's own values replaced it
        # start() runs in a worker thread that a shutdown cannot cancel: stop() waits for it, or makes it refuse
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def environment(self) -> dict[str, str]:
        """What this process's environment gained, for the stage processes to inherit (empty: not started, or an
        operator's daemon serves)."""
        return dict(self._environment)

    @property
    def quit_timeout_s(self) -> float:
        """How long a stop may take: the time a shutdown must allow for it."""
        return self._quit_timeout_s

    @property
    def pid(self) -> int | None:
        """The daemon's process id while it runs as this server's child."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the daemon and point this process's environment at it; raise CudaMpsError if it cannot serve. Where
        only a GPU of its own will do (`only_alone`) and this one is not, start nothing and say why."""
        with self._lock:
            if self._stopped:
                raise CudaMpsError("the server stopped before its MPS daemon had started")
            if self._only_alone and not self._stages_share_a_gpu:
                log.info(AUTO_DECLINED + "its two stages run on different GPUs")
                return
            binary = shutil.which(self._control)
            given = bool(os.environ.get(PIPE_VARIABLE))  # an operator's daemon: their choice, whatever runs beside
            neighbours = None if given else gpu_neighbours(os.environ.get(DEVICES_VARIABLE), self._smi)
            if self._only_alone and not given:
                why_not = (
                    f"{self._control} is not on PATH" if binary is None
                    else f"{self._smi} could not list the GPU's processes" if neighbours is None
                    else f"other processes use the GPU: {neighbours}" if neighbours
                    else None
                )  # fmt: skip
                if why_not is not None:
                    log.info(AUTO_DECLINED + why_not)
                    return
            if neighbours:
                log.warning(
                    "omni engine under MPS on a GPU other processes use: each takes turns with the MPS server",
                    extra={"neighbours": neighbours},
                )
            if binary is None:
                raise CudaMpsError(
                    f"SPEECH_OMNI__CUDA_MPS is on but {self._control} is not on PATH: it ships with the NVIDIA "
                    "driver's utilities (in a container, the NVIDIA runtime mounts it with the compute capability)"
                )
            self._binary = binary
            if given:
                # an operator's daemon (e.g. a GPU shared through the device plugin's MPS): use it, start none
                if not self._answers(os.environ):
                    raise CudaMpsError(f"no MPS control daemon answers at {PIPE_VARIABLE}={os.environ[PIPE_VARIABLE]}")
                log.info("omni engine under the MPS daemon given", extra={PIPE_VARIABLE: os.environ[PIPE_VARIABLE]})
                return
            try:
                self._start_own(binary)
            except CudaMpsError as error:
                if not self._only_alone:
                    raise
                # `auto` (the default) is a speed-up, not a requirement: a daemon that cannot start here costs it
                log.warning(f"{AUTO_DECLINED}its daemon did not start: {error}")

    def _start_own(self, binary: str) -> None:
        # an OSError on the way (an unusable TMPDIR, a program that cannot be executed) is a daemon that did not
        # start, like one that exits: CudaMpsError, which `auto` declines and `true` refuses
        try:
            self._directory = tempfile.mkdtemp(prefix="speech-mps-", dir=self._root)
        except OSError as error:
            # tempfile.tempdir: the directory gettempdir() chose (None where it found none, as its error says)
            where = self._root or tempfile.tempdir or "the temporary directory"
            raise CudaMpsError(f"could not create the MPS daemon's directory in {where}: {error}") from error
        environment = {
            PIPE_VARIABLE: os.path.join(self._directory, "pipe"),
            LOG_VARIABLE: os.path.join(self._directory, "log"),
        }
        env = os.environ | environment
        # output to a file, not a pipe that nobody reads; a session of its own, so that a signal meant for the
        # server's process group (Ctrl-C, a supervisor) does not kill it before its clients are gone
        output = os.path.join(environment[LOG_VARIABLE], "control-output.txt")
        try:
            for path in environment.values():
                os.makedirs(path)
            with open(output, "wb") as sink:
                self._process = subprocess.Popen(
                    [binary, "-f"], env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
        except OSError as error:
            directory = self._directory
            self._remove_directory()
            raise CudaMpsError(f"{self._control} -f could not be started in {directory}: {error}") from error
        deadline = time.monotonic() + self._answer_timeout_s
        while not self._answers(env, timeout_s=max(0.5, deadline - time.monotonic())):
            exited = self._process.poll()
            if exited is not None or time.monotonic() >= deadline:
                with open(output, encoding="utf-8", errors="replace") as said:
                    detail = said.read().strip()
                self._kill()
                self._remove_directory()
                if exited is not None:
                    raise CudaMpsError(f"{self._control} -f exited with {exited}: {detail}")
                raise CudaMpsError(f"the MPS control daemon did not answer within {self._answer_timeout_s:g} s")
            time.sleep(0.1)
        devices = client_devices(os.environ.get(DEVICES_VARIABLE))
        if devices is not None:
            self._replaced[DEVICES_VARIABLE] = os.environ[DEVICES_VARIABLE]
            environment[DEVICES_VARIABLE] = devices
        self._environment = environment
        os.environ.update(environment)
        log.info("omni engine under its own MPS daemon", extra={"pid": self._process.pid, **environment})

    def stop(self) -> None:
        """Tell the daemon (and its MPS server) to quit, once every client is gone, and kill it if it has not quit
        within the time allowed (a short one where no client was left); forget its environment."""
        with self._lock:
            self._stopped = True
            process = self._process
            if process is None:
                return
            started = time.monotonic()
            env = os.environ | self._environment
            clients = self._clients(env)  # read before `quit`, after which the daemon may answer nothing
            allowed = self._quit_timeout_s if clients is None or clients else self._clientless_quit_timeout_s
            answer = self._send("quit", env, max(0.1, allowed - (time.monotonic() - started)))
            try:
                process.wait(timeout=max(0.1, allowed - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                if clients == {}:
                    log.info("the MPS control daemon had no clients left and had not quit: killed",
                             extra={"timeout_s": allowed})  # fmt: skip
                else:
                    # `quit` waits for the MPS server's clients to go: those still connected are why it did not finish
                    log.warning(
                        "the MPS control daemon did not finish quitting: killed",
                        extra={
                            "timeout_s": allowed, "answer": answer and answer.returncode,
                            "clients_at_stop": clients,
                        },
                    )  # fmt: skip
                self._kill()
            self._process = None
            for key, value in self._environment.items():
                if os.environ.get(key) == value:
                    if key in self._replaced:
                        os.environ[key] = self._replaced[key]
                    else:
                        del os.environ[key]
            self._environment, self._replaced = {}, {}
            self._remove_directory()

    def _kill(self) -> None:
        """The daemon and whatever it started in its session (the MPS server)."""
        process = self._process
        self._process = None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def _clients(self, env: Mapping[str, str]) -> dict[str, str] | None:
        """The clients still connected to the daemon's MPS servers, each process id with its command line (empty
        where it is gone or unreadable), as `get_server_list` and `get_client_list` answer within a short wait; None
        where a question went unanswered (not known to be none)."""
        servers = self._send("get_server_list", env, CLIENT_LIST_TIMEOUT_S)
        if servers is None or servers.returncode != 0:
            return None
        clients: dict[str, str] = {}
        for server in servers.stdout.split():
            answer = self._send(f"get_client_list {server}", env, CLIENT_LIST_TIMEOUT_S) if server.isdigit() else None
            if answer is None or answer.returncode != 0:
                return None
            clients |= {pid: command_line(pid) for pid in answer.stdout.split() if pid.isdigit()}
        return clients

    def _answers(self, env: Mapping[str, str], timeout_s: float = 10.0) -> bool:
        answer = self._send("get_server_list", env, timeout_s)
        return answer is not None and answer.returncode == 0

    def _send(self, command: str, env: Mapping[str, str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
        assert self._binary is not None
        try:
            return subprocess.run(
                [self._binary], input=command + "\n", env=dict(env), capture_output=True, text=True,
                timeout=timeout_s, check=False,
            )  # fmt: skip
        except (subprocess.TimeoutExpired, OSError):  # the program could not be run (no process to be had): no answer
            return None

    def _remove_directory(self) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
