"""The omni engine's request translation and output handling, against fakes of vllm-omni 0.30.0's types."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from app.engine_protocol import EngineUnavailable, SynthesisJob, TaskType, UnsupportedParameter
from app.engines import omni_engine
from app.engines.omni import stage_memory
from app.engines.omni.codec_windows import CodecWindows
from app.engines.omni.engine import (
    DECODER_GRAPH_STATS_ENVIRONMENT,
    REQUEST_SUMMARY_LOGGER,
    STAGE_CHECK_INTERVAL_S,
    OmniEngine,
    profiler_overrides,
)
from app.engines.omni.requests import AudioOutputReader, additional_information, sampling_params_for
from app.engines.omni.stage_plugins import (
    fused_launch,
    lever_switch,
    model_registration,
    prompt_batch,
    talker_windows,
    timeline,
    window_doorbell,
)
from app.engines.qwen3_tts import Qwen3TTSModel, check_job, input_tokens, warmup_job
from app.server import create_app
from app.settings import Settings
from app.timing import TtfaTimeline
from tests.fakes.vllm_omni_0_30 import (
    SAMPLES_PER_FRAME,
    FakeAsyncOmni,
    RequestOutputKind,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)
from tests.support.jobs import job, reference
from tests.support.waiting import until

# -- the model's description -----------------------------------------------------------------------------------------


def test_model_description_from_config(custom_voice_dir: Path, base_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(custom_voice_dir)
    assert model.variant == "custom_voice" and model.task_types == {TaskType.CUSTOM_VOICE}
    assert "vivian" in model.speakers and "uncle_fu" in model.speakers
    assert model.languages[0] == "Auto" and "English" in model.languages and "Chinese" in model.languages
    assert not any("Dialect" in lang for lang in model.languages)
    assert model.sample_rate == 24_000
    base = Qwen3TTSModel.from_dir(base_dir)
    assert base.task_types == {TaskType.BASE} and base.speakers == ()


# -- request translation ---------------------------------------------------------------------------------------------


def test_custom_voice_additional_information(custom_voice_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(custom_voice_dir)
    info = additional_information(job(voice="Vivian", language="english", instructions="Cheerful."), model)
    assert info == {
        "text": ["Hello there."],
        "task_type": ["CustomVoice"],
        "language": ["English"],
        "instruct": ["Cheerful."],
        "max_new_tokens": [2048],
        "speaker": ["vivian"],
        "voice_created_at": [0],
    }
    assert all(isinstance(value, list) and len(value) == 1 for value in info.values())
    assert additional_information(job(), model)["language"] == ["Auto"]


def test_base_additional_information_carries_the_reference(base_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(base_dir)
    ref = reference(2.5, 16_000)
    info = additional_information(job(task_type=TaskType.BASE, ref_audio=ref, ref_text="The transcript."), model)
    samples, rate = info["ref_audio"][0]
    assert rate == 16_000 and len(samples) == 40_000 and isinstance(samples, list)
    assert info["ref_code_length"] == [32]  # ceil(2.5 s * 12.5 Hz) + nothing: 31.25 -> 32
    assert info["ref_text"] == ["The transcript."] and info["x_vector_only_mode"] == [False]
    assert "speaker" not in info


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"task_type": TaskType.BASE}, "task_type"),  # cloning on a CustomVoice checkpoint
        ({"voice": "nobody"}, "voice"),
        ({"ref_audio": reference()}, "ref_audio"),
        ({"ref_text": "words"}, "ref_text"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"instructions": "x" * 501}, "instructions"),
    ],
)
def test_custom_voice_mismatches_name_the_param(custom_voice_dir: Path, changes: dict, param: str) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        check_job(job(**changes), Qwen3TTSModel.from_dir(custom_voice_dir))
    assert info.value.param == param


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({}, "ref_audio"),
        ({"ref_audio": reference()}, "ref_text"),
        ({"ref_audio": reference(0.5), "ref_text": "t"}, "ref_audio"),
        ({"ref_audio": reference(31), "ref_text": "t"}, "ref_audio"),
        ({"task_type": TaskType.CUSTOM_VOICE}, "task_type"),
    ],
)
def test_base_mismatches_name_the_param(base_dir: Path, changes: dict, param: str) -> None:
    fields = {"task_type": TaskType.BASE, **changes}
    with pytest.raises(UnsupportedParameter) as info:
        check_job(job(**fields), Qwen3TTSModel.from_dir(base_dir))
    assert info.value.param == param
    check_job(
        job(task_type=TaskType.BASE, ref_audio=reference(), x_vector_only_mode=True), Qwen3TTSModel.from_dir(base_dir)
    )


def test_sampling_params_copy_the_delta_defaults() -> None:
    defaults = coerce_param_message_types(FakeAsyncOmni().default_sampling_params_list, True)
    params = sampling_params_for(job(max_new_tokens=101, seed=7), defaults)
    assert params[0].max_tokens == 101 and params[0].min_tokens == 2
    assert params[0].seed == 7 and params[0].extra_args == {"tts_local_seed": 7}
    assert params[0].output_kind == params[1].output_kind == RequestOutputKind.DELTA
    assert defaults[0].max_tokens == 4096 and defaults[0].seed is None and defaults[0].extra_args is None
    fixed = sampling_params_for(job(max_new_tokens=101), defaults, fixed_length=True)
    assert fixed[0].min_tokens == fixed[0].max_tokens == 101
    assert sampling_params_for(job(), defaults)[0].max_tokens == 4096


def test_ignore_eos_with_a_length_runs_the_talker_to_it() -> None:
    """vLLM's benchmark field: held past end of speech up to max_new_tokens; with no length it changes nothing."""
    defaults = coerce_param_message_types(FakeAsyncOmni().default_sampling_params_list, True)
    held = sampling_params_for(job(max_new_tokens=101, ignore_eos=True), defaults)[0]
    assert held.min_tokens == held.max_tokens == 101 and held.ignore_eos
    free = sampling_params_for(job(ignore_eos=True), defaults)[0]
    assert (free.min_tokens, free.max_tokens, free.ignore_eos) == (2, 4096, False)


@pytest.mark.parametrize(
    ("changes", "counted"),
    [
        ({}, (2, 0)),  # "Hello there.": 2 tokens of this tokenizer
        ({"instructions": "Speak slowly and warmly."}, (6, 0)),
        ({"instructions": "   "}, (2, 0)),
        ({"task_type": TaskType.BASE, "ref_audio": reference(2.0), "ref_text": "a b"}, (2 + 25, 25)),  # 2 s at 12.5 Hz
        ({"task_type": TaskType.BASE, "ref_audio": reference(2.0), "x_vector_only_mode": True}, (2, 0)),
    ],
    ids=["text", "instructions", "blank-instructions", "in-context-clone", "x-vector-clone"],
)
def test_input_tokens_count_the_text_and_an_in_context_clones_reference_frames(
    base_dir: Path, changes: dict, counted: tuple[int, int]
) -> None:
    """Not the placeholder prompt's length (vllm-omni 0.30's issue #4646): text and instructions as tokenized, plus
    the reference codec frames that an in-context clone prefills."""
    synthesis = job(**changes)
    info = additional_information(synthesis, Qwen3TTSModel.from_dir(base_dir))
    assert input_tokens(WordTokenizer(), synthesis) == counted
    if counted[1]:  # the frames counted are those the talker's conditioning says it prefills
        assert info["ref_code_length"] == [counted[1]]


