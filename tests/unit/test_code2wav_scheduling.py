"""First audio first: the code2wav policy, and the scheduler that applies it (against stand-ins of vllm-omni
0.30.0's generation scheduler on its native data plane, tests/fakes/vllm_omni_0_30_scheduler.py; the real one runs
in tests/gpu)."""

from __future__ import annotations

import dataclasses
import json
import math
import types
from pathlib import Path

import pytest

from app.engines.omni.engine import pipeline_with_stage_plugins, stage_architectures
from app.engines.omni.stage_plugins.code2wav_policy import FRAME_SECONDS, FirstAudioFirst, StepProbe, window_frames
from tests.fakes.vllm_omni_0_30_scheduler import (
    FakeGenerationScheduler,
    FakeSchedulingCoordinator,
    import_against_stand_ins,
    install_generation_scheduler,
)
from tests.support.timeline import recorded_events


def test_a_stream_may_wait_only_while_its_listener_holds_more_than_the_margin() -> None:
    policy = FirstAudioFirst(margin_s=1.0)
    assert not policy.may_wait("new", now=0.0)  # nothing played yet: its first audio is due now
    assert policy.scheduled({"a": 1}, now=0.0) == 1  # first window: 1 frame
    assert not policy.may_wait("a", now=0.0)  # 0.08 s in hand
    assert policy.scheduled({"a": 25}, now=0.05) == 0
    assert policy.may_wait("a", now=0.1)  # 26 x 0.08 - 0.1 = 1.98 s in hand
    held_until = 26 * FRAME_SECONDS - 1.0
    assert policy.may_wait("a", now=held_until - 0.01)
    assert not policy.may_wait("a", now=held_until + 0.01)


def test_the_streams_furthest_ahead_are_the_ones_that_wait_beyond_a_cap() -> None:
    policy = FirstAudioFirst(margin_s=1.0)
    for start, name in enumerate(("a", "b", "c")):  # each given 26 frames (2.08 s), one second apart
        policy.scheduled({name: 26}, now=float(start))
    # at 2.5 s: a holds 2.08 - 2.5 < 0, b 0.58 s, c 1.58 s; "new" has not started (its first audio is due now)
    assert policy.furthest_ahead(["a", "b", "c", "new"], 3, now=2.5) == ["c"]  # only c can spare a step
    assert policy.furthest_ahead(["a", "b", "c"], 0, now=2.5) == []
    assert policy.furthest_ahead(["a", "b", "c"], 2, now=1.0) == ["c", "b"]  # c 2.08 s, b 1.08 s; a 0.08 s


def test_clocks_of_ended_streams_are_dropped() -> None:
    policy = FirstAudioFirst()
    policy.scheduled({"a": 1, "b": 1, "c": 1}, now=0.0)
    policy.forget_all_but(["b"])
    assert len(policy) == 1 and policy.has_started("b") and not policy.has_started("a")


def test_a_window_carries_its_tokens_over_16_code_groups_less_its_context() -> None:
    assert window_frames(16 * 50) == 50
    assert window_frames(16 * (72 + 2), left_context_frames=72) == 2  # a Base request's first window, ref codes first
    assert window_frames(1) == pytest.approx(1 / 16)  # a part cut by the token budget counts as scheduled
    assert window_frames(16 * 10, left_context_frames=72) == 0  # a cut first part of context only: no audio yet


def test_the_probe_reports_an_interval_and_starts_the_next() -> None:
    probe = StepProbe(interval_s=10.0, started=0.0)
    probe.step(windows=4, first_windows=1, deferred=3, streams=9)
    probe.step(windows=2, first_windows=0, deferred=0, streams=7)
    probe.step(windows=0, first_windows=0, deferred=0, streams=30)  # an empty step is not a step
    probe.first_wait(0.010)
    probe.result(0.030, first=True)
    probe.result(0.050)
    assert not probe.due(9.0) and probe.due(10.0)
    line = probe.report(10.0)
    assert line["steps"] == 2 and line["windows_per_step"] == 3 and line["max_windows"] == 4
    assert (line["first_windows"], line["deferred_windows"]) == (1, 3)
    assert line["first_wait_p50_ms"] == 10.0 and line["step_result_p95_ms"] == 50.0
    assert line["first_step_result_p95_ms"] == 30.0  # only the step that carried a first window
    assert (line["streams_p50"], line["streams_max"]) == (7, 9)
    assert probe.report(20.0)["steps"] == 0 and math.isnan(probe.report(30.0)["first_wait_p50_ms"])
    assert probe.report(40.0)["streams_max"] == 0 and math.isnan(probe.report(50.0)["first_step_result_p50_ms"])


