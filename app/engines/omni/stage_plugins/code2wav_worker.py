"""code2wav's worker where the service's request timeline can record (a server with a profiler directory): vllm-omni's
generation worker (the one a code2wav stage gets on CUDA) that records, for each stream whose window a step runs, when
that step was handed to the model runner (`window_launched`), when that call returned (`window_returned`) and when the
step's output was on the host (`window_copied`: its copy event done, so the GPU's work queued before it and the audio's
copy, as seen by a thread that then waits for the interpreter; `failed: true` where the copy or the output failed, so
that a stream's n-th event of each name is still its n-th window's).

So code2wav's step on the timeline (its scheduler's `window_scheduled` -> `window_decoded`) splits: the way from the
scheduler to the worker (the rest of the service's scheduler's step, vLLM's engine loop), the worker's call (vllm-omni
0.30's generation runner: the step's inputs and the decoder's forward, launched), the step's GPU work and copy (on a GPU
the talker's process uses too) and the way back to the scheduler (async scheduling's wait for the step's output, vLLM's
loop). Set as stage 1's `worker_cls` by the engine; the window doorbell's worker extends it."""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from vllm_omni.worker.gpu_generation_worker import GPUGenerationWorker

from app.engines.omni.stage_plugins import timeline

log = logging.getLogger("vllm.speech.code2wav")


class CopyWatch:
    """Records `window_copied` for a step's streams once its output's copy event is done, waiting in a thread of its
    own: vllm-omni 0.30's generation runner returns the output with its copy to the host still running
    (`OmniGenerationAsyncOutput`, whose `copy_event` its `get_output` waits on), and the engine's thread must not wait
    for it here. An output without one was made on the host: its streams are recorded at once. Steps finish in the
    order they were launched, so one thread waits on each in turn."""

    def __init__(self, recorder: timeline.Recorder, device: Any = None) -> None:
        self._recorder = recorder
        self._device = device  # the worker's GPU: the thread's, as vllm-omni sets its own output thread's
        self._steps: queue.SimpleQueue[tuple[Any, list[str]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def watch(self, output: Any, streams: list[str]) -> None:
        """`output` None: the step gave none (its streams are marked failed)."""
        event = getattr(output, "copy_event", None)
        if event is None:
            self._record(streams, failed=output is None)
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._wait_each, name="speech-timeline-copies", daemon=True)
                self._thread.start()
        self._steps.put((event, streams))

    def _wait_each(self) -> None:
        if self._device is not None:
            try:
                import torch  # only in the stage's process, on the GPU

                torch.cuda.set_device(self._device)
            except Exception:  # waiting on an event needs no current device where the process has one GPU
                log.warning("timeline: the copies' thread could not set its GPU", exc_info=True)
        while True:
            event, streams = self._steps.get()
            try:
                try:
                    event.synchronize()
                except Exception:  # a timeline is a diagnosis: the step's own error is the engine's to raise
                    log.warning("timeline: a code2wav step's copy event failed; its windows are marked failed")
                    self._record(streams, failed=True)
                    continue
                self._record(streams)
            except Exception:  # the thread goes on for the steps after
                log.exception("timeline: a code2wav step's copy could not be recorded")

    def _record(self, streams: list[str], failed: bool = False) -> None:
        at_ns = time.time_ns()
        for stream in streams:
            self._recorder.record("window_copied", stream, at_ns, **({"failed": True} if failed else {}))


class TimelineGenerationWorker(GPUGenerationWorker):
    _copies: CopyWatch | None = None
    _unsampled: tuple[str, ...] = ()  # the streams of the step launched last whose output `sample_tokens` gives

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = timeline.recorder("code2wav")
        # vLLM's loop also steps with nothing scheduled, every millisecond while streams wait: those run no window;
        # with tensor parallelism every rank runs the step, the first records it
        recording = getattr(self, "rank", 0) == 0 and recorder.on()
        streams = list(getattr(scheduler_output, "num_scheduled_tokens", None) or ()) if recording else []
        self._unsampled = ()
        try:
            with recorder.call(streams, "window_launched", "window_returned"):
                output = super().execute_model(scheduler_output, *args, **kwargs)
        except BaseException:
            if streams:  # marked failed: each stream's later windows still pair with their own events
                self._watch_copy(recorder, None, streams)
            raise
        if output is None:  # the model runner v2's way: the output comes from sample_tokens
            self._unsampled = tuple(streams)
        elif streams:
            self._watch_copy(recorder, output, streams)
        return output

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        output = super().sample_tokens(*args, **kwargs)
        streams, self._unsampled = self._unsampled, ()
        if streams:
            self._watch_copy(timeline.recorder("code2wav"), output, list(streams))
        return output

    def _watch_copy(self, recorder: timeline.Recorder, output: Any, streams: list[str]) -> None:
        if self._copies is None:
            self._copies = CopyWatch(recorder, getattr(self, "device", None))
        self._copies.watch(output, streams)
