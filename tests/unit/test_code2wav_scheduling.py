"""First audio first: the code2wav policy, and the scheduler that applies it (against a stand-in of vllm-omni
0.26.0's generation scheduler; the real one runs in tests/gpu)."""

from __future__ import annotations

import math

import pytest

from app.engines.code2wav_policy import FRAME_SECONDS, FirstAudioFirst, StepProbe
from app.engines.codec_windows import CodecWindows
from app.engines.omni import stage_overrides_with_scheduler
from tests.fakes.vllm_omni_0_30 import import_against_stand_ins, install_generation_scheduler


def test_a_stream_may_wait_only_while_its_listener_holds_more_than_the_margin() -> None:
    policy = FirstAudioFirst(CodecWindows((1,), 25), margin_s=1.0)
    assert not policy.may_wait("new", now=0.0)  # nothing played yet: its first audio is due now
    assert policy.scheduled(["a"], now=0.0) == 1  # first window: 1 frame
    assert not policy.may_wait("a", now=0.0)  # 0.08 s in hand
    assert policy.scheduled(["a"], now=0.05) == 0  # + 25 frames
    assert policy.may_wait("a", now=0.1)  # 26 x 0.08 - 0.1 = 1.98 s in hand
    held_until = 26 * FRAME_SECONDS - 1.0
    assert policy.may_wait("a", now=held_until - 0.01)
    assert not policy.may_wait("a", now=held_until + 0.01)


def test_the_streams_furthest_ahead_are_the_ones_that_wait_beyond_a_cap() -> None:
    policy = FirstAudioFirst(CodecWindows((1,), 25), margin_s=1.0)
    for start, name in enumerate(("a", "b", "c")):  # each given 1 + 25 frames (2.08 s), a one second apart
        policy.scheduled([name], now=float(start))
        policy.scheduled([name], now=float(start))
    # at 2.5 s: a holds 2.08 - 2.5 < 0, b 0.58 s, c 1.58 s; "new" has not started (its first audio is due now)
    assert policy.furthest_ahead(["a", "b", "c", "new"], 3, now=2.5) == ["c"]  # only c can spare a step
    assert policy.furthest_ahead(["a", "b", "c"], 0, now=2.5) == []
    assert policy.furthest_ahead(["a", "b", "c"], 2, now=1.0) == ["c", "b"]  # c 2.08 s, b 1.08 s; a 0.08 s


def test_clocks_of_ended_streams_are_dropped() -> None:
    policy = FirstAudioFirst(CodecWindows((1,), 25))
    policy.scheduled(["a", "b", "c"], now=0.0)
    policy.forget_all_but(["b"])
    assert len(policy) == 1 and policy.has_started("b") and not policy.has_started("a")


def test_window_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CodecWindows((0,), 25)


def test_under_a_ramp_a_listener_holds_what_each_window_of_the_ramp_carried() -> None:
    policy = FirstAudioFirst(CodecWindows((4, 4, 8, 16, 25), 25, ramp=True), margin_s=1.0)
    policy.scheduled(["a"], now=0.0)  # 4 frames
    policy.scheduled(["a"], now=0.0)  # 4
    policy.scheduled(["a"], now=0.0)  # 8: 16 frames = 1.28 s in hand
    assert policy.may_wait("a", now=0.2)  # 1.08 s left
    assert not policy.may_wait("a", now=0.3)  # 0.98 s left: under the margin
    policy.scheduled(["a"], now=0.3)  # 16 more: 32 frames
    policy.scheduled(["a"], now=0.3)  # 25
    policy.scheduled(["a"], now=0.3)  # past the ramp: steady 25 -> 82 frames
    assert policy.may_wait("a", now=82 * FRAME_SECONDS - 1.0 - 0.01)
    assert not policy.may_wait("a", now=82 * FRAME_SECONDS - 1.0 + 0.01)


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


def test_the_service_names_its_code2wav_scheduler_unless_the_operator_did() -> None:
    path = "app.engines.omni_code2wav_scheduler.FirstAudioFirstScheduler"
    assert stage_overrides_with_scheduler(None, path) == {"1": {"scheduler_cls": path}}
    assert stage_overrides_with_scheduler({"0": {"max_num_seqs": 8}}, path) == {
        "0": {"max_num_seqs": 8},
        "1": {"scheduler_cls": path},
    }
    mine = {"1": {"scheduler_cls": "my.Scheduler"}}
    assert stage_overrides_with_scheduler(mine, path) == mine
    assert stage_overrides_with_scheduler(None, "") is None


@pytest.fixture
def scheduler_module(monkeypatch: pytest.MonkeyPatch):
    return import_against_stand_ins(monkeypatch, "app.engines.omni_code2wav_scheduler", install_generation_scheduler)