@dataclasses.dataclass(frozen=True)
class Stage:  # the fields of vllm-omni 0.30's frozen StagePipelineConfig that the registration reads or sets
    stage_id: int
    model_stage: str
    scheduler_cls: str | None = None
    async_chunk_process_next_stage_input_func: str | None = None
    model_arch: str | None = None


@dataclasses.dataclass(frozen=True)
class Pipeline:  # likewise of its frozen PipelineConfig
    model_type: str
    stages: tuple[Stage, ...]
    model_arch: str | None = None  # the model of a stage that names none


def test_the_service_registers_its_stage_plugins_in_the_pipeline_topology() -> None:
    """vllm-omni 0.30 refuses scheduler_cls as a stage override; the pipeline's stage 1 carries it instead, and stage
    0 the talker's window producer (vllm-omni's own but for adaptive windows' first window)."""
    path = "app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler"
    producer = "vllm_omni.model_executor.stage_input_processors.qwen3_tts.talker2code2wav_async_chunk"
    upstream = Pipeline("qwen3_tts", (Stage(0, "qwen3_tts", None, producer), Stage(1, "code2wav")))
    ours = pipeline_with_stage_plugins(upstream, path, talker_windows=True)
    assert ours.model_type == "qwen3_tts"
    assert [
        (s.stage_id, s.model_stage, s.scheduler_cls, s.async_chunk_process_next_stage_input_func) for s in ours.stages
    ] == [
        (0, "qwen3_tts", None, "app.engines.omni.stage_plugins.talker_windows.talker2code2wav_async_chunk"),
        (1, "code2wav", path, None),
    ]
    assert upstream.stages[1].scheduler_cls is None  # the registry's own copy is left as it was
    assert upstream.stages[0].async_chunk_process_next_stage_input_func == producer
    # the producer only where the profile asks for it; the scheduler only where one is named
    plain = pipeline_with_stage_plugins(upstream, path)
    assert [s.async_chunk_process_next_stage_input_func for s in plain.stages] == [producer, None]
    alone = pipeline_with_stage_plugins(upstream, "", talker_windows=True)
    assert [s.scheduler_cls for s in alone.stages] == [None, None]
    assert alone.stages[0].async_chunk_process_next_stage_input_func.startswith("app.engines.omni")
    with pytest.raises(ValueError, match="no stage 1"):
        pipeline_with_stage_plugins(Pipeline("other", (Stage(0, "x"),)), path)
    # a profile fixing the first window where no stage hands windows on through vllm-omni's Qwen3-TTS producer (another
    # release or pipeline): refused, never a first-window size the service accepts and vllm-omni then overrides
    renamed = Pipeline("qwen3_tts", (Stage(0, "qwen3_tts", None, "vllm_omni.elsewhere.producer"), Stage(1, "code2wav")))
    with pytest.raises(ValueError, match="codec_adaptive_first_frames"):
        pipeline_with_stage_plugins(renamed, path, talker_windows=True)


def test_code2wav_runs_as_the_services_model_only_where_named() -> None:
    """The service's code2wav model replaces the pipeline's own in stage 1 only, beside a scheduler or alone; the
    talker keeps its model."""
    path = "app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler"
    upstream = Pipeline("qwen3_tts", (Stage(0, "qwen3_tts", model_arch="Talker"), Stage(1, "code2wav", model_arch="C")))
    both = pipeline_with_stage_plugins(upstream, path, code2wav_architecture="SpeechQwen3TTSCode2Wav")
    assert [(s.model_arch, s.scheduler_cls) for s in both.stages] == [
        ("Talker", None),
        ("SpeechQwen3TTSCode2Wav", path),
    ]
    alone = pipeline_with_stage_plugins(upstream, "", code2wav_architecture="SpeechQwen3TTSCode2Wav")
    assert [(s.model_arch, s.scheduler_cls) for s in alone.stages] == [
        ("Talker", None),
        ("SpeechQwen3TTSCode2Wav", None),
    ]
    assert [s.model_arch for s in pipeline_with_stage_plugins(upstream, path).stages] == ["Talker", "C"]
    assert upstream.stages[1].model_arch == "C"
    with pytest.raises(ValueError, match="no stage 1"):
        pipeline_with_stage_plugins(Pipeline("other", (Stage(0, "x"),)), "", code2wav_architecture="X")


