"""The talker's worker where the service's request timeline can record (a server with a profiler directory):
vllm-omni's AR worker (the one a talker stage gets on CUDA) that records, for each request, when the step that takes
in its prompt was handed to the model runner (`first_step_launched`) and when that call returned
(`first_step_returned`). With async scheduling the call returns once the step is launched, before the GPU is done.

So the talker's part of a first audio splits: the request's way from the server into the talker's engine (the
orchestrator, its sockets, the scheduler's queue), the host's launch of the prefill step, and the rest up to the
window producer handing the first window on (the GPU's prefill, the step's output, the producer). Only a request's
first step is recorded: a line a request, not one a stream a step.

While a run records, every step's host time is recorded too (`step_host`, one line a step): its `execute_model` and
`sample_tokens` calls and the sections of the model runner named in step_clock.SECTIONS, timed by the host's clock
without a profiler (whose own cost distorts a step of a few milliseconds), so that a frame's host time splits into
vLLM's input preparation, vllm-omni's preprocessing (the prompt's embeddings, the code predictor's graph launch), the
talker's graph launch and the output. Set as stage 0's `worker_cls` by the engine."""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm_omni.worker.gpu_ar_worker import GPUARWorker

from app.engines.omni.stage_plugins import timeline
from app.engines.omni.stage_plugins.step_clock import StepClock

log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


class TimelineARWorker(GPUARWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recorded: set[str] = set()  # requests whose first step is recorded (a preempted one comes back as new)
        self._clock: StepClock | None = None  # installed at the first step a run records (the model is loaded)
        self._step: dict[str, Any] | None = None  # the step launched and not yet recorded

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = timeline.recorder("talker")
        new: list[str] = []
        recording = getattr(self, "rank", 0) == 0 and recorder.on()  # with tensor parallelism, the first rank's
        if recording:
            self._recorded.difference_update(getattr(scheduler_output, "finished_req_ids", ()) or ())
            new = [r.req_id for r in scheduler_output.scheduled_new_reqs if r.req_id not in self._recorded]
            self._recorded.update(new)
            self._begin_step(recorder, scheduler_output, len(new))
        else:
            self._step = None  # a step of a run that has stopped is no later run's
        started = time.perf_counter_ns()
        with recorder.call(new, "first_step_launched", "first_step_returned"):
            output = super().execute_model(scheduler_output, *args, **kwargs)
        if recording and self._step is not None:
            self._step["execute_us"] = (time.perf_counter_ns() - started) // 1000
        return output

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        output = super().sample_tokens(*args, **kwargs)
        if self._step is not None:
            self._step["sample_us"] = (time.perf_counter_ns() - started) // 1000
            self._end_step(timeline.recorder("talker"))
        return output

    def _begin_step(self, recorder: timeline.Recorder, scheduler_output: Any, new: int) -> None:
        self._end_step(recorder)  # a step that returned its output without a sample_tokens call
        if self._clock is None:
            self._clock = StepClock()
            missing = self._clock.install(getattr(self, "model_runner", None))
            if missing:
                log.warning("talker step timing: no %s in this vLLM / vllm-omni; not timed", ", ".join(missing))
        self._clock.take()  # what ran between steps is no step's
        self._step = {
            "started_ns": time.time_ns(),
            "requests": len(getattr(scheduler_output, "num_scheduled_tokens", {}) or {}),
            "tokens": int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0),
            "new": new,
        }

    def _end_step(self, recorder: timeline.Recorder) -> None:
        step, self._step = self._step, None
        if step is None or self._clock is None:
            return
        started = step.pop("started_ns")
        recorder.record("step_host", "", at_ns=started, sections=self._clock.take(), **step)