def _streaming(scheduler_module, margin_s: float, monkeypatch: pytest.MonkeyPatch, more: dict | None = None):
    """A scheduler with three streams well into playback (each given its first and one steady window)."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    extra = {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25, "first_audio_first_margin_s": margin_s}
    extra |= more or {}
    scheduler = scheduler_module.FirstAudioFirstScheduler(extra)
    for name in ("a", "b", "c"):
        scheduler.add(name)
    for _ in range(2):
        for name in ("a", "b", "c"):
            scheduler.window_arrives(name)
        scheduler.schedule()
        clock[0] += 0.05
    return scheduler, clock


def _next_windows_and_a_new_stream(scheduler) -> None:
    """Each playing stream's next window arrives, and so does a new stream with its first window."""
    for name in ("a", "b", "c"):
        scheduler.window_arrives(name)
    scheduler.add("new")
    scheduler.window_arrives("new")


def test_a_first_window_runs_in_a_step_of_its_own(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch)
    _next_windows_and_a_new_stream(scheduler)
    first = scheduler.schedule()
    assert list(first.num_scheduled_tokens) == ["new"]  # the others hold ~2 s of audio each: they wait
    assert {r.request_id for r in scheduler.running} == {"a", "b", "c", "new"}  # nobody lost
    clock[0] += 0.02
    second = scheduler.schedule()
    assert sorted(second.num_scheduled_tokens) == ["a", "b", "c"]  # one step later


def test_a_stream_short_of_audio_never_waits(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 1.0, monkeypatch)
    clock[0] += 1.5  # ~2.08 s given, ~1.6 s played: 0.5 s in hand, under the margin
    _next_windows_and_a_new_stream(scheduler)
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "b", "c", "new"]