def test_the_talker_runs_as_the_services_model_only_where_named() -> None:
    """The service's talker replaces the pipeline's own in stage 0 only, beside the service's code2wav or alone."""
    upstream = Pipeline("qwen3_tts", (Stage(0, "qwen3_tts", model_arch="Talker"), Stage(1, "code2wav", model_arch="C")))
    both = pipeline_with_stage_plugins(
        upstream, "", code2wav_architecture="SpeechQwen3TTSCode2Wav", talker_architecture="SpeechQwen3TTSTalker"
    )
    assert [s.model_arch for s in both.stages] == ["SpeechQwen3TTSTalker", "SpeechQwen3TTSCode2Wav"]
    alone = pipeline_with_stage_plugins(upstream, "", talker_architecture="SpeechQwen3TTSTalker")
    assert [s.model_arch for s in alone.stages] == ["SpeechQwen3TTSTalker", "C"]
    assert upstream.stages[0].model_arch == "Talker"
    with pytest.raises(ValueError, match="no stage 0"):
        pipeline_with_stage_plugins(Pipeline("other", (Stage(1, "x"),)), "", talker_architecture="X")


def test_each_stage_runs_its_own_model_or_the_pipelines_with_the_services_in_place() -> None:
    """What model_info.register_in_process is given: as vllm-omni 0.30's Qwen3-TTS pipeline names them, the talker on
    the pipeline (stage 0 names none) and code2wav on its stage, each replaced by the service's where the settings
    say."""
    upstream = Pipeline(
        "qwen3_tts", (Stage(0, "qwen3_tts"), Stage(1, "code2wav", model_arch="Qwen3TTSCode2Wav")), "Qwen3TTSTalker"
    )
    assert stage_architectures(upstream) == ["Qwen3TTSTalker", "Qwen3TTSCode2Wav"]
    assert stage_architectures(upstream, "SpeechFoldedQwen3TTSCode2Wav") == [
        "Qwen3TTSTalker",
        "SpeechFoldedQwen3TTSCode2Wav",
    ]
    assert stage_architectures(upstream, talker_architecture="SpeechQwen3TTSTalkerCompiledOnce") == [
        "SpeechQwen3TTSTalkerCompiledOnce",
        "Qwen3TTSCode2Wav",
    ]


def test_the_stage_plugins_load_without_the_engine_and_the_engine_without_vllm() -> None:
    """vllm-omni's stage processes import the plugins through `app.engines` and `app.engines.omni`: those packages
    bring nothing else of the service along (not the engine, the settings, the engine protocol or numpy); and the
    engine itself imports vllm, vllm-omni and torch only when it starts, so that the service runs without them."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "for name in ('vllm', 'vllm_omni', 'torch', 'transformers'): sys.modules[name] = None  # importing one fails\n"
        "import app.engines.omni.stage_plugins.code2wav_policy\n"
        "loaded = {m for m in sys.modules if m == 'app' or m.startswith('app.')}\n"
        "packages = {'app', 'app.engines', 'app.engines.omni', 'app.engines.omni.stage_plugins'}\n"
        "assert loaded == packages | {'app.engines.omni.stage_plugins.code2wav_policy'}, sorted(loaded)\n"
        # the talker's producer: its timeline recorder and the lever switch only
        "import app.engines.omni.stage_plugins.talker_windows\n"
        "plugins = {m for m in sys.modules if m.startswith('app.')} - packages\n"
        "assert plugins == {f'app.engines.omni.stage_plugins.{n}' for n in ('code2wav_policy', 'lever_switch', "
        "'talker_windows', 'timeline')}, sorted(plugins)\n"
        "from app.engines.omni import OmniEngine\n"
        "assert OmniEngine.__module__ == 'app.engines.omni.engine'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def scheduler_module(monkeypatch: pytest.MonkeyPatch):
    return import_against_stand_ins(
        monkeypatch, "app.engines.omni.stage_plugins.code2wav_scheduler", install_generation_scheduler
    )


def _step(scheduler) -> list[str]:
    """One step, decoded before the next is scheduled: the streams it ran a window of."""
    output = scheduler.schedule()
    scheduler.update_from_output(output, None)
    return sorted(output.num_scheduled_tokens)


def _everyone(scheduler) -> set[str]:
    return {r.request_id for r in scheduler.waiting} | {r.request_id for r in scheduler.running}


def _streaming(scheduler_module, margin_s: float, monkeypatch: pytest.MonkeyPatch, more: dict | None = None):
    """A scheduler with three streams well into playback (each given a window of 1 frame, then one of 25)."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    scheduler = scheduler_module.FirstAudioFirstScheduler({"first_audio_first_margin_s": margin_s} | (more or {}))
    for name in ("a", "b", "c"):
        scheduler.add(name)
    for frames in (1, 25):
        for name in ("a", "b", "c"):
            scheduler.window_arrives(name, frames)
        _step(scheduler)
        clock[0] += 0.05
    return scheduler, clock