# -- output handling -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["delta", "cumulative_list", "cumulative_tensor"])
async def test_audio_reader_handles_delta_and_cumulative_outputs(mode: str) -> None:
    omni = FakeAsyncOmni(mode=mode)
    params = coerce_param_message_types(omni.default_sampling_params_list, True)
    params[0].max_tokens = params[0].min_tokens = 80
    reader = AudioOutputReader(cumulative=mode != "delta")
    pieces = [
        s
        async for out in omni.generate({"prompt_token_ids": [1]}, request_id="x", sampling_params_list=params)
        if (s := reader.read(out)) is not None
    ]
    assert np.array_equal(np.concatenate(pieces), omni.last_waveform)
    assert reader.sample_rate == 24_000


# -- the engine on the fake AsyncOmni ----------------------------------------------------------------------------------


def edited_profile(directory: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the shipped profile at `directory/name`, its one connector's settings edited by `edit`."""
    profile = yaml.safe_load(Path("deploy/vllm-omni/customvoice.yaml").read_text())
    (connector,) = profile["connectors"].values()
    edit(connector)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(profile))
    return path


def profile_without_ramp(directory: Path, **more: object) -> str:
    """A copy of the shipped profile with one first window then steady ones of 25 frames, as vllm-omni's own
    qwen3_tts.yaml (a request may size its first window), with `more` connector settings on top."""
    profile = yaml.safe_load(Path("deploy/vllm-omni/customvoice.yaml").read_text())
    extra = profile["connectors"]["connector_of_shared_memory"]["extra"]
    extra.pop("codec_chunk_ramp", None)
    extra.pop("codec_chunk_adaptive", None)
    extra["codec_chunk_frames"] = 25
    extra["initial_codec_chunk_frames"] = 1
    extra.update(more)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "customvoice-no-ramp.yaml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


# The service settings each engine of `make_engine` was built from: the engine itself holds only its own group.
SERVICE_SETTINGS: weakref.WeakKeyDictionary[OmniEngine, Settings] = weakref.WeakKeyDictionary()


def service_settings(engine: OmniEngine) -> Settings:
    """The settings to serve an engine of `make_engine` with (`create_app(service_settings(engine), engine=engine)`)."""
    return SERVICE_SETTINGS[engine]


def make_engine(model_dir: Path, fake: FakeAsyncOmni, **settings: object) -> OmniEngine:
    settings = {  # never the working directory; small warm-ups unless a test sets them
        "voice_store": tempfile.mkdtemp(prefix="voices-"),
        "omni_warmup_batch_sizes": [1, 4],
        "deploy_config": "deploy/vllm-omni/customvoice.yaml",
        "load_format": "dummy",
        **settings,
    }
    config = Settings(engine="omni", model=str(model_dir), **settings)

    def factory(**kwargs: object) -> FakeAsyncOmni:
        fake.kwargs = kwargs
        return fake

    engine = omni_engine(config, omni_factory=factory)  # as the service builds it: its own settings, and two more
    SERVICE_SETTINGS[engine] = config
    defaults = coerce_param_message_types(fake.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)
    return engine


async def collect(engine: OmniEngine, synthesis_job: SynthesisJob) -> tuple[np.ndarray, int, int]:
    chunks = [c async for c in engine.synthesize(synthesis_job)]
    return (
        np.concatenate([c.samples for c in chunks]),
        sum(c.input_tokens for c in chunks),
        sum(c.output_tokens for c in chunks),
    )


async def test_engine_starts_warms_up_and_streams(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    assert not engine.health().ready and engine.start_phases() == {}
    await engine.start()
    assert engine.health().ready
    assert list(engine.start_phases()) == ["engine", "warmup"]
    assert omni.kwargs == {
        "model": str(custom_voice_dir),
        "log_stats": True,
        "deploy_config": "deploy/vllm-omni/customvoice.yaml",
        "load_format": "dummy",
        "stage_init_timeout": 900,
        "init_timeout": 1200,
        "code2wav_scheduler": "app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler",
        "code2wav_architecture": "SpeechFoldedQwen3TTSCode2Wav",
        "talker_architecture": "SpeechQwen3TTSTalkerFused",
        "talker_windows": True,  # the frames kept as lists
    }
    assert len(omni.requests) == 1 + 4  # warm-up at batch sizes 1 and 4
    samples, tokens_in, tokens_out = await collect(engine, job(request_id="real", max_new_tokens=51, seed=3))
    request = omni.requests[-1]
    assert request["request_id"] == "real" and request["output_modalities"] == ["audio"]
    prompt = request["prompt"]
    assert prompt["type"] == "token" and set(prompt["prompt_token_ids"]) == {1}
    assert len(prompt["prompt_token_ids"]) == 9 + 2  # the estimator's length
    assert tokens_in == 2  # the input as vllm-omni 0.30 counts it: the text's tokens ("Hello there."), reported once
    assert prompt["additional_information"]["speaker"] == ["vivian"]
    assert request["params"][0].max_tokens == 51 and request["params"][0].seed == 3
    assert request["params"][0].output_kind == RequestOutputKind.DELTA
    assert len(samples) == len(omni.last_waveform) and np.array_equal(samples, omni.last_waveform)
    assert tokens_out == len(samples) // SAMPLES_PER_FRAME
    await engine.close()
    assert omni.shut_down


async def test_the_stages_start_at_once_where_the_setting_asks(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__PARALLEL_STAGE_INIT reaches AsyncOmni as vllm-omni's own keyword (read from the pinned wheel in
    tests/unit/test_vllm_omni_wheel.py), with the talker's KV cache sized by the service: measured by vllm-omni while
    code2wav loads beside it, it came out at 0 GiB on the GPU. Without the setting neither is passed."""
    devices: list[int] = []
    gpu_gib = 80
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: devices.append(device) or gpu_gib << 30)
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni, omni={"parallel_stage_init": True})
    await engine.start()
    assert (
        omni.kwargs["parallel_stage_init"] is True
        and omni.kwargs["deploy_config"] == "deploy/vllm-omni/customvoice.yaml"
    )
    # customvoice.yaml's talker: gpu_memory_utilization 0.3 of GPU "0"; the test's model directory holds no weights
    assert devices == [0]
    budget = math.ceil((gpu_gib << 30) * 0.3) - stage_memory.ACTIVATION_ALLOWANCE_BYTES
    assert omni.kwargs["stage_overrides"]["0"] == {"kv_cache_memory_bytes": budget}
    await engine.close()

    serial = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, serial)
    await engine.start()
    assert "parallel_stage_init" not in serial.kwargs and "stage_overrides" not in serial.kwargs
    await engine.close()


async def test_a_kv_cache_budget_set_for_the_talker_wins_over_the_parallel_starts(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: pytest.fail("no need to ask the GPU"))
    omni = FakeAsyncOmni()
    overrides = {"0": {"kv_cache_memory_bytes": 5 * stage_memory.GIB, "max_num_seqs": 32}}
    engine = make_engine(custom_voice_dir, omni, omni={"parallel_stage_init": True, "stage_overrides": overrides})
    await engine.start()
    assert omni.kwargs["stage_overrides"] == overrides
    await engine.close()


async def test_without_the_talkers_share_in_a_profile_vllm_omni_measures_and_the_log_says_why(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: pytest.fail("no need to ask the GPU"))
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni, deploy_config=None, omni={"parallel_stage_init": True})
    await engine.start()
    assert omni.kwargs["parallel_stage_init"] is True and "stage_overrides" not in omni.kwargs
    assert "without the talker's gpu_memory_utilization" in caplog.text
    await engine.close()


async def test_a_talker_share_too_small_for_its_kv_cache_fails_the_start_saying_so(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: 2 * stage_memory.GIB)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni={"parallel_stage_init": True})
    with pytest.raises(ValueError, match=r"gpu_memory_utilization 0\.3 .* raise it in the deploy profile"):
        await engine.start()
    assert not engine.health().ready


async def test_a_switch_interval_reaches_the_stage_processes_environment_before_they_start(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__SWITCH_INTERVAL_MS is in the environment, in seconds, when AsyncOmni spawns the stages (the fake's
    factory reads it where vllm-omni would start them); a later start without it in the same process takes it away."""
    monkeypatch.setenv(model_registration.SWITCH_INTERVAL_VARIABLE, "")  # restored after the test, as it was
    seen: list[str | None] = []

    class Recording(FakeAsyncOmni):
        def __init__(self) -> None:
            super().__init__()
            seen.append(os.environ.get(model_registration.SWITCH_INTERVAL_VARIABLE))

    for settings in ({"switch_interval_ms": 0.5}, {}):
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni=settings)
        engine._factory = lambda **kwargs: Recording()
        await engine.start()
        await engine.close()
    assert seen == ["0.0005", None]


