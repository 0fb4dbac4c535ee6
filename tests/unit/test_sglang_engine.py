"""The sglang engine over the sglang-omni 0.1.8 stand-ins (tests/fakes/sglang_omni_0_1_8.py): each job becomes the
request sglang-omni's own speech server would hand its client, the pipeline starts with the settings given, warms up,
streams, stretches time, aborts and notices its pipeline's death; what sglang-omni cannot do is refused naming the
field."""

from __future__ import annotations

import base64
import io
import os
import wave
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine_protocol import (
    EngineError,
    EngineUnavailable,
    SynthesisJob,
    TaskType,
    UnsupportedParameter,
)
from app.engines import sglang_engine
from app.engines.qwen3_tts import Qwen3TTSModel
from app.engines.sglang.engine import (
    ENGINE_ENVIRONMENT,
    PROCESS_START_PATH,
    SWITCH_INTERVAL_VARIABLE,
    SglangEngine,
    SglangRuntime,
    compile_cache_environment,
)
from app.engines.sglang.requests import check_sglang_job, pipeline_settings, request_fields
from app.settings import Settings, SglangSettings
from tests.fakes import sglang_omni_0_1_8 as fake
from tests.fakes.sglang_omni_0_1_8 import SAMPLES_PER_FRAME, MultiProcessPipelineRunner
from tests.support.jobs import job, reference


@pytest.fixture(autouse=True)
def engine_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a start sets in the process's environment is put back after each test (as it was, set or not), so that
    no later test sees one test's start."""
    for key in ENGINE_ENVIRONMENT:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


def engine_for(
    model_dir: Path, runtime: Callable[[], SglangRuntime] = fake.runtime, **settings: object
) -> SglangEngine:
    values = {"model": str(model_dir), "warmup_batch_sizes": [1], **settings}
    return sglang_engine(Settings(engine="sglang", sglang=values), runtime)


async def collect(engine: SglangEngine, the_job: SynthesisJob) -> list:
    return [chunk async for chunk in engine.synthesize(the_job)]


# -- the request ------------------------------------------------------------------------------------------------------


def test_a_preset_voice_is_text_and_tts_params_with_the_codec_stream_on(custom_voice_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(custom_voice_dir)
    fields = request_fields(job(language="English", instructions="Warmly.", seed=7), model)
    assert fields.prompt == "Hello there."
    assert fields.metadata == {
        "task": "tts",
        "tts_params": {
            "task_type": "CustomVoice",
            "language": "english",
            "stream_codec_output": True,  # without it sglang-omni reads non_streaming_mode as "no codec stream"
            "instructions": "Warmly.",
            "voice": "vivian",
            "seed": 7,
        },
    }
    # always a length: sglang-omni's own default (2048 frames, 164 s) would cut a long input short
    assert fields.sampling == {"max_new_tokens": 4096} and fields.extra_params == {}


def test_a_clone_carries_its_reference_as_a_wav_beside_its_transcript(base_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(base_dir)
    clip = reference(2.0, 16_000)
    fields = request_fields(job(task_type=TaskType.BASE, voice="", ref_audio=clip, ref_text="A reference."), model)
    assert isinstance(fields.prompt, dict) and fields.prompt["text"] == "Hello there."
    (ref,) = fields.prompt["references"]
    assert ref["media_type"] == "audio/wav" and ref["text"] == "A reference."
    with wave.open(io.BytesIO(base64.b64decode(ref["data"]))) as decoded:
        assert (decoded.getframerate(), decoded.getnframes(), decoded.getnchannels()) == (16_000, 32_000, 1)
    tts = fields.metadata["tts_params"]
    assert tts["x_vector_only_mode"] is False and "voice" not in tts and "non_streaming_mode" not in tts
    x_vector = request_fields(job(task_type=TaskType.BASE, ref_audio=clip, x_vector_only_mode=True), model)
    assert "text" not in x_vector.prompt["references"][0]  # type: ignore[index]
    assert x_vector.metadata["tts_params"]["x_vector_only_mode"] is True
    streaming_prompt = request_fields(
        job(task_type=TaskType.BASE, ref_audio=clip, ref_text="A.", non_streaming_mode=False), model
    )
    assert streaming_prompt.metadata["tts_params"]["non_streaming_mode"] is False


def test_sampling_fields_set_are_named_explicit_so_a_default_value_is_not_dropped(custom_voice_dir: Path) -> None:
    model = Qwen3TTSModel.from_dir(custom_voice_dir)
    sampled = job(extra_params={"temperature": 0.8, "top_k": 30}, max_new_tokens=50, initial_codec_chunk_frames=3)
    fields = request_fields(sampled, model)
    assert fields.sampling == {"temperature": 0.8, "top_k": 30, "max_new_tokens": 50}
    assert fields.metadata["tts_params"]["explicit_generation_params"] == ["temperature", "top_k"]
    assert fields.extra_params == {"initial_codec_chunk_frames": 3}


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"non_streaming_mode": False}, "non_streaming_mode"),
        ({"ignore_eos": True, "max_new_tokens": 100}, "ignore_eos"),
        ({"extra_params": {"temperature": 0.5, "min_p": 0.1}}, "extra_params"),
        ({"extra_params": {"repetition_penalty": 0}}, "extra_params"),
        ({"extra_params": {"repetition_penalty": 2.5}}, "extra_params"),  # sglang's SamplingParams.verify: (0, 2]
        ({"extra_params": {"top_k": 0}}, "extra_params"),  # and top_k -1 or at least 1
    ],
)
def test_what_sglang_omni_cannot_do_is_refused_naming_the_field(changes: dict, param: str) -> None:
    with pytest.raises(UnsupportedParameter) as refused:
        check_sglang_job(job(**changes), fixed_length=False)
    assert refused.value.param == param


