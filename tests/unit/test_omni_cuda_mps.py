"""The omni engine's own CUDA MPS daemon (SPEECH_OMNI__CUDA_MPS), against a stand-in for nvidia-cuda-mps-control."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.engines import omni_engine
from app.engines.omni import OmniEngine, cuda_mps
from app.engines.omni.cuda_mps import (
    AUTO_DECLINED,
    LOG_VARIABLE,
    PIPE_VARIABLE,
    CudaMpsDaemon,
    CudaMpsError,
    client_devices,
    gpu_neighbours,
)
from app.engines.omni.engine import stages_share_a_gpu
from app.settings import Settings
from tests.fakes import nvidia_smi
from tests.fakes.nvidia_cuda_mps_control import (
    ANSWER_DELAY_VARIABLE,
    CLIENTS_VARIABLE,
    FAIL_VARIABLE,
    PIDS_VARIABLE,
    QUIT_DELAY_VARIABLE,
    alive,
    install,
)
from tests.fakes.vllm_omni_0_30 import (
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)


@pytest.fixture
def daemons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand-in first on PATH and no MPS variables from the environment the tests run in; every daemon the
    stand-in starts is killed at the end, whatever happened."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    install(bin_dir)
    nvidia_smi.install(bin_dir)  # no compute process on the GPU unless a test lists some
    for variable in (nvidia_smi.APPS_VARIABLE, nvidia_smi.FAIL_VARIABLE, nvidia_smi.IDS_VARIABLE):
        monkeypatch.delenv(variable, raising=False)
    pids_file = tmp_path / "daemon-pids"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(PIDS_VARIABLE, str(pids_file))
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    monkeypatch.delenv(LOG_VARIABLE, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # TMPDIR, as read once by tempfile
    yield
    for pid in started_daemons(pids_file):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def started_daemons(pids_file: Path) -> list[int]:
    return [int(line) for line in pids_file.read_text().split()] if pids_file.exists() else []


def live_daemons() -> list[int]:
    return [pid for pid in started_daemons(Path(os.environ[PIDS_VARIABLE])) if alive(pid)]


def engine_with_mps(
    model_dir: Path,
    tmp_path: Path,
    seen: dict[str, str | None],
    mps: bool | str = True,
    profile: str = "deploy/vllm-omni/customvoice.yaml",
) -> OmniEngine:
    omni = FakeAsyncOmni()

    def factory(**kwargs: object) -> FakeAsyncOmni:
        seen["pipe"] = os.environ.get(PIPE_VARIABLE)  # what the stage processes vllm-omni spawns now will inherit
        seen["devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        if LOG_VARIABLE in os.environ:
            seen["daemon_devices"] = (Path(os.environ[LOG_VARIABLE]) / "visible-devices").read_text()
        omni.kwargs = kwargs
        return omni

    settings = Settings(
        engine="omni", model=str(model_dir), load_format="dummy", voice_store=str(tmp_path / "voices"),
        deploy_config=profile, omni_warmup_batch_sizes=[1], omni_cuda_mps=mps,
    )  # fmt: skip
    engine = omni_engine(settings, omni_factory=factory)
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)
    return engine


async def test_the_stage_processes_start_under_the_servers_own_daemon(
    daemons: None, custom_voice_dir: Path, tmp_path: Path
) -> None:
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen)
    await engine.start()
    assert engine.health().ready
    pipe = seen["pipe"]
    assert pipe is not None and pipe.startswith(str(tmp_path)), pipe  # private, in the temporary directory
    assert os.environ[PIPE_VARIABLE] == pipe and Path(os.environ[LOG_VARIABLE]).name == "log"
    [daemon] = live_daemons()
    await engine.close()
    assert not alive(daemon)  # told to quit once the engine was down
    assert PIPE_VARIABLE not in os.environ and LOG_VARIABLE not in os.environ
    assert not Path(pipe).parent.exists()  # its private directory is gone


async def test_a_server_given_one_gpu_of_several_asks_the_mps_server_for_it_by_its_new_number(
    daemons: None, custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA_VISIBLE_DEVICES=2 (a server alone on the host's third GPU): the daemon is given GPU 2, which its MPS server
    calls device 0; vllm-omni and its stages, still asking for device 2, found no GPU ("No CUDA GPUs are available",
    measured on a host of four). Once the engine is down the server's own setting is back."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen)
    await engine.start()
    assert (seen["daemon_devices"], seen["devices"]) == ("2", "0")
    await engine.close()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"


@pytest.mark.parametrize(
    ("given", "client"),
    [("2", "0"), ("1,3", "0,1"), (" 0 , 2 ", "0,1"), ("GPU-8977f7c4-e85e", None), ("MIG-1a2b", None), ("", None)],
)
def test_client_devices_renumber_indices_and_keep_uuids(given: str, client: str | None) -> None:
    assert client_devices(given) == client
    assert client_devices(None) is None


async def test_the_daemon_is_stopped_even_when_vllm_omni_fails_to_shut_down(
    daemons: None, custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_with_mps(custom_voice_dir, tmp_path, {})
    await engine.start()
    [daemon] = live_daemons()

    def broken_shutdown() -> None:
        raise RuntimeError("a stage did not answer")

    monkeypatch.setattr(FakeAsyncOmni, "shutdown", lambda self: broken_shutdown())
    with pytest.raises(RuntimeError, match="a stage did not answer"):
        await engine.close()
    assert not alive(daemon)
    assert PIPE_VARIABLE not in os.environ


async def test_without_the_control_program_the_engine_does_not_start(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen)
    with pytest.raises(CudaMpsError, match="nvidia-cuda-mps-control is not on PATH"):
        await engine.start()
    assert not seen  # vllm-omni was never started
    health = engine.health()
    assert not health.ready and "nvidia-cuda-mps-control is not on PATH" in health.detail


def test_a_daemon_that_fails_to_start_says_why(daemons: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FAIL_VARIABLE, "1")
    with pytest.raises(CudaMpsError, match=r"-f exited with 1: An instance of this daemon is already running"):
        CudaMpsDaemon().start()
    assert PIPE_VARIABLE not in os.environ
    assert not list(tmp_path.glob("speech-mps-*"))  # its directory is gone


def test_a_daemon_that_never_answers_is_killed(daemons: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ANSWER_DELAY_VARIABLE, "30")
    with pytest.raises(CudaMpsError, match=r"did not answer within 0\.5 s"):
        CudaMpsDaemon(answer_timeout_s=0.5).start()
    assert live_daemons() == []
    assert PIPE_VARIABLE not in os.environ


def test_stop_waits_for_a_quit_that_takes_its_time_and_kills_one_that_takes_too_long(
    daemons: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real `quit` returns only once the MPS server has gone (10 s on an H100): not a failure. A daemon still
    there when the time allowed is up is killed: it must not outlive the server, holding GPU memory."""
    monkeypatch.setenv(QUIT_DELAY_VARIABLE, "0.6")
    patient = CudaMpsDaemon(quit_timeout_s=5)
    patient.start()
    [first] = live_daemons()
    patient.stop()
    assert not alive(first) and "did not finish quitting" not in caplog.text
    monkeypatch.setenv(CLIENTS_VARIABLE, str(os.getpid()))  # a client still connected: the whole allowance
    hasty = CudaMpsDaemon(quit_timeout_s=0.2)
    hasty.start()
    second = hasty.pid
    assert second is not None and alive(second)
    hasty.stop()
    assert not alive(second)
    assert "the MPS control daemon did not finish quitting: killed" in caplog.text