def ringing_profile(tmp_path: Path) -> Path:
    """The shipped profile with its connector the service's, which rings code2wav's window doorbell."""
    return edited_profile(
        tmp_path, "ringing.yaml", lambda connector: connector.update(name=window_doorbell.CONNECTOR_NAME)
    )


def profile_naming_a_worker(profile: Path, worker: str) -> Path:
    """A copy of `profile` beside it whose code2wav stage names its own `worker_cls`."""
    settings = yaml.safe_load(profile.read_text())
    next(stage for stage in settings["stages"] if stage["stage_id"] == 1)["worker_cls"] = worker
    path = profile.with_name(f"named-{profile.name}")
    path.write_text(yaml.safe_dump(settings))
    return path


async def test_a_profile_whose_connector_rings_gives_the_stages_an_address_and_code2wav_the_worker_that_listens(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy profile naming the service's ringing connector: the stages find one address in the environment when
    AsyncOmni spawns them (a new one each start: two servers on a host never share it), and code2wav runs under the
    worker that binds it, unless the operator named another. vllm-omni's own connector: neither."""
    monkeypatch.setenv(window_doorbell.ADDRESS_VARIABLE, "")  # restored after the test, as it was
    ringing = str(ringing_profile(tmp_path))
    seen: list[str | None] = []
    built: list[FakeAsyncOmni] = []

    class Recording(FakeAsyncOmni):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            seen.append(os.environ.get(window_doorbell.ADDRESS_VARIABLE))
            built.append(self)

    theirs = {"stage_overrides": {"1": {"worker_cls": "mine.Worker"}}}
    named_worker = profile_naming_a_worker(Path(ringing), "mine.Worker")
    starts = [
        ({"deploy_config": ringing}, window_doorbell.WORKER_CLASS),
        ({"deploy_config": ringing}, window_doorbell.WORKER_CLASS),
        ({"deploy_config": ringing, "omni": theirs}, "mine.Worker"),
        ({}, None),
        # with a profiler directory, the doorbell's worker, which records on the timeline as the timeline's own does
        ({"deploy_config": ringing, "profiler_dir": str(tmp_path)}, window_doorbell.WORKER_CLASS),
        ({"profiler_dir": str(tmp_path)}, timeline.CODE2WAV_WORKER),
        ({"deploy_config": ringing, "profiler_dir": str(tmp_path), "omni": theirs}, "mine.Worker"),
        # a worker the profile itself names for code2wav: left to the profile, whatever else asks for one
        ({"deploy_config": str(named_worker), "profiler_dir": str(tmp_path)}, None),
    ]
    for settings, worker in starts:
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), **settings)
        engine._factory = Recording
        await engine.start()
        await engine.close()
        assert (built[-1].kwargs.get("stage_overrides") or {}).get("1", {}).get("worker_cls") == worker
    assert all(seen[:3]) and len(set(seen[:3])) == 3 and seen[3] is None and seen[4] and seen[5] is None
    assert built[-1].kwargs["stage_overrides"]["0"]["worker_cls"] == timeline.TALKER_WORKER  # the talker's: still


async def test_the_prompt_batch_is_on_by_default_with_the_services_talker_and_reaches_the_stage_processes(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__PROMPT_BATCH is in the environment when AsyncOmni spawns the stages: on by default with the
    service's talker, off when set false; with vllm-omni's talker the default does not apply (no error, not on), and
    asking for it by name there is refused, naming both."""
    monkeypatch.setenv(prompt_batch.VARIABLE, "")  # restored after the test, as it was
    seen: list[bool] = []

    class Recording(FakeAsyncOmni):
        def __init__(self) -> None:
            super().__init__()
            seen.append(prompt_batch.enabled(os.environ))

    for settings in (
        {"talker_model": "fused"},
        {"prompt_batch": False, "talker_model": "fused"},
        {"talker_model": "vllm-omni"},
        {"prompt_batch": True, "talker_model": "service"},
    ):
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni=settings)
        engine._factory = lambda **kwargs: Recording()
        await engine.start()
        await engine.close()
    assert seen == [True, False, False, True]
    with pytest.raises(
        ValueError,
        match="SPEECH_OMNI__PROMPT_BATCH needs the service's talker: set SPEECH_OMNI__TALKER_MODEL to service",
    ):
        make_engine(custom_voice_dir, FakeAsyncOmni(), omni={"prompt_batch": True, "talker_model": "vllm-omni"})


async def test_the_lever_switch_file_reaches_the_stage_processes_environment_before_they_start(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__LEVER_SWITCH_FILE is in the environment when AsyncOmni spawns the stages, as the file's path; a
    later start without it takes it away. Set with no switchable lever on, it is refused, naming them."""
    monkeypatch.setenv(lever_switch.VARIABLE, "")  # restored after the test, as it was
    seen: list[str | None] = []

    class Recording(FakeAsyncOmni):
        def __init__(self) -> None:
            super().__init__()
            seen.append(lever_switch.from_environ(os.environ).path)

    path = str(tmp_path / "levers")
    for settings in (
        {"talker_model": "fused", "lever_switch_file": path},
        {"talker_model": "fused"},
    ):
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni=settings)
        engine._factory = lambda **kwargs: Recording()
        await engine.start()
        await engine.close()
    assert seen == [path, None]
    with pytest.raises(ValueError, match="switches prompt_batch and frames_as_lists: turn on one"):
        make_engine(
            custom_voice_dir,
            FakeAsyncOmni(),
            omni={"talker_model": "fused", "prompt_batch": False, "frames_as_lists": False, "lever_switch_file": path},
        )
    vllm_omnis = {"talker_model": "vllm-omni", "frames_as_lists": False, "lever_switch_file": path}
    with pytest.raises(
        ValueError, match="with vllm-omni's talker switches frames_as_lists only: set SPEECH_OMNI__FRAMES_AS_LISTS=true"
    ):
        make_engine(custom_voice_dir, FakeAsyncOmni(), omni=vllm_omnis)
    vllm_omnis.pop("frames_as_lists")  # on by default
    assert make_engine(custom_voice_dir, FakeAsyncOmni(), omni=vllm_omnis) is not None


