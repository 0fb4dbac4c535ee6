"""The talker's worker where the service's request timeline can record (a server with a profiler directory):
vllm-omni's AR worker (the one a talker stage gets on CUDA) that records, for each request, when the step that takes
in its prompt was handed to the model runner (`first_step_launched`) and when that call returned
(`first_step_returned`). With async scheduling the call returns once the step is launched, before the GPU is done.

So the talker's part of a first audio splits: the request's way from the server into the talker's engine (the
orchestrator, its sockets, the scheduler's queue), the host's launch of the prefill step, and the rest up to the
window producer handing the first window on (the GPU's prefill, the step's output, the producer). Only a request's
first step is recorded: a line a request, not one a stream a step. Set as stage 0's `worker_cls` by the engine."""

from __future__ import annotations

from typing import Any

from vllm_omni.worker.gpu_ar_worker import GPUARWorker

from app.engines.omni.stage_plugins import timeline


class TimelineARWorker(GPUARWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recorded: set[str] = set()  # requests whose first step is recorded (a preempted one comes back as new)

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = timeline.recorder("talker")
        new: list[str] = []
        if getattr(self, "rank", 0) == 0 and recorder.on():  # with tensor parallelism, the first rank's steps
            self._recorded.difference_update(getattr(scheduler_output, "finished_req_ids", ()) or ())
            new = [r.req_id for r in scheduler_output.scheduled_new_reqs if r.req_id not in self._recorded]
            self._recorded.update(new)
        with recorder.call(new, "first_step_launched", "first_step_returned"):
            return super().execute_model(scheduler_output, *args, **kwargs)