def _next_windows_and_a_new_stream(scheduler) -> None:
    """Each playing stream's next window arrives, and so does a new stream with its first window."""
    for name in ("a", "b", "c"):
        scheduler.window_arrives(name)
    scheduler.add("new")
    scheduler.window_arrives("new", 2)


def test_a_first_window_runs_in_a_step_of_its_own(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch)
    _next_windows_and_a_new_stream(scheduler)
    assert _step(scheduler) == ["new"]  # the others hold ~2 s of audio each: they wait
    assert _everyone(scheduler) == {"a", "b", "c", "new"}  # nobody lost
    assert [r.request_id for r in scheduler.waiting][:3] == ["a", "b", "c"]  # back at the head, in their order
    clock[0] += 0.02
    assert _step(scheduler) == ["a", "b", "c"]  # one step later: their windows stayed ready


def test_a_stream_short_of_audio_never_waits(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch)
    clock[0] += 1.5  # 2.08 s given, ~1.6 s played: 0.5 s in hand, under the margin
    _next_windows_and_a_new_stream(scheduler)
    assert _step(scheduler) == ["a", "b", "c", "new"]


def test_the_audio_in_hand_follows_the_windows_scheduled_whatever_their_sizes(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """codec_chunk_adaptive picks each size at run time: the scheduler counts what it scheduled."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    scheduler = scheduler_module.FirstAudioFirstScheduler({})
    scheduler.add("a")
    for frames in (2, 3, 7):  # 12 frames = 0.96 s: under the margin
        scheduler.window_arrives("a", frames)
        _step(scheduler)
    scheduler.window_arrives("a", 25)
    scheduler.add("new")
    scheduler.window_arrives("new", 2)
    assert _step(scheduler) == ["a", "new"]
    scheduler.window_arrives("a", 13)  # now 12 + 25 + 13 = 50 frames: 4 s, well over the margin
    scheduler.add("newer")
    scheduler.window_arrives("newer", 2)
    assert _step(scheduler) == ["newer"]


def test_reference_codes_before_a_first_window_are_not_audio(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Base (voice clone) request's first window carries its reference codes as left context (72 frames here):
    its listener holds the 2 new frames, not 74, so it never sits out for a newer stream."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    scheduler = scheduler_module.FirstAudioFirstScheduler({})
    scheduler.add("clone")
    scheduler.window_arrives("clone", 2, left_context=72)
    _step(scheduler)
    scheduler.window_arrives("clone", 4)
    scheduler.add("new")
    scheduler.window_arrives("new", 2)
    assert _step(scheduler) == ["clone", "new"]  # 0.16 s in hand; counted with its context it would hold 5.9 s


def test_with_no_margin_it_only_observes(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 0.0, monkeypatch)
    _next_windows_and_a_new_stream(scheduler)
    firsts = len(scheduler._probe.first_results_s)  # the step that ran a, b and c's first windows
    output = scheduler.schedule()
    assert sorted(output.num_scheduled_tokens) == ["a", "b", "c", "new"]
    clock[0] += 0.03
    scheduler.update_from_output(output, None)
    assert scheduler._probe.results_s[-1] == pytest.approx(0.03)
    assert scheduler._probe.first_results_s[firsts:] == [pytest.approx(0.03)]  # that step carried new's first window
    assert scheduler._probe.streams[-1] == 4  # a, b, c and new
    assert scheduler._probe.first_waits_s == [0.0, 0.0, 0.0, 0.0]
    scheduler.window_arrives("a")
    later = scheduler.schedule()
    clock[0] += 0.02
    scheduler.update_from_output(later, None)
    assert scheduler._probe.results_s[-1] == pytest.approx(0.02)
    assert len(scheduler._probe.first_results_s) == firsts + 1


def test_while_a_timeline_records_each_window_is_recorded_ready_scheduled_and_decoded(
    scheduler_module, tmp_path: Path
) -> None:
    from app.engines.omni.stage_plugins import timeline

    scheduler = scheduler_module.FirstAudioFirstScheduler({})
    scheduler.add("a")
    scheduler.window_arrives("a", 1)
    assert _step(scheduler) == ["a"]  # no run on: nothing recorded
    scheduler._timeline = timeline.Recorder("code2wav", None)
    scheduler._timeline.pin(str(tmp_path))
    scheduler.add("b")
    scheduler.window_arrives("b", 2)
    scheduler.window_arrives("a", 2)
    assert _step(scheduler) == ["a", "b"]
    recorded = recorded_events(tmp_path, "code2wav")
    assert [(e["event"], e["request_id"]) for e in recorded] == [
        ("window_ready", "b"),
        ("window_ready", "a"),
        ("window_scheduled", "b"),  # a joined the queue behind b when its first window was decoded
        ("window_scheduled", "a"),
        ("window_decoded", "b"),
        ("window_decoded", "a"),
    ]
    assert [e.get("frames") for e in recorded if e["event"] == "window_scheduled"] == [2, 2]
    # the step's windows share its number: the step table rebuilds steps from it, not from the records' times
    assert [e.get("step") for e in recorded if e["event"] == "window_scheduled"] == [1, 1]
    scheduler.window_arrives("a", 2)
    assert _step(scheduler) == ["a"]
    steps = [e.get("step") for e in recorded_events(tmp_path, "code2wav") if e["event"] == "window_scheduled"]
    assert steps == [1, 1, 2]
    # readiness the runner collected with a step (not handed over by the receiving thread) is recorded too
    collected = types.SimpleNamespace(omni_connector_output=types.SimpleNamespace(chunk_ready_req_ids={"b"}))
    scheduler.update_from_output(scheduler.schedule(), collected)
    last = json.loads(next(tmp_path.glob("events_code2wav_*.jsonl")).read_text().splitlines()[-1])
    assert (last["event"], last["request_id"]) == ("window_ready", "b")


def test_a_window_is_recorded_ready_at_its_hand_over_even_when_the_engine_schedules_it_at_once(
    scheduler_module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiving thread hands a window over while the engine's thread runs: the engine can schedule it before the
    receiving thread goes on to record it. Its readiness is the hand-over's time, so ready never follows scheduled (a
    GPU run at a burst of 32 recorded one window scheduled 0.3 ms before it was ready)."""
    from app.engines.omni.stage_plugins import timeline

    scheduler = scheduler_module.FirstAudioFirstScheduler({})
    scheduler._timeline = timeline.Recorder("code2wav", None)
    scheduler._timeline.pin(str(tmp_path))
    base = type(scheduler).__mro__[1]
    hand_over = base.enqueue_omni_connector_output
    clock = [1_000]
    monkeypatch.setattr(timeline.time, "time_ns", lambda: clock[0])

    def engine_schedules_meanwhile(self, output) -> None:
        hand_over(self, output)
        clock[0] += 1_000  # the engine's thread, given the GIL, schedules the window now
        self.schedule()
        clock[0] += 1_000

    monkeypatch.setattr(base, "enqueue_omni_connector_output", engine_schedules_meanwhile)
    scheduler.add("a")
    scheduler.schedule()
    scheduler.window_arrives("a", 2)
    recorded = recorded_events(tmp_path, "code2wav")
    at = {e["event"]: e["ts_ns"] for e in recorded}
    assert set(at) == {"window_ready", "window_scheduled"}, recorded
    assert at["window_ready"] <= at["window_scheduled"], recorded


def _staggered(scheduler_module, monkeypatch: pytest.MonkeyPatch, extra: dict):
    """A scheduler whose streams a, b, c, d started 0.3 s apart, each given a window of 1 frame, then one of 25."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    scheduler = scheduler_module.FirstAudioFirstScheduler(extra)
    for name in ("a", "b", "c", "d"):
        scheduler.add(name)
        for frames in (1, 25):
            scheduler.window_arrives(name, frames)
            _step(scheduler)
        clock[0] += 0.3
    return scheduler, clock


def test_beyond_the_cap_the_streams_furthest_ahead_wait(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 2})
    for name in ("a", "b", "c", "d"):  # each holds 2.08 s less what it played: d 1.78 s ... a 0.88 s
        scheduler.window_arrives(name)
    deferred = scheduler._probe.deferred
    assert _step(scheduler) == ["a", "b"]  # a is under the margin; b is the least ahead of the rest
    assert _everyone(scheduler) == {"a", "b", "c", "d"}  # nobody lost
    assert scheduler._probe.deferred == deferred + 2
    assert _step(scheduler) == ["c", "d"]  # their windows waited one step, no longer


def test_the_cap_never_holds_back_a_stream_short_of_audio(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 2})
    clock[0] += 1.0  # now every stream holds under 1 s: none can spare a step
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    assert _step(scheduler) == ["a", "b", "c", "d"]


def test_under_a_cap_a_first_window_still_runs_first(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 3})
    clock[0] += 0.5  # a holds 0.38 s, b 0.68 s, c 0.98 s, d 1.28 s
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert _step(scheduler) == ["a", "b", "c", "new"]  # d can wait; 4 > 3 is kept


def test_without_a_margin_there_is_no_cap_either(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"code2wav_max_windows_per_step": 1, "first_audio_first_margin_s": 0.0}
    scheduler, _ = _staggered(scheduler_module, monkeypatch, extra)
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    assert _step(scheduler) == ["a", "b", "c", "d"]


def test_with_short_streams_first_a_short_stream_runs_before_those_ahead(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"short_streams_first": True})
    scheduler.window_arrives("a")  # a holds 0.88 s: under the margin, its window is due soon
    scheduler.window_arrives("d")  # d holds 1.78 s
    assert _step(scheduler) == ["a"]
    assert _step(scheduler) == ["d"]  # one step later
    assert _everyone(scheduler) == {"a", "b", "c", "d"}


def test_without_short_streams_first_only_a_first_window_makes_others_wait(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {})
    scheduler.window_arrives("a")
    scheduler.window_arrives("d")
    assert _step(scheduler) == ["a", "d"]


def test_a_stream_with_no_window_ready_is_left_to_vllm_omni(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a")  # b's and c's next windows have not arrived
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert _step(scheduler) == ["new"]  # a (2 s in hand) waits one step
    assert scheduler.seen_waiting[-1] == ["new"]  # the step was built from new alone
    # b and c stayed with the coordinator, waiting for their windows; a is ready at the head of the queue
    assert {r.request_id: r.status for r in scheduler.waiting} == {"a": "WAITING", "b": "WAITING_FOR_CHUNK",
                                                                  "c": "WAITING_FOR_CHUNK"}  # fmt: skip
    assert "a" in scheduler.input_coordinator.requests_with_ready_chunks


def test_an_end_marker_with_no_codes_is_no_first_window(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    """A talker that ends a request before any frame sends code2wav only its end marker (no codes): vllm-omni
    finishes it without a step, so it is no first audio to make way for."""
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    for name in ("a", "b", "c"):
        scheduler.window_arrives(name)
    scheduler.add("empty")
    scheduler.window_arrives("empty", 0, last=True)
    assert _step(scheduler) == ["a", "b", "c"]


def test_a_streams_last_window_is_never_held_back(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a", last=True)  # holding it would only delay the end of a's response
    scheduler.window_arrives("b")
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert _step(scheduler) == ["a", "new"]
    assert "a" in scheduler.finished
    capped, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 1})
    capped.window_arrives("c")  # 1.48 s in hand
    capped.window_arrives("d", last=True)  # 1.78 s: the furthest ahead, but its last window
    assert _step(capped) == ["d"]


def test_a_short_stream_with_no_window_ready_holds_nobody_back(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"short_streams_first": True})
    scheduler.window_arrives("d")  # a holds 0.88 s but has no window ready: nothing of it is due in this step
    assert _step(scheduler) == ["d"]


def test_a_window_in_flight_is_left_alone(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    """Async scheduling: the next step is built while the last one runs; a stream whose window is still decoding
    stays in `running` and is neither scheduled again nor held."""
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a")
    running = scheduler.schedule()  # not yet decoded
    assert sorted(running.num_scheduled_tokens) == ["a"]
    scheduler.window_arrives("a")
    scheduler.add("new")
    scheduler.window_arrives("new")
    overlapped = scheduler.schedule()
    assert sorted(overlapped.num_scheduled_tokens) == ["new"] and scheduler._probe.deferred == 0
    scheduler.update_from_output(running, None)
    scheduler.update_from_output(overlapped, None)
    assert _step(scheduler) == ["a"]


def test_short_streams_first_reads_yes_and_no_and_refuses_anything_else(scheduler_module) -> None:
    assert scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "false"})._short_streams_first is False
    assert scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "true"})._short_streams_first is True
    with pytest.raises(ValueError, match="short_streams_first"):
        scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "maybe"})


FILL = {"code2wav_fill_windows": 4, "code2wav_fill_wait_ms": 50}


def test_a_step_of_streams_ahead_waits_to_be_filled(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two windows of streams holding ~2 s each wait (no step) until the step can carry four, or the oldest has waited
    50 ms; nobody is lost meanwhile, and the receiving thread gets the GIL between the schedules held."""
    slept: list[float] = []
    monkeypatch.setattr(scheduler_module.time, "sleep", slept.append)
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch, FILL)
    scheduler.window_arrives("a")
    scheduler.window_arrives("b")
    assert _step(scheduler) == []
    assert _everyone(scheduler) == {"a", "b", "c"} and slept == [0.001]
    clock[0] += 0.03
    assert _step(scheduler) == []  # 30 ms: still under the wait
    clock[0] += 0.03
    assert _step(scheduler) == ["a", "b"]  # past 50 ms: they run, two short of four
    assert scheduler._probe.fill_holds == 2 and scheduler._probe.report(clock[0])["fill_holds"] == 2