async def test_the_fused_kernels_launch_reaches_the_stage_processes_environment_before_they_start(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__FUSED_KERNELS and SPEECH_OMNI__FUSED_DEPENDENT_LAUNCH are in the environment when AsyncOmni spawns
    the stages, read back there as they were set; a later start with the defaults takes the variable away."""
    monkeypatch.delenv(fused_launch.VARIABLE, raising=False)  # restored after the test
    seen: list[fused_launch.FusedLaunch] = []
    raw: list[str | None] = []

    class Recording(FakeAsyncOmni):
        def __init__(self) -> None:
            super().__init__()
            raw.append(os.environ.get(fused_launch.VARIABLE))
            seen.append(fused_launch.from_environment(os.environ))

    for settings in ({"fused_kernels": "as-tuned", "fused_dependent_launch": False}, {"fused_kernels": "split"}, {}):
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni=settings)
        engine._factory = lambda **kwargs: Recording()
        await engine.start()
        await engine.close()
    assert raw == ["as-tuned", "split+dependent", None]
    assert seen == [
        fused_launch.FusedLaunch("as-tuned", False),
        fused_launch.FusedLaunch("split", True),
        fused_launch.FusedLaunch("prefetch", True),
    ]


def test_a_fused_kernels_setting_it_does_not_know_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="fused_kernels"):
        Settings(engine="omni", omni={"fused_kernels": "fastest"})


@pytest.mark.parametrize("interval", [0.0, 0.001, 1001.0, float("inf"), float("nan")])
def test_a_switch_interval_python_would_not_keep_is_refused_naming_the_field(interval: float) -> None:
    with pytest.raises(ValueError, match="switch_interval_ms"):
        Settings(engine="omni", omni={"switch_interval_ms": interval})


def report_switch_interval(answers: Any) -> None:  # a stage process's start, as vllm-omni spawns one
    model_registration.set_stage_switch_interval()
    answers.put(sys.getswitchinterval())


@pytest.mark.parametrize(("value", "expected"), [("0.0005", 0.0005), ("half a millisecond", 0.005)])
def test_a_stage_process_sets_the_interval_at_its_plugins_registration_and_the_server_does_not(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: float
) -> None:
    """In a process multiprocessing spawned (vllm-omni's stages) the interval is set; in the server's own process,
    where the plugin is loaded too, it is not; a value Python cannot take is left at Python's 5 ms, not a failure."""
    monkeypatch.setenv(model_registration.SWITCH_INTERVAL_VARIABLE, value)
    before = sys.getswitchinterval()
    model_registration.set_stage_switch_interval()
    assert sys.getswitchinterval() == before  # the server's process: not started by multiprocessing
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    stage = context.Process(target=report_switch_interval, args=(answers,))
    stage.start()
    try:
        assert answers.get(timeout=60) == pytest.approx(expected)
    finally:
        stage.join(timeout=60)
    assert stage.exitcode == 0


async def test_vllm_omnis_statistics_are_on_unless_the_setting_turns_them_off(custom_voice_dir: Path) -> None:
    """SPEECH_OMNI__ENGINE_STATS=false starts AsyncOmni without log_stats: no vllm-omni families on /metrics and no
    per-request summary tables formatted on the event loop; by default both, as `vllm serve --omni` has them."""
    for setting, expected in ((None, True), (False, False)):
        omni = FakeAsyncOmni()
        engine = make_engine(custom_voice_dir, omni, omni={} if setting is None else {"engine_stats": setting})
        await engine.start()
        assert omni.kwargs["log_stats"] is expected
        await engine.close()


async def test_vllm_omnis_request_summary_tables_stay_out_of_the_log_unless_asked(custom_voice_dir: Path) -> None:
    """vllm-omni 0.30 logs three tables for every finished request at INFO (about 4 kB: a busy server's log was
    mostly them, benchmarks/gpu/2026-11-30-h200x4-four-way). By default its statistics logger writes warnings only;
    SPEECH_OMNI__REQUEST_SUMMARY_LOG=true writes the tables again; the statistics themselves stay on either way."""
    summaries = logging.getLogger(REQUEST_SUMMARY_LOGGER)  # its name checked against the wheel
    for setting, info_written in ((None, False), (True, True), (False, False)):
        omni = FakeAsyncOmni()
        settings = {} if setting is None else {"request_summary_log": setting}
        engine = make_engine(custom_voice_dir, omni, omni=settings)
        await engine.start()
        assert summaries.isEnabledFor(logging.INFO) is info_written
        assert summaries.isEnabledFor(logging.WARNING)
        assert omni.kwargs["log_stats"] is True
        await engine.close()


async def test_code2wav_is_the_services_folded_model_unless_the_setting_asks(custom_voice_dir: Path) -> None:
    """By default the factory gets the architecture the service's vllm-omni plugin registers for `service-folded`
    (the pipeline then names it as stage 1's model, tests/unit/test_code2wav_scheduling.py): it won on both tools in
    benchmarks/gpu/2026-11-28-h200x4-quad. `service` passes its own; `vllm-omni` passes none, so vllm-omni's own
    code2wav runs."""
    for setting, architecture in (
        (None, "SpeechFoldedQwen3TTSCode2Wav"),
        ("service", "SpeechQwen3TTSCode2Wav"),
        ("service-folded", "SpeechFoldedQwen3TTSCode2Wav"),
    ):
        omni = FakeAsyncOmni()
        engine = make_engine(custom_voice_dir, omni, omni={} if setting is None else {"code2wav_model": setting})
        await engine.start()
        assert omni.kwargs["code2wav_architecture"] == architecture
        await engine.close()
    plain = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, plain, omni={"code2wav_model": "vllm-omni"})
    await engine.start()
    assert "code2wav_architecture" not in plain.kwargs and "code2wav_scheduler" in plain.kwargs
    await engine.close()


async def test_the_talker_is_the_fused_one_unless_the_setting_names_another(custom_voice_dir: Path) -> None:
    """By default the fused talker's architecture reaches the factory, which the pipeline then names as stage 0's
    model; `service` and `compiled-once` pass the ones the plugin registers for them; `vllm-omni` passes none, so
    vllm-omni's own talker runs."""
    plain = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, plain, omni={"talker_model": "vllm-omni"})
    await engine.start()
    assert "talker_architecture" not in plain.kwargs
    await engine.close()
    default = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, default)
    await engine.start()
    assert default.kwargs["talker_architecture"] == "SpeechQwen3TTSTalkerFused"
    await engine.close()
    for setting, architecture in (
        ("service", "SpeechQwen3TTSTalker"),
        ("fused", "SpeechQwen3TTSTalkerFused"),
        ("compiled-once", "SpeechQwen3TTSTalkerCompiledOnce"),
    ):
        omni = FakeAsyncOmni()
        engine = make_engine(custom_voice_dir, omni, omni={"talker_model": setting})
        await engine.start()
        assert omni.kwargs["talker_architecture"] == architecture
        await engine.close()


