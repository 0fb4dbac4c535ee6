"""The window doorbell's parts that extend vllm-omni 0.30 (`window_doorbell.py` says what it does and why): the
talker's shared-memory connector that rings, and code2wav's worker that listens. Imported only in a stage's process
(and by the connector's registration), where vllm-omni is."""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm_omni.distributed.omni_connectors.connectors.shm_connector import SharedMemoryConnector

from app.engines.omni.stage_plugins import timeline
from app.engines.omni.stage_plugins.code2wav_worker import TimelineGenerationWorker
from app.engines.omni.stage_plugins.window_doorbell import (
    ADDRESS_VARIABLE,
    DATA_PLANE,
    WAKEUP,
    Bell,
    Listener,
    ThreadWakeups,
    address_from_environment,
    request_of,
)

log = logging.getLogger("vllm.speech.doorbell")


class DoorbellSharedMemoryConnector(SharedMemoryConnector):
    """vllm-omni's shared-memory connector, which rings code2wav's doorbell after each window it wrote."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        to = address_from_environment()
        self._bell = Bell(to) if to else None

    def put(self, from_stage: str, to_stage: str, put_key: str, data: Any) -> tuple[bool, int, dict[str, Any] | None]:
        result = super().put(from_stage, to_stage, put_key, data)
        if result[0]:
            written_ns = time.time_ns()
            if self._bell is not None:
                self._bell.ring()
            # after the ring, so that neither the flag's look nor the line delays it
            recorder = timeline.recorder("talker")  # only the talker's process writes windows
            request = request_of(put_key) if recorder.on() else None
            if request is not None:
                recorder.record("window_written", request, written_ns)
        return result

    def close(self) -> None:
        if self._bell is not None:
            self._bell.close()
        super().close()


def create_connector(config: dict[str, Any]) -> DoorbellSharedMemoryConnector:
    return DoorbellSharedMemoryConnector(config)


class DoorbellGenerationWorker(TimelineGenerationWorker):
    """vllm-omni's generation worker (code2wav's, `get_omni_generation_worker_cls` on CUDA; the service's that records
    its steps on a request timeline) that, once its model runner exists, gives the runner's data plane per-thread
    wake-ups and wakes its receiving thread on each ring of the doorbell and after each model step."""

    _doorbell: Listener | None = None
    _wakeups: ThreadWakeups | None = None

    def init_device(self) -> None:
        super().init_device()
        at = address_from_environment()
        plane = getattr(getattr(self, "model_runner", None), DATA_PLANE, None)
        if at is None or plane is None or not hasattr(plane, WAKEUP):
            log.warning(
                "window doorbell off: %s",
                f"{ADDRESS_VARIABLE} is not set" if at is None else "the model runner has no data plane to wake",
            )
            return
        wakeups = ThreadWakeups()
        try:
            self._doorbell = Listener(at, wakeups.set)
        except OSError as error:  # another worker of this server holds the address (more than one code2wav worker)
            log.warning("window doorbell off: cannot bind its address (%s); code2wav looks every 5 ms", error)
            return
        self._wakeups = wakeups
        setattr(plane, WAKEUP, wakeups)
        log.info("window doorbell: code2wav's receiving thread wakes on each window the talker writes")

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_model(scheduler_output, *args, **kwargs)
        finally:
            # a step that ran windows took its streams' staged ones: their next ones may be read now (vLLM's loop
            # also calls this with nothing scheduled, every millisecond while streams wait: those free nothing)
            if self._wakeups is not None and getattr(scheduler_output, "num_scheduled_tokens", None):
                self._wakeups.set()

    def shutdown(self) -> None:
        if self._doorbell is not None:
            self._doorbell.close()
            self._doorbell = None
        super().shutdown()