def test_with_no_margin_it_only_observes(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _streaming(scheduler_module, 0.0, monkeypatch)
    _next_windows_and_a_new_stream(scheduler)
    output = scheduler.schedule()
    assert sorted(output.num_scheduled_tokens) == ["a", "b", "c", "new"]
    clock[0] += 0.03
    scheduler.update_from_output(output, None)
    assert scheduler._probe.results_s[-1] == pytest.approx(0.03)
    assert scheduler._probe.first_results_s == [pytest.approx(0.03)]  # that step carried new's first window
    assert scheduler._probe.streams[-1] == 4  # a, b, c and new
    assert scheduler._probe.first_waits_s == [0.0, 0.0, 0.0, 0.0]
    scheduler.window_arrives("a")
    later = scheduler.schedule()
    clock[0] += 0.02
    scheduler.update_from_output(later, None)
    assert scheduler._probe.results_s[-1] == pytest.approx(0.02) and len(scheduler._probe.first_results_s) == 1


def test_an_empty_schedule_gives_way_to_the_receiving_thread(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(scheduler_module.time, "sleep", slept.append)
    extra = {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25, "code2wav_idle_wait_ms": 0.5}
    scheduler = scheduler_module.FirstAudioFirstScheduler(extra)
    scheduler.add("a")
    scheduler.schedule()  # its first window has not arrived: nothing to run
    assert slept == [0.0005]
    scheduler.window_arrives("a")
    assert list(scheduler.schedule().num_scheduled_tokens) == ["a"]
    assert slept == [0.0005]  # a step with work never waits
    no_wait = scheduler_module.FirstAudioFirstScheduler({})
    no_wait.add("b")
    no_wait.schedule()
    assert slept == [0.0005]


def _staggered(scheduler_module, monkeypatch: pytest.MonkeyPatch, extra: dict):
    """A scheduler whose streams a, b, c, d started 0.3 s apart, each given its first and one steady window."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "monotonic", lambda: clock[0])
    scheduler = scheduler_module.FirstAudioFirstScheduler({"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25}
                                                          | extra)  # fmt: skip
    for name in ("a", "b", "c", "d"):
        scheduler.add(name)
        for _ in range(2):
            scheduler.window_arrives(name)
            scheduler.schedule()
        clock[0] += 0.3
    return scheduler, clock


def test_beyond_the_cap_the_streams_furthest_ahead_wait(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 2})
    for name in ("a", "b", "c", "d"):  # each holds 2.08 s less what it played: d 1.78 s ... a 0.88 s
        scheduler.window_arrives(name)
    deferred = scheduler._probe.deferred
    first = scheduler.schedule()
    assert sorted(first.num_scheduled_tokens) == ["a", "b"]  # a is under the margin; b is the least ahead of the rest
    assert {r.request_id for r in scheduler.running} == {"a", "b", "c", "d"}  # nobody lost
    assert scheduler._probe.deferred == deferred + 2
    second = scheduler.schedule()
    assert sorted(second.num_scheduled_tokens) == ["c", "d"]  # their windows waited one step, no longer


def test_the_cap_never_holds_back_a_stream_short_of_audio(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 2})
    clock[0] += 1.0  # now every stream holds under 1 s: none can spare a step
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "b", "c", "d"]


def test_under_a_cap_a_first_window_still_runs_first(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, clock = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 3})
    clock[0] += 0.5  # a holds 0.38 s, b 0.68 s, c 0.98 s, d 1.28 s
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "b", "c", "new"]  # d can wait; 4 > 3 is kept


def test_without_a_margin_there_is_no_cap_either(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"code2wav_max_windows_per_step": 1, "first_audio_first_margin_s": 0.0}
    scheduler, _ = _staggered(scheduler_module, monkeypatch, extra)
    for name in ("a", "b", "c", "d"):
        scheduler.window_arrives(name)
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "b", "c", "d"]


def test_a_short_streams_window_runs_first_when_asked(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"short_streams_first": True})
    scheduler.window_arrives("a")  # a holds 0.88 s: under the margin, its window is due soon
    scheduler.window_arrives("d")  # d holds 1.78 s
    assert list(scheduler.schedule().num_scheduled_tokens) == ["a"]
    assert list(scheduler.schedule().num_scheduled_tokens) == ["d"]  # one step later
    assert {r.request_id for r in scheduler.running} == {"a", "b", "c", "d"}


def test_without_short_streams_first_only_a_first_window_makes_others_wait(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {})
    scheduler.window_arrives("a")
    scheduler.window_arrives("d")
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "d"]


def test_a_stream_with_no_window_ready_is_not_held_back(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a")  # b's and c's next windows have not arrived
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert list(scheduler.schedule().num_scheduled_tokens) == ["new"]  # a (2 s in hand) waits one step
    # b and c stayed where vllm-omni asks the talker's connector for their next windows
    assert scheduler.seen_running[-1] == {"b", "c"}


def test_a_streams_last_window_is_never_held_back(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, _ = _streaming(scheduler_module, 1.0, monkeypatch)
    scheduler.window_arrives("a", last=True)  # holding it would only delay the end of a's response
    scheduler.window_arrives("b")
    scheduler.add("new")
    scheduler.window_arrives("new")
    assert sorted(scheduler.schedule().num_scheduled_tokens) == ["a", "new"]
    capped, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 1})
    capped.window_arrives("c")  # 1.48 s in hand
    capped.window_arrives("d", last=True)  # 1.78 s: the furthest ahead, but its last window
    assert list(capped.schedule().num_scheduled_tokens) == ["d"]


def test_a_short_stream_with_no_window_ready_holds_nobody_back(
    scheduler_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, _ = _staggered(scheduler_module, monkeypatch, {"short_streams_first": True})
    scheduler.window_arrives("d")  # a holds 0.88 s but has no window ready: nothing of it is due in this step
    assert list(scheduler.schedule().num_scheduled_tokens) == ["d"]


def test_short_streams_first_reads_yes_and_no_and_refuses_anything_else(scheduler_module) -> None:
    assert scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "false"})._short_streams_first is False
    assert scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "true"})._short_streams_first is True
    with pytest.raises(ValueError, match="short_streams_first"):
        scheduler_module.FirstAudioFirstScheduler({"short_streams_first": "maybe"})


def _first_windows_one_after_another(scheduler, clock: list[float], steps: int) -> list[list[str]]:
    """Before every step a new stream's first window arrives (arrivals that never pause) and the playing streams a, b
    and c have a window ready: what each step ran."""
    ran = []
    for step in range(steps):
        for name in ("a", "b", "c"):
            scheduler.window_arrives(name)
        scheduler.add(f"new{step}")
        scheduler.window_arrives(f"new{step}")
        ran.append(sorted(scheduler.schedule().num_scheduled_tokens))
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
    assert {r.request_id for r in scheduler.running} >= {"a", "b", "c"}  # nobody lost
    bounded, clock = _streaming(scheduler_module, 1.0, monkeypatch, {"code2wav_max_steps_held": 2})
    assert _first_windows_one_after_another(bounded, clock, 3) == [["new0"], ["new1"], ["a", "b", "c", "new2"]]


def test_the_bound_applies_to_the_cap_too(scheduler_module, monkeypatch: pytest.MonkeyPatch) -> None:
    def two_steps(extra: dict) -> list[list[str]]:
        scheduler, _ = _staggered(scheduler_module, monkeypatch, {"code2wav_max_windows_per_step": 1} | extra)
        for name in ("a", "b", "c", "d"):  # a holds 0.88 s (under the margin), b 1.18 s, c 1.48 s, d 1.78 s
            scheduler.window_arrives(name)
        first = sorted(scheduler.schedule().num_scheduled_tokens)
        scheduler.window_arrives("a")  # a, 2 s further ahead after its step, has its next window ready too
        return [first, sorted(scheduler.schedule().num_scheduled_tokens)]

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