async def test_the_services_talker_without_its_plugin_fails_the_start_naming_the_setting(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_registration, "entry_points", lambda group: [])
    engine = make_engine(
        custom_voice_dir, FakeAsyncOmni(), omni={"talker_model": "service", "code2wav_model": "vllm-omni"}
    )
    with pytest.raises(RuntimeError, match="SPEECH_OMNI__TALKER_MODEL=service: the service's vllm-omni plugin"):
        await engine.start()


@pytest.mark.parametrize(
    ("plugins", "vllm_plugins", "says"),
    [
        ([], None, "plugin is not installed"),
        ([("speech", "somewhere.else:register")], None, "plugin is not installed"),
        (
            [("speech", model_registration.PLUGIN_TARGET)],
            "lora_filesystem_resolver",
            "VLLM_PLUGINS='lora_filesystem_resolver'",
        ),
    ],
)
async def test_the_services_stage_models_without_their_plugin_fail_the_start_saying_why(
    custom_voice_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    plugins: list[tuple[str, str]],
    vllm_plugins: str | None,
    says: str,
) -> None:
    """The default code2wav and talker are the service's, which the stage processes find only through the package's
    vllm_omni.general_plugins entry point: without it (a source tree the service was not installed from), or with
    VLLM_PLUGINS leaving it out, the start fails at once, naming every setting that needs it, instead of minutes later
    deep in vLLM. vllm-omni's own code2wav and talker need no plugin."""
    monkeypatch.setattr(
        model_registration,
        "entry_points",
        lambda group: [EntryPoint(name, value, group) for name, value in plugins],
    )
    if vllm_plugins is None:
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VLLM_PLUGINS", vllm_plugins)
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    both = "SPEECH_OMNI__CODE2WAV_MODEL=service-folded, SPEECH_OMNI__TALKER_MODEL=fused: "
    with pytest.raises(RuntimeError, match=re.escape(both)) as raised:
        await engine.start()
    assert says in str(raised.value) and str(raised.value).endswith("; or set each to vllm-omni")
    assert omni.kwargs == {}  # nothing was started
    assert not engine.health().ready and says in engine.health().detail
    one = make_engine(custom_voice_dir, FakeAsyncOmni(), omni={"talker_model": "vllm-omni"})
    with pytest.raises(RuntimeError) as alone:
        await one.start()
    assert str(alone.value).startswith("SPEECH_OMNI__CODE2WAV_MODEL=service-folded: ")
    assert str(alone.value).endswith("; or set it to vllm-omni")
    plain = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, plain, omni={"code2wav_model": "vllm-omni", "talker_model": "vllm-omni"})
    await engine.start()
    assert engine.health().ready
    await engine.close()


