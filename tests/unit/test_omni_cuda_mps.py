"""The omni engine's own CUDA MPS daemon (SPEECH_OMNI_CUDA_MPS), against a stand-in for nvidia-cuda-mps-control."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from app.engines.cuda_mps import LOG_VARIABLE, PIPE_VARIABLE, CudaMpsDaemon
from app.engines.omni import OmniEngine
from app.settings import Settings
from tests.fakes.nvidia_cuda_mps_control import FAIL_VARIABLE, QUIT_DELAY_VARIABLE, install
from tests.fakes.vllm_omni_0_26 import (
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in first on PATH, and no MPS variables from the environment the tests run in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    install(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    monkeypatch.delenv(LOG_VARIABLE, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # TMPDIR, as read once by tempfile
    return bin_dir


def daemon_answers(pipe_directory: str) -> bool:
    asked = subprocess.run(
        ["nvidia-cuda-mps-control"], input="get_server_list\n", env=os.environ | {PIPE_VARIABLE: pipe_directory},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return asked.returncode == 0


def engine_with_mps(model_dir: Path, tmp_path: Path, seen: dict[str, str | None]) -> OmniEngine:
    omni = FakeAsyncOmni()

    def factory(**kwargs: object) -> FakeAsyncOmni:
        seen["pipe"] = os.environ.get(PIPE_VARIABLE)  # what the stage processes vllm-omni spawns now will inherit
        omni.kwargs = kwargs
        return omni

    settings = Settings(
        engine="omni", model=str(model_dir), load_format="dummy", voice_store=str(tmp_path / "voices"),
        deploy_config="deploy/vllm-omni/customvoice.yaml", omni_warmup_batch_sizes=[1], omni_cuda_mps=True,
    )  # fmt: skip
    engine = OmniEngine(settings, omni_factory=factory)
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)
    return engine


async def test_the_stage_processes_start_under_the_servers_own_daemon(
    control: Path, custom_voice_dir: Path, tmp_path: Path
) -> None:
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen)
    await engine.start()
    assert engine.health().ready
    pipe = seen["pipe"]
    assert pipe is not None and pipe.startswith(str(tmp_path)), pipe  # private, in the temporary directory
    assert os.environ[PIPE_VARIABLE] == pipe and Path(os.environ[LOG_VARIABLE]).name == "log"
    assert daemon_answers(pipe)
    await engine.close()
    assert not daemon_answers(pipe)  # told to quit once the engine was down
    assert PIPE_VARIABLE not in os.environ and LOG_VARIABLE not in os.environ
    assert not Path(pipe).parent.exists()  # its private directory is gone


async def test_without_the_control_program_the_engine_does_not_start(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    seen: dict[str, str | None] = {}
    engine = engine_with_mps(custom_voice_dir, tmp_path, seen)
    with pytest.raises(RuntimeError, match="nvidia-cuda-mps-control is not on PATH"):
        await engine.start()
    assert not seen  # vllm-omni was never started
    health = engine.health()
    assert not health.ready and "nvidia-cuda-mps-control is not on PATH" in health.detail


def test_a_daemon_that_fails_to_start_says_why(control: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FAIL_VARIABLE, "1")
    with pytest.raises(RuntimeError, match=r"exit 1.*An instance of this daemon is already running"):
        CudaMpsDaemon().start()
    assert PIPE_VARIABLE not in os.environ
    assert not list(tmp_path.glob("speech-mps-*"))  # its directory is gone


def test_an_operators_daemon_is_used_not_doubled(
    control: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = str(tmp_path / "theirs")
    monkeypatch.setenv(PIPE_VARIABLE, theirs)
    with pytest.raises(RuntimeError, match="no MPS control daemon answers"):
        CudaMpsDaemon().start()
    subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True)  # the operator's, on their pipe directory
    try:
        ours = CudaMpsDaemon()
        ours.start()
        assert ours.environment == {} and os.environ[PIPE_VARIABLE] == theirs
        assert not list(tmp_path.glob("speech-mps-*"))
        ours.stop()
        assert daemon_answers(theirs)  # not ours to stop
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, check=False)


def test_stop_waits_for_a_quit_that_takes_its_time(
    control: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real `quit` returns only once the MPS server has gone (10 s on an H100): not a failure."""
    monkeypatch.setenv(QUIT_DELAY_VARIABLE, "0.6")
    patient = CudaMpsDaemon(quit_timeout_s=5)
    patient.start()
    pipe = patient.environment[PIPE_VARIABLE]
    patient.stop()
    assert not daemon_answers(pipe)
    assert "did not finish quitting" not in caplog.text
    hasty = CudaMpsDaemon(quit_timeout_s=0.2)
    hasty.start()
    left = int((Path(hasty.environment[PIPE_VARIABLE]) / "control").read_text())  # the stand-in daemon's pid
    hasty.stop()
    assert "the MPS control daemon did not finish quitting" in caplog.text
    os.kill(left, signal.SIGTERM)  # what the quit cut short would have done