def test_a_quit_cut_short_names_the_clients_that_were_still_connected(
    daemons: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`quit` waits for the MPS server's clients to go: where it does not finish, the warning says which processes
    were still its clients when the stop began, so that an operator (or the next GPU run) can tell who held it."""
    client = subprocess.Popen(["sleep", "30"])
    try:
        monkeypatch.setenv(CLIENTS_VARIABLE, str(client.pid))
        monkeypatch.setenv(QUIT_DELAY_VARIABLE, "30")
        daemon = CudaMpsDaemon(quit_timeout_s=0.5)
        daemon.start()
        daemon.stop()
    finally:
        client.kill()
        client.wait()
    [warning] = [record for record in caplog.records if "did not finish quitting" in record.getMessage()]
    assert getattr(warning, "clients_at_stop", None) == {str(client.pid): "sleep 30"}
    assert live_daemons() == []


def test_a_daemon_without_clients_quits_in_time_without_a_warning(
    daemons: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CLIENTS_VARIABLE, "")
    daemon = CudaMpsDaemon(quit_timeout_s=5)
    daemon.start()
    daemon.stop()
    assert "did not finish quitting" not in caplog.text and live_daemons() == []


def test_a_stop_during_a_start_leaves_no_daemon(daemons: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shutdown while the daemon is still starting (the start runs in a thread a cancelled task does not stop):
    the stop waits for the start and then quits what it started; a start after a stop starts nothing."""
    monkeypatch.setenv(ANSWER_DELAY_VARIABLE, "0.5")
    daemon = CudaMpsDaemon()
    starting = threading.Thread(target=daemon.start)
    starting.start()
    while not live_daemons():
        time.sleep(0.01)
    daemon.stop()
    starting.join()
    assert live_daemons() == [] and PIPE_VARIABLE not in os.environ
    with pytest.raises(CudaMpsError, match="stopped before"):
        daemon.start()
    assert live_daemons() == []


def test_an_operators_daemon_is_used_not_doubled(
    daemons: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = str(tmp_path / "theirs")
    monkeypatch.setenv(PIPE_VARIABLE, theirs)
    with pytest.raises(CudaMpsError, match="no MPS control daemon answers"):
        CudaMpsDaemon().start()
    subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True)  # the operator's, on their pipe directory
    [operators] = live_daemons()
    ours = CudaMpsDaemon()
    ours.start()
    assert ours.environment == {} and ours.pid is None and os.environ[PIPE_VARIABLE] == theirs
    assert not list(tmp_path.glob("speech-mps-*"))
    ours.stop()
    assert alive(operators)  # not ours to stop


def test_a_daemon_that_had_no_clients_left_is_not_waited_for_long(
    daemons: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On the GPU, every stop waited the whole 30 s for `quit` with no client connected when it began (`clients_at_stop:
    {}`, benchmarks/gpu/2026-12-02-h200-omni-code2wav-cap-8-two-starts/): with none left there is nothing for the
    daemon to wait for and nothing a kill can cut short, so a stop gives it a short allowance, not the whole one."""
    monkeypatch.setenv(CLIENTS_VARIABLE, "")
    monkeypatch.setenv(QUIT_DELAY_VARIABLE, "60")
    caplog.set_level(logging.INFO, logger="app.engines.omni.cuda_mps")
    daemon = CudaMpsDaemon(quit_timeout_s=60, clientless_quit_timeout_s=0.3)
    daemon.start()
    pid = daemon.pid
    began = time.monotonic()
    daemon.stop()
    assert time.monotonic() - began < 30  # the whole allowance would be 60 s
    assert pid is not None and not alive(pid) and live_daemons() == []
    [record] = [record for record in caplog.records if "had no clients left" in record.getMessage()]
    assert record.levelname == "INFO" and "did not finish quitting" not in caplog.text


async def test_auto_starts_the_daemon_on_a_gpu_no_other_process_uses(
    daemons: None, custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__CUDA_MPS=auto: where nvidia-smi lists no compute process on the server's GPUs (asked about those
    CUDA_VISIBLE_DEVICES names), the stages start under the server's own daemon, as with `true`."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    monkeypatch.setenv(nvidia_smi.IDS_VARIABLE, str(tmp_path / "ids"))
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen, mps="auto")
    await engine.start()
    assert seen["pipe"] is not None and len(live_daemons()) == 1
    assert (tmp_path / "ids").read_text() == "1,3"
    await engine.close()
    assert live_daemons() == [] and PIPE_VARIABLE not in os.environ


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ((nvidia_smi.APPS_VARIABLE, "4242,python3;4343,other"), "other processes use the GPU: {'4242': 'python3', "),
        ((nvidia_smi.FAIL_VARIABLE, "1"), "nvidia-smi could not list the GPU's processes"),
        (("PATH", "/nonexistent"), "nvidia-cuda-mps-control is not on PATH"),
    ],
)
async def test_auto_starts_no_daemon_where_the_gpu_is_not_the_servers_alone_and_says_why(
    daemons: None,
    custom_voice_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    setting: tuple[str, str],
    why: str,
) -> None:
    """A neighbour on the GPU, a GPU nvidia-smi cannot read, or no control program: `auto` serves without MPS (where
    `true` refuses to start without the control program) and the log says which."""
    caplog.set_level(logging.INFO, logger="app.engines.omni.cuda_mps")
    monkeypatch.setenv(*setting)
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen, mps="auto")
    await engine.start()
    assert engine.health().ready and seen["pipe"] is None and live_daemons() == []
    [said] = [record.getMessage() for record in caplog.records if "without MPS" in record.getMessage()]
    assert said.startswith("omni engine without MPS (SPEECH_OMNI__CUDA_MPS=auto): " + why), said
    await engine.close()


def test_auto_is_the_default() -> None:
    """MPS with code2wav the lower-priority client led at every sustained level on both tools in two starts
    (benchmarks/gpu/2026-12-04-h200-omni-mps-priority-both-tools/): a server whose GPU is its own gets it unasked."""
    assert Settings().omni.cuda_mps == "auto"


async def test_auto_starts_no_daemon_where_the_stages_run_on_different_gpus(
    daemons: None, custom_voice_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """two-gpu.yaml puts the talker on one GPU and code2wav on another: MPS would have nothing to share."""
    caplog.set_level(logging.INFO, logger="app.engines.omni.cuda_mps")
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen, mps="auto", profile="deploy/vllm-omni/two-gpu.yaml")
    await engine.start()
    assert engine.health().ready and seen["pipe"] is None and live_daemons() == []
    assert "omni engine without MPS (SPEECH_OMNI__CUDA_MPS=auto): its two stages run on different GPUs" in caplog.text
    await engine.close()


@pytest.mark.parametrize(
    ("profile", "overrides", "shared"),
    [
        ("deploy/vllm-omni/customvoice.yaml", None, True),
        ("deploy/vllm-omni/two-gpu.yaml", None, False),
        ("deploy/vllm-omni/two-gpu.yaml", {"1": {"devices": "0"}}, True),
        ("deploy/vllm-omni/two-gpu.yaml", {"0": {"devices": "0,1"}}, True),
        ("deploy/vllm-omni/customvoice.yaml", {"1": {"devices": " 1 "}}, False),
        (None, None, True),  # vllm-omni's own profile: both on the first GPU
        ("deploy/vllm-omni/customvoice.yaml", {"0": {"devices": ""}}, True),  # one naming none: may share
    ],
)
def test_stages_share_a_gpu_reads_each_stages_devices(
    profile: str | None, overrides: dict[str, dict[str, object]] | None, shared: bool
) -> None:
    assert stages_share_a_gpu(profile, overrides) is shared


async def test_under_auto_a_daemon_that_fails_to_start_leaves_the_server_without_mps(
    daemons: None,
    custom_voice_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`auto` is the default: a daemon that cannot start (here: one already running) must not keep the server from
    serving, where `true` refuses to start (test_a_daemon_that_fails_to_start_says_why)."""
    caplog.set_level(logging.INFO, logger="app.engines.omni.cuda_mps")
    monkeypatch.setenv(FAIL_VARIABLE, "1")
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen, mps="auto")
    await engine.start()
    assert engine.health().ready and seen["pipe"] is None and PIPE_VARIABLE not in os.environ
    [record] = [record for record in caplog.records if "daemon did not start" in record.getMessage()]
    assert record.levelname == "WARNING" and "An instance of this daemon is already running" in record.getMessage()
    await engine.close()


def no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A temporary directory under a regular file (TMPDIR pointing nowhere usable): the daemon's own directory cannot
    be created. The pattern its error must match."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    return re.escape(f"could not create the MPS daemon's directory in {blocker / 'tmp'}: ") + ".*Not a directory"


def no_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A control program on PATH that cannot be executed (neither a binary nor a script): exec format error."""
    (tmp_path / "bin" / "nvidia-cuda-mps-control").write_text("not a program\n")
    return re.escape(f"could not be started in {tmp_path / 'speech-mps-'}") + ".*Exec format error"


@pytest.mark.parametrize("failure", [no_directory, no_launch])
def test_under_auto_a_daemon_that_cannot_make_its_directory_or_launch_leaves_the_server_without_mps(
    daemons: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: Callable[[Path, pytest.MonkeyPatch], str],
) -> None:
    """Not only a daemon that exits: an OSError on the way (its directory, launching the program) must not keep the
    default from serving either."""
    why = failure(tmp_path, monkeypatch)
    CudaMpsDaemon(only_alone=True).start()
    assert PIPE_VARIABLE not in os.environ and live_daemons() == []
    [record] = [record for record in caplog.records if record.getMessage().startswith(AUTO_DECLINED)]
    assert record.levelname == "WARNING" and re.search(why, record.getMessage()), record.getMessage()
    assert not list(tmp_path.glob("speech-mps-*"))  # nothing left of its directory


@pytest.mark.parametrize("failure", [no_directory, no_launch])
def test_under_true_a_daemon_that_cannot_make_its_directory_or_launch_is_an_mps_error(
    daemons: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Callable[[Path, pytest.MonkeyPatch], str]
) -> None:
    why = failure(tmp_path, monkeypatch)
    with pytest.raises(CudaMpsError, match=why):
        CudaMpsDaemon().start()
    assert PIPE_VARIABLE not in os.environ and live_daemons() == []
    assert not list(tmp_path.glob("speech-mps-*"))


def test_a_control_program_that_cannot_be_run_to_ask_the_daemon_is_a_daemon_that_does_not_answer(
    daemons: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon launched, but asking it fails with an OSError (no process can be started: a full process table, the
    program removed): under `auto` the server serves without MPS, the daemon killed and its directory removed."""

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if os.path.basename(argv[0]) == "nvidia-cuda-mps-control":
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return subprocess.run(argv, **kwargs)  # nvidia-smi, asked which processes use the GPU

    monkeypatch.setattr(cuda_mps, "subprocess", SimpleNamespace(**{**vars(subprocess), "run": run}))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    CudaMpsDaemon(only_alone=True, answer_timeout_s=0.5).start()
    assert PIPE_VARIABLE not in os.environ and live_daemons() == []
    [record] = [record for record in caplog.records if record.getMessage().startswith(AUTO_DECLINED)]
    assert "did not answer within 0.5 s" in record.getMessage()
    assert not list(tmp_path.glob("speech-mps-*"))


def test_on_a_gpu_other_processes_use_true_starts_the_daemon_and_warns(
    daemons: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(nvidia_smi.APPS_VARIABLE, "4242,python3")
    daemon = CudaMpsDaemon()
    daemon.start()
    try:
        assert daemon.pid is not None and alive(daemon.pid)
        [warning] = [record for record in caplog.records if "other processes use" in record.getMessage()]
        assert getattr(warning, "neighbours", None) == {"4242": "python3"}
    finally:
        daemon.stop()


def test_gpu_neighbours_asks_about_the_servers_gpus_only_and_reads_each_process(
    daemons: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(nvidia_smi.IDS_VARIABLE, str(tmp_path / "ids"))
    monkeypatch.setenv(nvidia_smi.APPS_VARIABLE, "17,/usr/bin/python3;18,a, b")
    assert gpu_neighbours("GPU-8977f7c4") == {"17": "/usr/bin/python3", "18": "a, b"}
    assert (tmp_path / "ids").read_text() == "GPU-8977f7c4"
    monkeypatch.delenv(nvidia_smi.APPS_VARIABLE)
    assert gpu_neighbours(None) == {} and (tmp_path / "ids").read_text() == ""  # every GPU: no -i
    assert gpu_neighbours("0", smi="no-such-program") is None
