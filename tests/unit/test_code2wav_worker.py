"""code2wav's worker on the request timeline (app/engines/omni/stage_plugins/code2wav_worker.py), vllm-omni's
generation worker as a stand-in (tests/fakes/vllm_omni_0_30_data_plane.py)."""

from __future__ import annotations

import time
import types
from pathlib import Path

import pytest

from tests.fakes.vllm_omni_0_30_data_plane import install_data_plane
from tests.fakes.vllm_omni_0_30_scheduler import import_against_stand_ins
from tests.support.timeline import installed_recorder, recorded_events


@pytest.fixture
def worker_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    return import_against_stand_ins(monkeypatch, "app.engines.omni.stage_plugins.code2wav_worker", install_data_plane)


def step(*streams: str, fails: bool = False) -> types.SimpleNamespace:
    """vLLM's SchedulerOutput as the worker reads it: the streams whose windows the step runs (none on the steps
    vLLM's loop runs while streams wait)."""
    return types.SimpleNamespace(num_scheduled_tokens={s: 16 for s in streams}, fails=fails)


def test_each_window_a_step_runs_is_recorded_launched_and_returned_while_a_run_records(
    worker_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = installed_recorder(monkeypatch, "code2wav")
    worker = worker_module.TimelineGenerationWorker()
    worker.init_device()
    assert worker.execute_model(step("a")) == "output of ['a']"  # no run: nothing recorded
    recorder.pin(str(tmp_path))
    assert worker.execute_model(step("b", "c")) == "output of ['b', 'c']"
    assert worker.execute_model(step()) == "output of []"  # nothing scheduled: nothing
    with pytest.raises(RuntimeError):
        worker.execute_model(step("d", fails=True))
    recorded = recorded_events(tmp_path, "code2wav")
    assert [(e["event"], e["request_id"]) for e in recorded] == [
        ("window_launched", "b"),
        ("window_launched", "c"),
        ("window_returned", "b"),
        ("window_returned", "c"),
        ("window_copied", "b"),  # its output made on the host: there as the call returned
        ("window_copied", "c"),
        ("window_launched", "d"),
        ("window_returned", "d"),  # a failed step still returned
        ("window_copied", "d"),  # and its windows are marked, failed: a stream's n-th of each is its n-th window's
    ]
    assert recorded[-1]["failed"] is True and "failed" not in recorded[4]
    assert recorded[0]["ts_ns"] == recorded[1]["ts_ns"] <= recorded[2]["ts_ns"] == recorded[3]["ts_ns"]
    assert worker.model_runner.steps == 4
    worker.rank = 1  # with tensor parallelism, only the first rank records
    worker.execute_model(step("e"))
    recorder.pin(None)
    assert len(recorded_events(tmp_path, "code2wav")) == len(recorded)


def wait_for(folder: Path, count: int) -> list[dict[str, object]]:
    """The recorded events once there are `count` of them (the copies are recorded from a thread of their own)."""
    for _ in range(1000):
        events = recorded_events(folder, "code2wav")
        if len(events) >= count:
            return events
        time.sleep(0.01)
    return recorded_events(folder, "code2wav")


def test_a_steps_windows_are_recorded_copied_once_its_outputs_copy_event_is_done_not_when_its_call_returns(
    worker_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model runner v2's way: execute_model launches the step and returns None, sample_tokens returns the output
    with its copy to the host under way. `window_copied` is when that copy's event is done, waited for off the
    engine's thread: sample_tokens returns before it."""
    recorder = installed_recorder(monkeypatch, "code2wav")
    worker = worker_module.TimelineGenerationWorker()
    worker.init_device()
    worker.deferred = True
    recorder.pin(str(tmp_path))
    assert worker.execute_model(step("b", "c")) is None
    first = worker.sample_tokens(None)
    assert first.streams == ["b", "c"]
    assert [e["event"] for e in recorded_events(tmp_path, "code2wav")] == ["window_launched"] * 2 + [
        "window_returned"
    ] * 2  # sample_tokens returned; the copy is not done
    worker.execute_model(step("d"))
    second = worker.sample_tokens(None)
    second.copy_event.done()  # a later step's copy done first: still recorded after the earlier one's
    time.sleep(0.05)
    assert len(recorded_events(tmp_path, "code2wav")) == 6
    before = time.time_ns()
    first.copy_event.done()
    recorded = wait_for(tmp_path, 9)
    assert [(e["event"], e["request_id"]) for e in recorded[6:]] == [
        ("window_copied", "b"),
        ("window_copied", "c"),
        ("window_copied", "d"),
    ]
    assert before <= recorded[6]["ts_ns"] == recorded[7]["ts_ns"]
    assert worker.sample_tokens(None) is None  # no step launched: nothing to watch


def test_an_output_made_on_the_host_is_recorded_copied_at_once_and_a_failed_copy_is_marked_failed(
    worker_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = installed_recorder(monkeypatch, "code2wav")
    worker = worker_module.TimelineGenerationWorker()
    worker.init_device()
    recorder.pin(str(tmp_path))
    assert worker.execute_model(step("a")) == "output of ['a']"  # the output itself: on the host already
    assert [e["event"] for e in recorded_events(tmp_path, "code2wav")] == [
        "window_launched",
        "window_returned",
        "window_copied",
    ]
    worker.deferred = True
    worker.execute_model(step("b"))
    failed = worker.sample_tokens(None)
    failed.copy_event.fail = RuntimeError("an illegal memory access")
    failed.copy_event.done()
    worker.execute_model(step("c"))
    worker.sample_tokens(None).copy_event.done()  # the thread goes on after a failed copy
    recorded = wait_for(tmp_path, 9)
    assert [(e["event"], e["request_id"]) for e in recorded if e["event"] == "window_copied"] == [
        ("window_copied", "a"),
        ("window_copied", "b"),  # its copy failed: marked so
        ("window_copied", "c"),
    ]
    assert [e.get("failed") for e in recorded if e["event"] == "window_copied"] == [None, True, None]
    recorder.pin(None)  # no run: nothing watched, even where the run is back by the time the copy is done
    worker.execute_model(step("e"))
    unwatched = worker.sample_tokens(None)
    recorder.pin(str(tmp_path))
    unwatched.copy_event.done()
    time.sleep(0.05)
    assert len(recorded_events(tmp_path, "code2wav")) == len(recorded)


def test_the_doorbells_worker_records_its_steps_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stage = import_against_stand_ins(
        monkeypatch, "app.engines.omni.stage_plugins.window_doorbell_stage", install_data_plane
    )
    recorder = installed_recorder(monkeypatch, "code2wav")
    recorder.pin(str(tmp_path))
    worker = stage.DoorbellGenerationWorker()
    worker.init_device()  # no address: vllm-omni's look, and still the timeline's worker
    assert worker.execute_model(step("a")) == "output of ['a']"
    recorder.pin(None)
    recorded = recorded_events(tmp_path, "code2wav")
    assert [e["event"] for e in recorded] == ["window_launched", "window_returned", "window_copied"]