def test_ignore_eos_is_what_the_fixed_length_switch_does_and_base_keeps_its_prompt_mode() -> None:
    check_sglang_job(job(ignore_eos=True, max_new_tokens=100), fixed_length=True)
    check_sglang_job(job(ignore_eos=True), fixed_length=False)  # no length to run to: nothing to honour
    check_sglang_job(job(task_type=TaskType.BASE, non_streaming_mode=False), fixed_length=False)


def test_the_engine_settings_become_sglang_omnis_dotted_settings_and_overrides_win() -> None:
    settings = SglangSettings(
        model="m",
        load_format="dummy",
        disable_radix_cache=True,
        chunk_ramp=[1, 3],
        steady_chunk_frames=12,
        pipeline_overrides={"vocoder.factory.initial_max_batch_size": 4, "vocoder.factory.codec_state_slots": 32},
    )
    assert pipeline_settings(settings) == {
        "tts_engine.engine.mem_fraction_static": 0.6,
        "tts_engine.engine.max_running_requests": 64,
        "vocoder.factory.initial_max_batch_size": 4,
        "vocoder.factory.initial_batch_wait_ms": 2.0,
        "tts_engine.engine.load_format": "dummy",
        "tts_engine.engine.disable_radix_cache": True,
        "vocoder.factory.stream_chunk_ramp": [1, 3],
        "vocoder.factory.stream_followup_stride": 12,
        "vocoder.factory.codec_state_slots": 32,
    }


# -- the engine -------------------------------------------------------------------------------------------------------


