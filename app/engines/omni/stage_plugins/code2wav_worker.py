"""code2wav's worker where the service's request timeline can record (a server with a profiler directory): vllm-omni's
generation worker (the one a code2wav stage gets on CUDA) that records, for each stream whose window a step runs, when
that step was handed to the model runner (`window_launched`) and when that call returned (`window_returned`).

So code2wav's step on the timeline (its scheduler's `window_scheduled` -> `window_decoded`) splits: the way from the
scheduler to the worker (the rest of the service's scheduler's step, vLLM's engine loop), the worker's call (vllm-omni
0.30's generation runner: the step's inputs and the decoder's forward, launched) and the way back to the scheduler (the
step's output made in vLLM's `sample_tokens`, the audio's copy to the host, vLLM's loop). Set as stage 1's `worker_cls`
by the engine; the window doorbell's worker extends it."""

from __future__ import annotations

from typing import Any

from vllm_omni.worker.gpu_generation_worker import GPUGenerationWorker

from app.engines.omni.stage_plugins import timeline


class TimelineGenerationWorker(GPUGenerationWorker):
    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = timeline.recorder("code2wav")
        # vLLM's loop also steps with nothing scheduled, every millisecond while streams wait: those run no window;
        # with tensor parallelism every rank runs the step, the first records it
        recording = getattr(self, "rank", 0) == 0 and recorder.on()
        streams = list(getattr(scheduler_output, "num_scheduled_tokens", None) or ()) if recording else []
        with recorder.call(streams, "window_launched", "window_returned"):
            return super().execute_model(scheduler_output, *args, **kwargs)
