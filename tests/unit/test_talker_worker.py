"""The talker's worker on the request timeline (app/engines/omni/stage_plugins/talker_worker.py), vllm-omni's AR worker
as a stand-in (tests/fakes/vllm_omni_0_30_data_plane.py)."""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

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
    recorded = [e for e in recorded_events(tmp_path, "talker") if e["event"] != "step_host"]
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
    worker.sample_tokens(None)  # the last step's host time is recorded
    worker.rank = 1  # with tensor parallelism, only the first rank records
    before = len(recorded_events(tmp_path, "talker"))
    worker.execute_model(step("e"))
    worker.sample_tokens(None)
    recorder.pin(None)
    assert len(recorded_events(tmp_path, "talker")) == before


class Runner:
    """vLLM 0.30's Model Runner V2 as the step clock finds its sections (step_clock.SECTIONS): each takes a set
    time on the host, and `execute_model` calls them as one step would (a prompt's embeddings only in a step with one);
    the code predictor's graph and the talker's graph, but not the prompt builder, are where the runner has them."""

    def __init__(self) -> None:
        self.model_state = types.SimpleNamespace(
            run_preprocess=self.section(0.004, self.inner),
            _call_mtp_runner=self.section(0.002),
            run_postprocess=self.section(0),
        )
        self.cudagraph_manager = types.SimpleNamespace(run_fullgraph=self.section(0.003))
        self.model = types.SimpleNamespace()  # no prompt builder: a model this vllm-omni builds none for
        self.add_requests = self.section(0)
        self.prepare_inputs = self.section(0.001)
        self.prompt = False

    @staticmethod
    def section(seconds: float, then: Any = None) -> Any:
        def run(*args: Any) -> None:
            time.sleep(seconds)
            if then is not None:
                then()

        return run

    def inner(self) -> None:
        self.model_state._call_mtp_runner()

    def execute_model(self, scheduler_output: Any) -> None:
        self.add_requests(scheduler_output)
        self.prepare_inputs(scheduler_output)
        self.model_state.run_preprocess()
        self.cudagraph_manager.run_fullgraph()
        self.model_state.run_postprocess()

    def sample_tokens(self, grammar_output: Any) -> str:
        time.sleep(0.002)
        return "sampled"


def test_each_step_while_a_run_records_is_one_line_of_its_host_time_by_section(
    worker_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = installed_recorder(monkeypatch, "talker")
    worker = worker_module.TimelineARWorker()
    worker.model_runner = Runner()
    worker.execute_model(step("a"))  # no run: nothing recorded, nothing wrapped
    worker.sample_tokens(None)
    assert "timed" not in repr(worker.model_runner.prepare_inputs)
    recorder.pin(str(tmp_path))
    with caplog.at_level("WARNING", logger="vllm.speech.plugin"):
        for new in (("b", "c"), (), ()):
            scheduled = step(*new)
            scheduled.num_scheduled_tokens = {"b": 80, "c": 81} if new else {"b": 1, "c": 1}
            scheduled.total_num_scheduled_tokens = sum(scheduled.num_scheduled_tokens.values())
            assert worker.execute_model(scheduled) == "launched"
            assert worker.sample_tokens(None) == "sampled"
        worker.execute_model(step())  # its output came from execute_model: recorded at the next step
        worker.execute_model(step())
    assert "no prompt in this vLLM / vllm-omni" in caplog.text
    lines = [e for e in recorded_events(tmp_path, "talker") if e["event"] == "step_host"]
    assert [(e["request_id"], e["requests"], e["new"]) for e in lines] == [
        ("", 2, 2),
        ("", 2, 0),
        ("", 2, 0),
        ("", 0, 0),
    ]
    assert [e["tokens"] for e in lines] == [161, 2, 2, 0] and all(e["ts_ns"] > 0 for e in lines)
    for line in lines:
        sections = line["sections"]
        assert set(sections) == {
            "add_requests",
            "prepare_inputs",
            "preprocess",
            "predictor_graph",
            "talker_graph",
            "postprocess",
        }
        # host time measured, not counted: each section at least its sleep; preprocess holds the predictor's launch
        assert sections["preprocess"] >= 6000 and 2000 <= sections["predictor_graph"] <= sections["preprocess"]
        assert sections["talker_graph"] >= 3000 and sections["prepare_inputs"] >= 1000
        assert line["execute_us"] >= sum(sections[name] for name in ("prepare_inputs", "preprocess", "talker_graph"))
    assert all(line["sample_us"] >= 2000 for line in lines[:3]) and "sample_us" not in lines[3]