async def test_start_warms_every_batch_size_then_streams_sglang_omnis_windows(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir, warmup_batch_sizes=None, max_running_requests=4)
    assert engine.warmup_batch_sizes() == [1, 2, 4]
    await engine.start()
    runner = MultiProcessPipelineRunner.built[-1]
    assert runner.start_timeout == 1200.0 and runner.config.settings["tts_engine.engine.max_running_requests"] == 4
    coordinator = runner.coordinator
    assert [len(ids) for ids in _batches(coordinator)] == [1, 2, 4]  # warm-up, before ready
    assert engine.health().ready
    assert list(engine.start_phases()) == ["imports", "pipeline", "warmup"]
    chunks = await collect(engine, job(request_id="a", text="one two three four five six seven eight"))
    frames = [len(c.samples) // SAMPLES_PER_FRAME for c in chunks]
    assert frames[:4] == [1, 2, 4, 8] and sum(frames) == 4 + 3 * 8  # the talker's end of speech
    assert sum(c.output_tokens for c in chunks) == sum(frames)
    assert chunks[0].input_tokens == 8 and all(c.input_tokens == 0 for c in chunks[1:])  # one token a word
    assert {c.sample_rate for c in chunks} == {24_000}
    await engine.close()
    assert runner.stopped and not engine.health().ready


async def test_preprocessing_in_several_processes_warms_each_with_both_kinds_of_clone(base_dir: Path) -> None:
    """sglang-omni binds each request to the next preprocessing copy in turn as it admits it: after the batch sizes, 2N
    more requests one after another, N in-context clones then N x-vector-only ones, reach every copy with both
    whatever copy the turn stands at. Without copies there is no such round."""
    engine = engine_for(base_dir, warmup_batch_sizes=[1, 2], preprocessing="cpu", preprocessing_processes=3)
    await engine.start()
    coordinator = MultiProcessPipelineRunner.built[-1].coordinator
    ids = [request_id for request_id, _ in coordinator.submitted]
    assert len(ids) == 1 + 2 + 6 and all("-copies-" in request_id for request_id in ids[3:])
    assert [int(request_id.rsplit("-", 1)[1]) for request_id in ids[3:]] == list(range(6))  # admitted in turn
    kinds = [request.metadata["tts_params"]["x_vector_only_mode"] for _, request in coordinator.submitted]
    assert kinds[3:] == [False] * 3 + [True] * 3
    # requests N apart go to one copy, whichever copy the turn starts at: each copy gets one of each kind
    assert [{kinds[3 + position], kinds[3 + position + 3]} for position in range(3)] == [{False, True}] * 3
    await engine.close()
    single = engine_for(base_dir, warmup_batch_sizes=[1, 2], preprocessing="cpu")
    await single.start()
    assert len(MultiProcessPipelineRunner.built[-1].coordinator.submitted) == 3
    await single.close()


async def test_warm_up_prefills_texts_the_prefix_cache_has_not_seen(custom_voice_dir: Path) -> None:
    """With one warm-up text for every job, the talker's prefix cache (radix cache, on by default) left each warm-up
    prefill after the first one token long: the prefills a burst brings (hundreds of tokens, more requests than the
    prefill graphs hold) ran for the first time on callers' requests. Every warm-up job now speaks a text of its own,
    of several lengths, sharing with any other no more than its opening word and the first digits of its number."""
    engine = engine_for(custom_voice_dir, warmup_batch_sizes=None, max_running_requests=8)
    await engine.start()
    texts = [request.prompt for _, request in MultiProcessPipelineRunner.built[-1].coordinator.submitted]
    assert len(texts) == 1 + 2 + 4 + 8 and all(isinstance(text, str) for text in texts)
    assert len(set(texts)) == len(texts)
    openings = [text.split(":")[0] for text in texts]  # each its own: any two part before the sentence
    assert all(opening.startswith("Take ") for opening in openings) and len(set(openings)) == len(texts)
    assert len({len(text.split()) for text in texts}) >= 4
    await engine.close()


def _batches(coordinator: fake.FakeCoordinator) -> list[list[str]]:
    by_batch: dict[str, list[str]] = {}
    for request_id, _ in coordinator.submitted:
        by_batch.setdefault(request_id.rsplit("-", 1)[0], []).append(request_id)
    return list(by_batch.values())


async def test_a_clone_reports_its_reference_frames_as_input_audio_tokens(base_dir: Path) -> None:
    engine = engine_for(base_dir)
    await engine.start()  # warm-up: an in-context clone (batch 1)
    clone = job(task_type=TaskType.BASE, voice="", ref_audio=reference(2.0), ref_text="A reference.", max_new_tokens=9)
    chunks = await collect(engine, clone)
    assert chunks[0].input_audio_tokens == 25 and chunks[0].input_tokens == 2 + 25  # 2 words + 2 s at 12.5 Hz
    assert sum(len(c.samples) for c in chunks) == 9 * SAMPLES_PER_FRAME
    await engine.close()


async def test_speed_is_a_pitch_keeping_time_stretch_of_the_whole_stream(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir)
    await engine.start()
    text = "a sentence long enough to run past twenty frames of audio"
    plain = await collect(engine, job(request_id="p", text=text, max_new_tokens=20))
    fast = await collect(engine, job(request_id="f", text=text, max_new_tokens=20, speed=2.0))
    slow = await collect(engine, job(request_id="s", text=text, max_new_tokens=20, speed=0.5))
    length = sum(len(c.samples) for c in plain)
    assert length == 20 * SAMPLES_PER_FRAME
    assert sum(len(c.samples) for c in fast) == pytest.approx(length / 2, rel=0.01)
    assert sum(len(c.samples) for c in slow) == pytest.approx(length * 2, rel=0.02)  # WSOLA's last window
    assert sum(c.output_tokens for c in fast) == 20  # usage counts the frames generated
    assert engine.capabilities().speed_range == (0.25, 4.0)
    await engine.close()


async def test_a_stream_closed_early_aborts_its_request_and_abort_reaches_one_in_flight(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir)
    await engine.start()
    coordinator = MultiProcessPipelineRunner.built[-1].coordinator
    long = "a sentence long enough to run for many windows of audio before it ends"
    stream = engine.synthesize(job(request_id="early", text=long, max_new_tokens=40))
    await anext(stream)
    await stream.aclose()
    assert "early" in coordinator.aborted
    stream = engine.synthesize(job(request_id="told", text=long, max_new_tokens=40))
    await anext(stream)
    await engine.abort("told")
    with pytest.raises(EngineError, match="aborted"):
        async for _ in stream:
            pass
    await engine.close()


async def test_the_pipelines_death_fails_streams_and_readiness_for_good(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir)
    await engine.start()
    runner = MultiProcessPipelineRunner.built[-1]
    stream = engine.synthesize(job(request_id="cut", text="one two three four five six", max_new_tokens=40))
    await anext(stream)
    runner.kill()
    with pytest.raises(EngineUnavailable, match="pipeline died"):
        async for _ in stream:
            pass
    health = engine.health()
    assert not health.ready and health.failed and "exit=-9" in health.detail
    with pytest.raises(EngineUnavailable):
        await collect(engine, job(request_id="after"))
    await engine.close()


async def test_a_dead_process_is_seen_at_once_before_the_runner_fails_it(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir)
    await engine.start()
    MultiProcessPipelineRunner.built[-1].groups[0].exit_code = 1  # the runner's own check comes every 5 s
    health = engine.health()
    assert not health.ready and health.failed and "exit=1" in health.detail
    await engine.close()


async def test_a_setting_the_pipeline_does_not_have_fails_the_start_with_its_name(custom_voice_dir: Path) -> None:
    engine = engine_for(custom_voice_dir, pipeline_overrides={"vocoder.factory.no_such_knob": 1})
    with pytest.raises(ValueError, match="no_such_knob"):
        await engine.start()
    assert engine.health().failed


async def test_fixed_length_puts_the_end_of_speech_mask_on_the_pipelines_path(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("QWEN3_TTS_FIXED_LENGTH", "0")  # both restored after the test, which the engine sets for good
    engine = engine_for(custom_voice_dir, fixed_length=True)
    await engine.start()
    assert os.environ["PYTHONPATH"] == f"{PROCESS_START_PATH}:/elsewhere"
    assert (Path(PROCESS_START_PATH) / "sitecustomize.py").is_file()
    chunks = await collect(engine, job(request_id="long", max_new_tokens=60, ignore_eos=True))
    assert sum(len(c.samples) for c in chunks) == 60 * SAMPLES_PER_FRAME  # past the talker's end of speech
    await engine.close()


async def test_a_switch_interval_goes_to_the_pipelines_processes_by_their_start_path(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interval alone puts the start folder on the path with the end-of-speech mask off, whatever the
    environment said; a later start without it in the same process takes it away and adds the folder once."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("QWEN3_TTS_FIXED_LENGTH", "1")  # a stray one
    monkeypatch.delenv(SWITCH_INTERVAL_VARIABLE, raising=False)  # all three restored after the test
    engine = engine_for(custom_voice_dir, switch_interval_ms=0.5)
    await engine.start()
    assert os.environ["PYTHONPATH"] == f"{PROCESS_START_PATH}:/elsewhere"
    assert float(os.environ[SWITCH_INTERVAL_VARIABLE]) == 0.0005
    assert os.environ["QWEN3_TTS_FIXED_LENGTH"] == "0"  # every request still ends as it may
    await engine.close()
    engine = engine_for(custom_voice_dir, fixed_length=True)
    await engine.start()
    assert os.environ["PYTHONPATH"] == f"{PROCESS_START_PATH}:/elsewhere"
    assert SWITCH_INTERVAL_VARIABLE not in os.environ and os.environ["QWEN3_TTS_FIXED_LENGTH"] == "1"
    await engine.close()


async def test_without_either_setting_the_pipelines_path_is_left_alone(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv(SWITCH_INTERVAL_VARIABLE, "0.0005")  # left by an earlier start
    monkeypatch.setenv("QWEN3_TTS_FIXED_LENGTH", "1")
    engine = engine_for(custom_voice_dir)
    await engine.start()
    assert os.environ["PYTHONPATH"] == "/elsewhere" and SWITCH_INTERVAL_VARIABLE not in os.environ
    assert os.environ["QWEN3_TTS_FIXED_LENGTH"] == "0"
    await engine.close()


@pytest.mark.parametrize("interval", [0.0, 0.001, 1001.0, float("inf"), float("nan")])
def test_a_switch_interval_python_would_not_keep_is_refused_naming_the_field(interval: float) -> None:
    with pytest.raises(ValueError, match="switch_interval_ms"):
        SglangSettings(switch_interval_ms=interval)


async def test_a_stretched_stream_starts_with_audio_and_reports_every_frame(custom_voice_dir: Path) -> None:
    """speed: 2.0 on sglang-omni's windows of 1, 2, 4, then 8 frames: the first chunk yielded holds audio (a filter
    that held each window until the next had made it empty, its window heard only with the next), and the frames
    reported add up to those generated."""
    engine = engine_for(custom_voice_dir)
    await engine.start()
    chunks = await collect(engine, job(text=" ".join(["word"] * 12), max_new_tokens=40, speed=2.0))
    assert len(chunks[0].samples) > 0 and chunks[0].input_tokens == 12
    assert len(chunks[0].samples) >= 0.5 * SAMPLES_PER_FRAME / 2  # most of its 80 ms window, played twice as fast
    assert sum(c.output_tokens for c in chunks) == 40
    await engine.close()


def test_room_in_sglang_omnis_queue_for_every_request_the_service_admits(custom_voice_dir: Path) -> None:
    """sglang-omni refuses past running + queued requests (64 + 64): an admission limit above that gets the queue it
    needs; below it, or with the queue set by hand, the pipeline is left as it is."""
    key = "tts_engine.engine.max_queued_requests"
    assert key not in engine_for(custom_voice_dir).pipeline
    wide = sglang_engine(Settings(engine="sglang", max_concurrency=200, sglang={"model": str(custom_voice_dir)}))
    assert wide.pipeline[key] == 200 - 64
    given = {"model": str(custom_voice_dir), "pipeline_overrides": {key: 10}}
    assert sglang_engine(Settings(engine="sglang", max_concurrency=200, sglang=given)).pipeline[key] == 10


async def test_the_compile_caches_go_under_one_directory_unless_set_explicitly(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in compile_cache_environment(str(tmp_path)):  # every one the start may set, restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/operator/triton")
    engine = engine_for(custom_voice_dir, compile_cache_dir=str(tmp_path))
    await engine.start()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert os.environ["XDG_CACHE_HOME"] == os.environ["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path)
    assert os.environ["SGLANG_CACHE_DIR"] == str(tmp_path / "sglang")
    assert os.environ["SGLANG_JIT_CACHE_DIR"] == str(tmp_path / "sglang" / "jit")
    assert os.environ["TRITON_CACHE_DIR"] == "/operator/triton"
    await engine.close()


async def test_the_start_names_the_hosts_port_claim_folder_unless_the_operator_did(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang-omni claims its talker's process-group port by a file in SGLANG_OMNI_PORT_CLAIM_DIR, else under TMPDIR
    (tests/unit/test_sglang_port_claims.py): the start names one folder for the host before the pipeline's processes
    are spawned, whatever TMPDIR this server has; a folder the operator set stays."""
    monkeypatch.setenv("TMPDIR", "/elsewhere")
    seen: list[str | None] = []

    def runtime() -> SglangRuntime:
        seen.append(os.environ.get("SGLANG_OMNI_PORT_CLAIM_DIR"))  # when the start loads sglang-omni
        return fake.runtime()

    engine = engine_for(custom_voice_dir, runtime)
    await engine.start()
    assert seen == ["/tmp/sglang-omni-port-claims"]
    await engine.close()
    monkeypatch.setenv("SGLANG_OMNI_PORT_CLAIM_DIR", "/operator/claims")
    engine = engine_for(custom_voice_dir)
    await engine.start()
    assert os.environ["SGLANG_OMNI_PORT_CLAIM_DIR"] == "/operator/claims"
    await engine.close()


async def test_the_capabilities_say_what_the_service_may_ask(custom_voice_dir: Path, base_dir: Path) -> None:
    caps = engine_for(custom_voice_dir, max_running_requests=48).capabilities()
    assert caps.max_concurrency == 48 and caps.initial_chunk_frames == (1, 16) and caps.speaker_embedding_dim is None
    assert caps.task_types == {TaskType.CUSTOM_VOICE} and not caps.voice_cloning
    strided = engine_for(custom_voice_dir, pipeline_overrides={"vocoder.factory.stream_stride": 24}).capabilities()
    assert strided.initial_chunk_frames == (1, 24)
    assert engine_for(base_dir).capabilities().voice_cloning


async def test_a_profile_run_starts_and_stops_the_pipelines_profiler_as_sgl_omni_serve_does(
    custom_voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a profiler directory, a run is a control message to every stage (sgl-omni serve's /start_profile), its
    trace under <dir>/<run_id>/; the stages read their profiler's options from SGLANG_TORCH_PROFILER_*."""
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", "")  # recorded as unset before the test: put back so after it
    monkeypatch.delenv("SGLANG_TORCH_PROFILER_DIR")
    engine = sglang_engine(
        Settings(
            engine="sglang",
            profiler_dir=str(tmp_path),
            sglang={"model": str(custom_voice_dir), "warmup_batch_sizes": [1]},
        ),
        fake.runtime,
    )
    with pytest.raises(EngineUnavailable):
        await engine.start_profile("early")
    await engine.start()
    assert os.environ["SGLANG_TORCH_PROFILER_DIR"] == str(tmp_path)
    assert await engine.start_profile("c1") == str(tmp_path / "c1")
    await collect(engine, job(request_id="profiled"))
    await engine.stop_profile("c1")
    await engine.stop_profile(None)  # whichever runs: none now
    control = fake.ProfilerControlClient.built[-1]
    assert set(control.stage_endpoints) == {"preprocessing", "tts_engine", "vocoder"}
    assert control.sent == [("start", "c1"), ("stop", "c1"), ("stop", None)]
    assert [path.name for path in (tmp_path / "c1").iterdir()] == [f"trace_pid{os.getpid()}_rank0.trace.json"]
    await engine.close()
    assert control.socks is None  # closed with the pipeline