def test_the_installed_service_reaches_its_code2wav_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment the suite runs in is the service installed as users install it: its entry point is there, and
    a VLLM_PLUGINS that names it keeps it. vLLM 0.30 splits VLLM_PLUGINS on commas and compares the names as they are
    (vllm/envs.py), so a name after a comma and a space is " speech", which loads nothing."""
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert model_registration.unreachable_reason() is None
    monkeypatch.setenv("VLLM_PLUGINS", "other,speech")
    assert model_registration.unreachable_reason() is None
    monkeypatch.setenv("VLLM_PLUGINS", "other, speech")
    assert "leaves out the service's plugin" in (model_registration.unreachable_reason() or "")


async def test_fixed_length_setting_passes_every_frame_once(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni, omni_fixed_length=True)
    await engine.start()
    samples, _, frames = await collect(engine, job(max_new_tokens=100))
    assert omni.requests[-1]["params"][0].min_tokens == 100
    assert frames == 99 and len(samples) == 99 * SAMPLES_PER_FRAME
    assert np.array_equal(samples, omni.last_waveform)


async def test_closing_the_stream_aborts_the_engine_request(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    stream = engine.synthesize(job(request_id="leaves", max_new_tokens=200))
    assert len((await anext(stream)).samples) == SAMPLES_PER_FRAME  # the ramp's 1-frame first window
    await stream.aclose()
    assert "leaves" in omni.aborted and "leaves" not in omni.finished


async def test_abort_reaches_vllm_omni_for_an_active_request(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    await engine.abort("unknown")
    assert omni.aborted == []
    stream = engine.synthesize(job(request_id="slow", max_new_tokens=400))
    await anext(stream)
    await engine.abort("slow")
    assert omni.aborted == ["slow"]
    await stream.aclose()


async def test_mismatch_is_refused_before_the_engine_sees_it(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    sent = len(omni.requests)
    with pytest.raises(UnsupportedParameter):
        await anext(engine.synthesize(job(voice="nobody")))
    assert len(omni.requests) == sent


async def test_engine_death_is_unavailable(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    omni.die_on_request = True
    with pytest.raises(EngineUnavailable):
        await anext(engine.synthesize(job()))
    assert not engine.health().ready


async def test_http_errors_from_the_omni_engine_are_openai_shaped(custom_voice_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        assert model == custom_voice_dir.name
        voices = (await client.get("/v1/audio/voices")).json()["data"]
        assert {v["id"] for v in voices} >= {"vivian", "ryan"} and voices[0]["engine"] == "omni"
        base = {"model": model, "input": "Hi.", "voice": "vivian"}
        for body, status, param in [
            ({"max_new_tokens": 9999}, 400, "max_new_tokens"),
            ({"ref_audio": "UklGRg=="}, 400, "ref_audio"),
            ({"task_type": "Base"}, 400, "task_type"),
            ({"language": "Klingon"}, 400, "language"),
            ({"instructions": "y" * 600}, 400, "instructions"),
            ({"speed": 2.0}, 400, "speed"),  # Qwen3-TTS has no speed control: refused, not ignored
        ]:
            response = await client.post("/v1/audio/speech", json={**base, **body})
            assert response.status_code == status, (body, response.text)
            assert response.json()["error"]["param"] == param
        ok = await client.post("/v1/audio/speech", json={**base, "response_format": "pcm", "max_new_tokens": 26})
        assert ok.status_code == 200 and len(ok.content) == 2 * 25 * SAMPLES_PER_FRAME
        omni.die_on_request = True
        dead = await client.post("/v1/audio/speech", json={**base, "response_format": "pcm"})
        assert dead.status_code == 503 and dead.json()["error"]["code"] == "engine_unavailable"  # found dead by it
        # then every request is told the engine failed, as /health and /ready say: no retry here mends it
        after = await client.post("/v1/audio/speech", json={**base, "response_format": "pcm"})
        assert after.status_code == 503 and after.json()["error"]["code"] == "engine_failed", after.text
        assert "Retry-After" not in after.headers and "restart" in after.json()["error"]["message"]
        ready = await client.get("/ready")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "engine_failed"
        assert "Retry-After" not in ready.headers


async def test_a_client_gone_before_the_body_starts_still_frees_its_slot(custom_voice_dir: Path) -> None:
    """Starlette may cancel a response before its body generator ever runs; the slot must be freed all the same."""
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    model = custom_voice_dir.name
    body = json.dumps({"model": model, "voice": "vivian", "input": "Hi.", "max_new_tokens": 200}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/audio/speech",
        "raw_path": b"/v1/audio/speech",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    for _ in range(5):
        await app({**scope, "state": {}}, _receive_then_leave(body), _discard)
    assert app.state.gate.in_flight == 0


def _receive_then_leave(body: bytes):
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return receive


async def _discard(message: dict) -> None:
    await asyncio.sleep(0.01)  # a slow network: the disconnect is noticed before the body's first byte is asked for


def test_warm_up_covers_the_batch_sizes_admission_allows(custom_voice_dir: Path) -> None:
    assert make_engine(custom_voice_dir, FakeAsyncOmni(), omni_warmup_batch_sizes=None).warmup_batch_sizes() == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
    ]  # the profile's talker batch
    limited = make_engine(custom_voice_dir, FakeAsyncOmni(), omni_warmup_batch_sizes=None, max_concurrency=24)
    assert limited.warmup_batch_sizes() == [1, 2, 4, 8, 16, 24]
    assert make_engine(custom_voice_dir, FakeAsyncOmni()).warmup_batch_sizes() == [1, 4]  # set explicitly


async def test_a_base_checkpoint_warms_up_both_cloning_paths_before_ready(base_dir: Path) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(base_dir, omni, deploy_config="deploy/vllm-omni/voice-clone.yaml")
    await engine.start()
    assert engine.health().ready
    assert len(omni.requests) == 1 + 4
    infos = [r["prompt"]["additional_information"] for r in omni.requests]
    assert {info["task_type"][0] for info in infos} == {"Base"}
    assert all(info["ref_audio"][0][1] == 24_000 and len(info["ref_audio"][0][0]) == 48_000 for info in infos)
    x_vector_only = [info["x_vector_only_mode"][0] for info in infos[1:]]
    assert x_vector_only == [False, True, False, True]  # in-context (with a transcript) and x-vector-only cloning
    assert all(("ref_text" in info) != info["x_vector_only_mode"][0] for info in infos)
    await engine.close()


async def test_a_persistent_cache_directory_holds_every_compile_cache(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(key, "unset")  # recorded, so that the test leaves the environment as it found it
        monkeypatch.delenv(key)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/operator/triton")  # set explicitly: it wins
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), compile_cache_dir=str(tmp_path))
    await engine.start()
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == "/operator/triton"
    await engine.close()


def profile_without_probes(directory: Path) -> Path:
    def quiet(connector: dict[str, Any]) -> None:
        assert connector["extra"]["engine_probe_interval_s"] > 0  # the shipped profile logs its probes
        connector["extra"]["engine_probe_interval_s"] = 0

    return edited_profile(directory, "quiet.yaml", quiet)


async def test_engine_probes_turn_on_the_decoders_graph_stats(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in DECODER_GRAPH_STATS_ENVIRONMENT:
        monkeypatch.setenv(key, "unset")  # recorded, so that the test leaves the environment as it found it
        monkeypatch.delenv(key)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), deploy_config=str(profile_without_probes(tmp_path)))
    await engine.start()
    assert not any(key in os.environ for key in DECODER_GRAPH_STATS_ENVIRONMENT)
    await engine.close()

    monkeypatch.setenv("VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS_LOG_EVERY", "50")  # set explicitly: it wins
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    assert os.environ["VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS"] == "1"
    assert os.environ["VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS_LOG_EVERY"] == "50"
    await engine.close()


def test_random_weights_are_warned_to_leave_code2wav_unlike_real_ones(
    custom_voice_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="app.engines.omni.engine"):
        make_engine(custom_voice_dir, FakeAsyncOmni(), load_format="safetensors")
        # code2wav loading a checkpoint of its own (deploy/gpu/codec_weights.py) while the talker stays random
        make_engine(custom_voice_dir, FakeAsyncOmni(), stage_overrides={"1": {"load_format": "auto"}})
        assert not [r for r in caplog.records if "random weights" in r.getMessage()]
        make_engine(custom_voice_dir, FakeAsyncOmni())  # the tests' engines run on random weights
    (warned,) = [r for r in caplog.records if "random weights" in r.getMessage()]
    assert "decodes eagerly" in warned.getMessage()


def test_a_batch_override_beyond_the_graph_cap_is_warned_about(
    custom_voice_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="app.engines.omni.engine"):
        make_engine(custom_voice_dir, FakeAsyncOmni())
        assert not [r for r in caplog.records if "CUDA graphs" in r.getMessage()]
        # the profile's graphs reach 512 tokens: a larger batch still has one
        make_engine(custom_voice_dir, FakeAsyncOmni(), stage_overrides={"0": {"max_num_seqs": 96}})
        assert not [r for r in caplog.records if "CUDA graphs" in r.getMessage()]
        capped = {"max_num_seqs": 96, "compilation_config": {"max_cudagraph_capture_size": 64}}
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), stage_overrides={"0": capped})
        listed = {"compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8]}}  # a list wins over vLLM's cap
        make_engine(custom_voice_dir, FakeAsyncOmni(), stage_overrides={"0": listed})
    assert engine.capabilities().max_concurrency == 96
    warned = [r.max_cudagraph_capture_size for r in caplog.records if "CUDA graphs" in r.getMessage()]  # type: ignore[attr-defined]
    assert warned == [64, 8]


def test_warm_up_jobs_pass_the_checks_of_every_variant(base_dir: Path, tmp_path: Path) -> None:
    design_dir = tmp_path / "design"
    shutil.copytree(base_dir, design_dir)
    config = json.loads((design_dir / "config.json").read_text())
    (design_dir / "config.json").write_text(json.dumps({**config, "tts_model_type": "voice_design"}))
    design = Qwen3TTSModel.from_dir(design_dir)
    warm = warmup_job(design, "w")
    assert warm.task_type == TaskType.VOICE_DESIGN and warm.instructions
    check_job(warm, design)
    assert additional_information(warm, design)["instruct"] == [warm.instructions]
    base = Qwen3TTSModel.from_dir(base_dir)
    for index in range(2):
        check_job(warmup_job(base, "w", index), base)


async def test_the_omni_engine_marks_its_submit_before_the_first_audio(custom_voice_dir: Path) -> None:
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    timing = TtfaTimeline(received=0.0)
    stream = engine.synthesize(job(timing=timing))
    assert timing.submitted is None
    await anext(stream)
    assert timing.submitted is not None and timing.submitted > 0
    await stream.aclose()
    await engine.close()


# -- window schedules: a first window then steady ones, or vllm-omni's codec_chunk_ramp -------------------------------

RAMP = CodecWindows((4, 4, 8, 16, 25), 25, ramp=True)
ADAPTIVE = CodecWindows((2,), 25, adaptive=True)
# adaptive windows after a first window the service's talker producer fixes (stage_plugins/talker_windows.py)
ADAPTIVE_FIRST_1 = CodecWindows((1,), 25, adaptive=True, first_fixed=True)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25}, CodecWindows((1,), 25)),
        ({"initial_codec_chunk_frames": 40, "codec_chunk_frames": 25}, CodecWindows((25,), 25)),  # vllm-omni clamps
        ({"initial_codec_chunk_frames": 1, "codec_chunk_ramp": [4, 4, 8, 16, 25]}, RAMP),  # the ramp wins
        ({"initial_codec_chunk_frames": 1, "codec_chunk_ramp": "4, 4, 8,16,25"}, RAMP),
        ({"initial_codec_chunk_frames": 2, "codec_chunk_ramp": [4]}, CodecWindows((2,), 25)),  # too short: no ramp
        ({"initial_codec_chunk_frames": 2, "codec_chunk_ramp": [4, 0]}, CodecWindows((2,), 25)),
        ({"initial_codec_chunk_frames": 2, "codec_chunk_ramp": "4,x"}, CodecWindows((2,), 25)),
        ({"codec_chunk_frames": 25}, None),  # the first window left to vllm-omni's load-dependent choice
        # adaptive windows win over a ramp, as vllm-omni 0.30 reads them; the smallest window is the floor
        ({"codec_chunk_adaptive": True, "codec_chunk_ramp": [2, 4], "codec_chunk_frames": 25}, ADAPTIVE),
        ({"codec_chunk_adaptive": "true", "codec_chunk_min_frames": 2, "codec_chunk_frames": 25}, ADAPTIVE),
        ({"codec_chunk_adaptive": False, "codec_chunk_ramp": [4, 4, 8, 16, 25]}, RAMP),
        (
            {"codec_chunk_adaptive": True, "codec_adaptive_first_frames": 1, "codec_chunk_ramp": [2, 4]},
            ADAPTIVE_FIRST_1,
        ),
        (
            {"codec_chunk_adaptive": False, "codec_adaptive_first_frames": 1, "initial_codec_chunk_frames": 2},
            CodecWindows((2,), 25),
        ),
    ],
)
def test_window_schedules_are_read_as_vllm_omni_reads_them(extra: dict, expected: CodecWindows | None) -> None:
    assert CodecWindows.from_connector_extra(extra) == expected


@pytest.mark.parametrize("said", ["false", "False", " off ", "0", "no"])
def test_a_quoted_no_for_adaptive_windows_is_refused_not_misread(said: str) -> None:
    """vllm-omni 0.30 reads `codec_chunk_adaptive` as `bool(value)`: the string "false" turns adaptive windows ON.
    A profile that says no in quotes would run what it does not say, so it is refused, naming the setting."""
    with pytest.raises(ValueError, match="codec_chunk_adaptive") as refused:
        CodecWindows.from_connector_extra({"codec_chunk_adaptive": said, "initial_codec_chunk_frames": 1})
    assert "without quotes" in str(refused.value)


def test_an_engine_on_a_profile_with_a_quoted_no_does_not_start(custom_voice_dir: Path, tmp_path: Path) -> None:
    misread = profile_without_ramp(tmp_path, codec_chunk_adaptive="false")
    with pytest.raises(ValueError, match="codec_chunk_adaptive"):
        make_engine(custom_voice_dir, FakeAsyncOmni(), deploy_config=misread)


def test_a_ramp_or_adaptive_windows_keep_a_request_first_size_out() -> None:
    assert RAMP.request_first_size_ignored  # vllm-omni ignores the request's field under a ramp
    assert ADAPTIVE.request_first_size_ignored  # and under adaptive windows
    assert not ADAPTIVE_FIRST_1.request_first_size_ignored  # unless the service's producer sets the first window
    assert not CodecWindows((1,), 25).request_first_size_ignored


def test_a_ramp_profile_refuses_a_request_first_window_size(custom_voice_dir: Path, tmp_path: Path) -> None:
    shipped = make_engine(custom_voice_dir, FakeAsyncOmni())  # the shipped profile has a ramp
    assert shipped.capabilities().initial_chunk_frames is None
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), deploy_config=profile_without_ramp(tmp_path))
    assert engine.capabilities().initial_chunk_frames == (1, 25)
    adaptive = profile_without_ramp(tmp_path / "adaptive", codec_chunk_adaptive=True)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), deploy_config=adaptive)
    assert engine.capabilities().initial_chunk_frames is None  # adaptive windows ignore it too
    first = profile_without_ramp(tmp_path / "first", codec_chunk_adaptive=True, codec_adaptive_first_frames=1)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), deploy_config=first)
    assert engine.capabilities().initial_chunk_frames == (1, 25)  # the service's producer honours it


async def test_the_talkers_producer_is_the_services_only_where_the_profile_fixes_adaptive_first_windows(
    custom_voice_dir: Path, tmp_path: Path
) -> None:
    """Without the frames kept as lists (on by default, the next test), the factory is told to register the service's
    talker producer (stage_plugins/talker_windows.py) exactly when the profile asks for it; otherwise vllm-omni's own
    producer runs, untouched."""
    shipped = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, shipped, omni={"frames_as_lists": False})
    await engine.start()
    assert "talker_windows" not in shipped.kwargs
    await engine.close()
    first = profile_without_ramp(tmp_path, codec_chunk_adaptive=True, codec_adaptive_first_frames=1)
    fixed = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, fixed, deploy_config=first, omni={"frames_as_lists": False})
    await engine.start()
    assert fixed.kwargs["talker_windows"] is True  # for the factory, not AsyncOmni
    await engine.close()


async def test_frames_as_lists_run_the_services_producer_and_reach_the_stage_processes_whatever_the_talker(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__FRAMES_AS_LISTS, on by default: the factory registers the service's talker producer (which keeps
    the frames as lists), and the variable is in the environment when AsyncOmni spawns the stages, with vllm-omni's
    talker too; a later start with it off takes it away."""
    monkeypatch.setenv(talker_windows.VARIABLE, "")  # restored after the test, as it was
    seen: list[bool] = []

    class Recording(FakeAsyncOmni):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            seen.append(talker_windows.enabled(os.environ))
            self.kwargs = kwargs

    made: list[Recording] = []
    for settings in ({"talker_model": "vllm-omni"}, {"frames_as_lists": False}):
        engine = make_engine(custom_voice_dir, FakeAsyncOmni(), omni=settings)
        engine._factory = lambda **kwargs: made.append(Recording(**kwargs)) or made[-1]
        await engine.start()
        await engine.close()
    assert seen == [True, False]
    assert made[0].kwargs.get("talker_windows") is True and "talker_windows" not in made[1].kwargs


