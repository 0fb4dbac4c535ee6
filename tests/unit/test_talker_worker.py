"""The talker's worker on the request timeline (app/engines/omni/stage_plugins/talker_worker.py), vllm-omni's AR worker
as a stand-in (tests/fakes/vllm_omni_0_30_data_plane.py)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tests.fakes.vllm_omni_0_30_data_plane import install_data_plane
from tests.fakes.vllm_omni_0_30_scheduler import import_against_stand_ins
from tests.support.timeline import installed_recorder, recorded_events


@pytest.fixture
def worker_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    return import_against_stand_ins(monkeypatch, "app.engines.omni.stage_plugins.talker_worker", install_data_plane)


def step(*new: str, fails: bool = False, finished: tuple[str, ...] = ()) -> types.SimpleNamespace:
    """vLLM's SchedulerOutput as the worker reads it: the requests new to this step (a preempted one that resumes is
    new again), those finished since the last."""
    return types.SimpleNamespace(
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r) for r in new], finished_req_ids=set(finished), fails=fails
    )


def test_each_requests_first_step_is_recorded_launched_and_returned_while_a_run_records(
    worker_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = installed_recorder(monkeypatch, "talker")
    worker = worker_module.TimelineARWorker()
    assert worker.execute_model(step("a")) == "launched"  # no run: nothing recorded
    recorder.pin(str(tmp_path))
    assert worker.execute_model(step("b", "c")) == "launched"
    assert worker.execute_model(step()) == "launched"  # decode steps only: nothing
    with pytest.raises(RuntimeError):
        worker.execute_model(step("d", fails=True))
    assert worker.execute_model(step("b")) == "launched"  # b preempted, back: its first step was recorded
    assert worker.execute_model(step("b", finished=("b",))) == "launched"  # a new request of a finished one's id
    recorded = recorded_events(tmp_path, "talker")
    assert [(e["event"], e["request_id"]) for e in recorded] == [
        ("first_step_launched", "b"),
        ("first_step_launched", "c"),
        ("first_step_returned", "b"),
        ("first_step_returned", "c"),
        ("first_step_launched", "d"),
        ("first_step_returned", "d"),  # a failed launch still returned
        ("first_step_launched", "b"),
        ("first_step_returned", "b"),
    ]
    assert recorded[0]["ts_ns"] == recorded[1]["ts_ns"]  # one launch, one time: not the lines' writing
    assert len(worker.steps) == 6
    worker.rank = 1  # with tensor parallelism, only the first rank records
    worker.execute_model(step("e"))
    recorder.pin(None)
    assert len(recorded_events(tmp_path, "talker")) == len(recorded)
