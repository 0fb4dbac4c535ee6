"""code2wav's worker on the request timeline (app/engines/omni/stage_plugins/code2wav_worker.py), vllm-omni's
generation worker as a stand-in (tests/fakes/vllm_omni_0_30_data_plane.py)."""

from __future__ import annotations

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
        ("window_launched", "d"),
        ("window_returned", "d"),  # a failed step still returned
    ]
    assert recorded[0]["ts_ns"] == recorded[1]["ts_ns"] <= recorded[2]["ts_ns"] == recorded[3]["ts_ns"]
    assert worker.model_runner.steps == 4
    worker.rank = 1  # with tensor parallelism, only the first rank records
    worker.execute_model(step("e"))
    recorder.pin(None)
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
    assert [e["event"] for e in recorded] == ["window_launched", "window_returned"]