def test_a_filled_step_runs_at_once(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch, {**FILL, "code2wav_fill_windows": 2})
    scheduler.window_arrives("a")
    assert _step(scheduler) == []
    clock[0] += 0.01
    scheduler.window_arrives("c")  # the second window: the step is full
    assert _step(scheduler) == ["a", "c"]


@pytest.mark.parametrize("why", ["first window", "short of audio", "last window"])
def test_a_step_with_anything_due_is_never_held_to_fill(
    scheduler_module, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch, FILL)
    if why == "first window":
        scheduler.add("new")
        scheduler.window_arrives("new")
        expected = ["new"]  # first audio first: the others could wait, so they do, for one step
    elif why == "short of audio":
        clock[0] += 1.5  # every stream holds ~0.5 s
        scheduler.window_arrives("a")
        expected = ["a"]
    else:
        scheduler.window_arrives("a", last=True)
        expected = ["a"]
    assert _step(scheduler) == expected


def test_without_fill_windows_a_lone_window_runs_at_once(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a")
    assert _step(scheduler) == ["a"]


def test_fill_windows_must_be_a_whole_number(scheduler_module) -> None:
    with pytest.raises(ValueError, match="code2wav_fill_windows"):
        scheduler_module.FirstAudioFirstScheduler({"code2wav_fill_windows": 2.5})


def _first_windows_one_after_another(scheduler, clock: list[float], steps: int) -> list[list[str]]:
    """Before every step a new stream's first window arrives (arrivals that never pause) and the playing streams a, b
    and c have a window ready (one that sat out keeps it): what each step ran."""
    ran = []
    for step in range(steps):
        ready = scheduler.input_coordinator.requests_with_ready_chunks
        for name in [n for n in ("a", "b", "c") if n not in ready]:
            scheduler.window_arrives(name)
        scheduler.add(f"new{step}")
        scheduler.window_arrives(f"new{step}")
        ran.append(_step(scheduler))
        clock[0] += 0.02
    return ran


def test_without_a_bound_streams_ahead_wait_as_long_as_first_windows_keep_coming(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch)
    ran = _first_windows_one_after_another(scheduler, clock, 3)
    assert ran == [["new0"], ["new1"], ["new2"]]  # a, b and c hold ~2 s each: paced down towards the margin


def test_a_stream_waits_at_most_the_bound_of_steps_in_a_row(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch, {"code2wav_max_steps_held": 1})
    deferred = scheduler._probe.deferred
    ran = _first_windows_one_after_another(scheduler, clock, 4)
    assert ran[0] == ["new0"]  # a, b and c sit out one step ...
    assert ran[1] == ["a", "b", "c", "new1"]  # ... and run in the next, though another first window is ready
    assert ran[2:] == [["new2"], ["a", "b", "c", "new3"]]  # their next windows may wait one step again
    assert scheduler._probe.deferred == deferred + 6
    assert _everyone(scheduler) >= {"a", "b", "c"}  # nobody lost
    bounded, clock = _streaming(scheduler_module, 1.0, monkeypatch, {"code2wav_max_steps_held": 2})
    assert _first_windows_one_after_another(bounded, clock, 3) == [["new0"], ["new1"], ["a", "b", "c", "new2"]]


def test_the_bound_applies_to_the_cap_too(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    def two_steps(extra: dict) -> list[list[str]]:
        scheduler, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 1} | extra)
        for name in ("a", "b", "c", "d"):  # a holds 0.88 s (under the margin), b 1.18 s, c 1.48 s, d 1.78 s
            scheduler.window_arrives(name)
        first = _step(scheduler)
        scheduler.window_arrives("a")  # a, 2 s further ahead after its step, has its next window ready too
        return [first, _step(scheduler)]

    assert two_steps({}) == [["a"], ["b"]]  # c and d, still further ahead than b, wait a second step
    assert two_steps({"code2wav_max_steps_held": 1}) == [["a"], ["b", "c", "d"]]  # only a may wait now