async def test_two_servers_on_one_host_warm_up_with_different_request_ids(custom_voice_dir: Path) -> None:
    """vllm-omni names its shared-memory windows after request ids: two replicas must never share one."""
    first, second = FakeAsyncOmni(), FakeAsyncOmni()
    engines = [make_engine(custom_voice_dir, omni) for omni in (first, second)]
    for engine in engines:
        await engine.start()
    ids = [{r["request_id"] for r in omni.requests} for omni in (first, second)]
    assert len(ids[0]) == len(ids[1]) == 1 + 4 and not ids[0] & ids[1]
    for engine in engines:
        await engine.close()


async def test_a_profiler_directory_gives_both_stages_a_profiler_and_profiles_them_on_request(
    custom_voice_dir: Path, tmp_path: Path
) -> None:
    """vllm-omni 0.30 builds a stage's profiler from its `profiler_config` (a stage without one refuses to profile):
    with a profiler directory both stages get one, beside the operator's own overrides (a stage's own profiler
    config wins), and a run starts and stops on both through AsyncOmni's own calls. The talker runs under the worker
    that records its first steps on a request timeline; without a profiler directory, under vllm-omni's."""
    omni = FakeAsyncOmni()
    own = {"1": {"load_format": "auto"}}
    engine = make_engine(custom_voice_dir, omni, profiler_dir=str(tmp_path), stage_overrides=own)
    with pytest.raises(EngineUnavailable):
        await engine.start_profile("early")  # nothing to profile before the start
    await engine.start()
    config = {
        "profiler": "torch",
        "torch_profiler_dir": str(tmp_path),
        "torch_profiler_with_stack": False,
        "torch_profiler_record_shapes": False,
    }
    assert omni.kwargs["stage_overrides"] == {  # and the talker's worker that records its first steps on a timeline
        "0": {"profiler_config": config, "worker_cls": timeline.TALKER_WORKER},
        "1": {"load_format": "auto", "profiler_config": config, "worker_cls": timeline.CODE2WAV_WORKER},
    }
    assert await engine.start_profile("c32") == str(tmp_path / "c32")
    await engine.stop_profile("c32")
    # a prefix a stage: vllm-omni names a run's folder after it, and both stage processes are rank 0
    assert omni.profiles == [
        ("start", str(tmp_path / "c32/stage0"), [0]),
        ("start", str(tmp_path / "c32/stage1"), [1]),
        ("stop", None, [0, 1]),
    ]
    theirs = {"0": {"profiler_config": {"profiler": "torch", "torch_profiler_dir": "/elsewhere"}}}
    assert profiler_overrides(theirs, str(tmp_path))["0"]["profiler_config"]["torch_profiler_dir"] == "/elsewhere"
    assert profiler_overrides(own, None) == own and profiler_overrides(None, None) == {}
    # SPEECH_OMNI__PROFILER_STACKS: both stages record Python stacks and shapes
    stacked = profiler_overrides(None, str(tmp_path), stacks=True)
    assert {stage: c["profiler_config"]["torch_profiler_with_stack"] for stage, c in stacked.items()} == {
        "0": True,
        "1": True,
    }
    assert all(c["profiler_config"]["torch_profiler_record_shapes"] for c in stacked.values())
    await engine.close()