def test_the_bound_must_be_a_whole_number_of_steps(scheduler_module) -> None:
    for given in (2, 2.0, "2", " 2 "):
        assert scheduler_module.FirstAudioFirstScheduler({"code2wav_max_steps_held": given})._max_steps_held == 2
    assert scheduler_module.FirstAudioFirstScheduler({})._max_steps_held == 0
    assert scheduler_module.FirstAudioFirstScheduler({"code2wav_max_steps_held": None})._max_steps_held == 0
    for bad in (-1, 1.5, "one", "2.0", "-1", True, False, [], ""):
        with pytest.raises(ValueError, match="code2wav_max_steps_held"):
            scheduler_module.FirstAudioFirstScheduler({"code2wav_max_steps_held": bad})


def test_the_start_up_line_says_what_it_read(scheduler_module, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="vllm.speech.code2wav"):
        scheduler_module.FirstAudioFirstScheduler({"short_streams_first": True, "codec_chunk_frames": 50})
    line = caplog.records[-1].getMessage()
    assert "native data plane" in line and "{'short_streams_first': True}" in line and "max_num_seqs 64" in line


def _importing_against(monkeypatch: pytest.MonkeyPatch, scheduler: type):
    return import_against_stand_ins(
        monkeypatch,
        "app.engines.omni.stage_plugins.code2wav_scheduler",
        lambda modules: install_generation_scheduler(modules, scheduler),
    )


def test_on_the_legacy_transport_it_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    class LegacyTransport(FakeGenerationScheduler):  # model_runner: v1: the chunk transfer adapter, no coordinator
        def __init__(self, extra: dict) -> None:
            super().__init__(extra)
            self._native_data_plane = False
            self.input_coordinator = None
            self.chunk_transfer_adapter = object()

    module = _importing_against(monkeypatch, LegacyTransport)
    with pytest.raises(RuntimeError, match="model_runner: v2 and async_chunk: true"):
        module.FirstAudioFirstScheduler({})


def test_a_missing_piece_of_vllm_omni_fails_at_start_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class Renamed(FakeGenerationScheduler):
        _restore_omni_wait_queues = None  # a release that renamed it

    module = _importing_against(monkeypatch, Renamed)
    with pytest.raises(RuntimeError, match=r"lacks scheduler\._restore_omni_wait_queues\(\)"):
        module.FirstAudioFirstScheduler({})

    class ForgetsTheContext(FakeSchedulingCoordinator):  # a coordinator that no longer keeps left_context_size
        def update_request_metadata(self, requests: dict, request_metadata: dict, model_mode: str) -> None:
            return None

    class OtherCoordinator(FakeGenerationScheduler):
        def __init__(self, extra: dict) -> None:
            super().__init__(extra)
            self.input_coordinator = ForgetsTheContext()

    module = _importing_against(monkeypatch, OtherCoordinator)
    with pytest.raises(RuntimeError, match="_omni_initial_model_buffer"):
        module.FirstAudioFirstScheduler({})


def test_vllm_omnis_own_pipeline_gets_both_plugins() -> None:
    """Against the installed vllm-omni (where it imports: the GPU host): its Qwen3-TTS pipeline's talker hands windows
    on through the producer the service wraps, so that the registration replaces it, and code2wav gets the scheduler."""
    pytest.importorskip("vllm_omni")
    from vllm_omni.model_executor.models.qwen3_tts.pipeline import QWEN3_TTS_PIPELINE

    from app.engines.omni.engine import TALKER_WINDOWS, UPSTREAM_TALKER_WINDOWS

    stages = {stage.stage_id: stage for stage in QWEN3_TTS_PIPELINE.stages}
    assert stages[0].async_chunk_process_next_stage_input_func == UPSTREAM_TALKER_WINDOWS
    plugged = pipeline_with_stage_plugins(QWEN3_TTS_PIPELINE, "x.Scheduler", talker_windows=True)
    ours = {stage.stage_id: stage for stage in plugged.stages}
    assert ours[0].async_chunk_process_next_stage_input_func == TALKER_WINDOWS
    assert ours[1].scheduler_cls == "x.Scheduler"