async def test_a_timeline_run_records_the_servers_events_and_flags_the_stages_without_their_profiler(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """{"timeline": true}: the flag whose path the stage processes were given (they inherit the environment) names
    the run's folder until the run stops, this process records when each request was handed to vllm-omni and when its
    first audio came back, the talker's producer is the service's (it records the windows it hands on), and vllm-omni's
    profiler is left alone."""
    monkeypatch.setenv(timeline.FLAG_VARIABLE, "")  # restored after the test, whatever the engine sets
    flag = tmp_path / ".timeline-active"
    flag.write_text('{"folder": "an earlier server\'s run"}')
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni, profiler_dir=str(tmp_path))
    await engine.start()
    assert os.environ[timeline.FLAG_VARIABLE] == str(flag) and not flag.exists()
    assert omni.kwargs["talker_windows"] is True
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        started = await client.post("/admin/profile/start", json={"run_id": "tl-c1", "timeline": True})
        assert started.status_code == 200, started.text
        assert started.json()["traces"] == str(tmp_path / "tl-c1")
        assert json.loads(flag.read_text())["folder"] == str(tmp_path / "tl-c1")
        chunks = [chunk async for chunk in engine.synthesize(job(request_id="r1", max_new_tokens=11))]
        stopped = await client.post("/admin/profile/stop", json={"run_id": "tl-c1"})
        assert stopped.status_code == 200 and not flag.exists()
        await collect(engine, job(request_id="r2", max_new_tokens=11))  # after the run: not recorded
    recorded = [json.loads(line) for line in (tmp_path / f"tl-c1/events_server_{os.getpid()}.jsonl").open()]
    # and each window's audio as it came back, the first of them its first audio
    assert len(chunks) > 1 and [(e["event"], e["request_id"]) for e in recorded] == [
        ("submitted", "r1"),
        ("audio", "r1"),
        ("first_audio", "r1"),
        *[("audio", "r1")] * (len(chunks) - 1),
    ]
    assert omni.profiles == []
    # one run at a time: a profiler run ends a timeline's, and a timeline run the profiler's, so that a stop
    # never leaves either on
    await engine.start_timeline("tl-a")
    await engine.start_profile("p-b")
    assert not flag.exists() and [call[0] for call in omni.profiles] == ["start", "start"]
    await engine.start_timeline("tl-c")
    assert flag.exists() and [call[0] for call in omni.profiles] == ["start", "start", "stop"]
    await engine.stop_profile(None)
    assert not flag.exists() and len(omni.profiles) == 3  # the timeline's stop alone
    await engine.close()


async def test_without_a_profiler_directory_the_stages_get_no_timeline_flag(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(timeline.FLAG_VARIABLE, "/left/by/an/earlier/start")
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni, omni={"frames_as_lists": False})  # nor the service's producer
    await engine.start()
    assert timeline.FLAG_VARIABLE not in os.environ and "talker_windows" not in omni.kwargs
    await engine.close()


async def test_a_stage_that_dies_while_nothing_runs_fails_readiness_without_a_request(custom_voice_dir: Path) -> None:
    """vllm-omni 0.30 evicts a stage's dead process and keeps `errored` false; on four H200s a replica whose code2wav
    process was killed stayed ready for as long as it was watched (45 s), its balancer sending it requests that it
    could only refuse. Its health check is what says so, and the engine asks it."""
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    assert engine.health().ready
    sent = len(omni.requests)
    omni.kill_stage(1)
    assert not omni.errored  # as 0.30: the orchestrator lives on
    await until(lambda: not engine.health().ready, timeout_s=30)
    health = engine.health()
    assert not health.ready and health.failed, health
    assert "Stage-1 has no live replica" in health.detail
    assert len(omni.requests) == sent  # seen without a request failing first
    await engine.close()


async def test_the_stage_watch_takes_no_other_failure_for_a_death_and_ends_with_the_engine(
    custom_voice_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    omni.health_check_error = RuntimeError("a check that could not run")
    seen = omni.health_checks
    await until(lambda: omni.health_checks >= seen + 3, timeout_s=30)  # three failed checks, however late they come
    assert engine.health().ready  # not a death
    assert sum("health check failed" in r.getMessage() for r in caplog.records) == 1  # logged once, not each time
    await engine.close()
    after = omni.health_checks
    await asyncio.sleep(3 * STAGE_CHECK_INTERVAL_S)
    assert omni.health_checks == after  # the watch ended with the engine
