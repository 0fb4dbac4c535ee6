"""Stand-ins for vllm-omni 0.30.0's code2wav (stage 1) scheduling on its native data plane (Qwen3-TTS with
`model_runner: v2` and `async_chunk: true`), cut to what `app.engines.omni.stage_plugins.code2wav_scheduler`
touches, field for field, with the same names and the same order of work inside `schedule()`. Paths are inside the
vllm_omni 0.30.0 wheel (and vllm 0.30.0 for the request queue).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

CODE_GROUPS = 16
WAITING, RUNNING, WAITING_FOR_CHUNK, FINISHED_STOPPED = "WAITING", "RUNNING", "WAITING_FOR_CHUNK", "FINISHED_STOPPED"


@dataclass(eq=False)  # vLLM's Request compares by identity (queues remove it by identity)
class FakeRequest:
    """The parts of vllm `Request` (vllm/v1/request.py) the scheduler reads: `request_id`, `status`,
    `prompt_token_ids` (on code2wav, the current window's codec tokens: 16 per frame, code group major),
    `num_computed_tokens`, `num_in_flight_tokens` (scheduled, output not yet processed: the async-scheduling
    overlap) and `is_finished()`; plus `_omni_initial_model_buffer`, which 0.30's coordinator sets from each window's
    meta (core/sched/omni_scheduling_coordinator.py, `update_request_metadata`, lines 325-390)."""

    request_id: str
    status: str = WAITING
    prompt_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_in_flight_tokens: int = 0
    _omni_initial_model_buffer: dict[str, Any] | None = None

    def is_finished(self) -> bool:
        return self.status == FINISHED_STOPPED


class FakeRequestQueue(deque):
    """vllm 0.30.0's `FCFSRequestQueue` (vllm/v1/core/sched/request_queue.py, lines 75-128): a deque of requests."""

    def add_request(self, request: FakeRequest) -> None:
        self.append(request)

    def prepend_request(self, request: FakeRequest) -> None:
        self.appendleft(request)

    def remove_request(self, request: FakeRequest) -> None:
        self.remove(request)

    def remove_requests(self, requests: Iterable[FakeRequest]) -> None:
        drop = set(map(id, requests))
        kept = [r for r in self if id(r) not in drop]
        self.clear()
        self.extend(kept)


@dataclass
class FakeConnectorOutput:
    """`OmniConnectorOutput` as the model runner's receiving thread hands it to the scheduler's inbox
    (`enqueue_omni_connector_output`, core/sched/omni_scheduler_mixin.py lines 120-122; bound in
    engine/stage_engine_core_proc.py lines 82-97): readiness and each window's scheduling metadata, as
    distributed/omni_connectors/model_runner/omni_connector_payload_transport.py `_extract_scheduling_metadata`
    (lines 64-92) makes it: `code_predictor_codes`, `left_context_size`, `input_terminal`."""

    chunk_ready_req_ids: set[str] = field(default_factory=set)
    chunk_finished_req_ids: set[str] = field(default_factory=set)
    request_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)


class FakeSchedulingCoordinator:
    """`OmniSchedulingCoordinator` (core/sched/omni_scheduling_coordinator.py) in async-chunk mode: `_async_chunk`,
    `finished_requests` (streams whose last window arrived), `requests_with_ready_chunks` (streams whose next window
    arrived and is not yet scheduled), `process_pending_chunks` (lines 94-130 with `_process_chunk_queue`, 436-481:
    a stream with no window ready leaves the queue it is in, as WAITING_FOR_CHUNK, until `restore_queues`, lines
    283-298, appends it back), `update_request_metadata` (lines 325-390: a window's codes become the request's
    prompt and its computed tokens go back to 0) and `postprocess_scheduler_output` (lines 397-405 and
    `_clear_chunk_ready`: scheduled streams are no longer ready)."""

    def __init__(self) -> None:
        self._async_chunk = True
        self.finished_requests: set[str] = set()
        self.requests_with_ready_chunks: set[str] = set()
        self._waiting_for_chunk_waiting: deque[FakeRequest] = deque()
        self._waiting_for_chunk_running: deque[FakeRequest] = deque()

    def update_request_metadata(
        self, requests: dict[str, FakeRequest], request_metadata: dict, model_mode: str
    ) -> None:
        for req_id, metadata in request_metadata.items():
            request = requests.get(req_id)
            if request is None:
                continue
            runtime_seed = None
            if "left_context_size" in metadata:
                runtime_seed = {"meta": {"left_context_size": metadata["left_context_size"]}}
            request._omni_initial_model_buffer = runtime_seed
            new_ids = list(metadata.get("code_predictor_codes") or [])
            if new_ids:
                request.prompt_token_ids = new_ids
                request.num_computed_tokens = 0

    def process_pending_chunks(
        self, waiting: FakeRequestQueue, running: list[FakeRequest], ready: set[str], finished: set[str]
    ) -> None:
        self.finished_requests |= finished
        for queue, parked, target in (
            (waiting, self._waiting_for_chunk_waiting, WAITING),
            (running, self._waiting_for_chunk_running, RUNNING),
        ):
            for request in list(queue):
                can_run = request.request_id in self.finished_requests | ready | self.requests_with_ready_chunks
                if can_run:
                    if request.status == WAITING_FOR_CHUNK:
                        request.status = target
                    if request.request_id in ready:
                        self.requests_with_ready_chunks.add(request.request_id)
                    continue
                request.status = WAITING_FOR_CHUNK
                queue.remove(request)
                parked.append(request)

    def restore_queues(self, waiting: FakeRequestQueue, running: list[FakeRequest]) -> None:
        for request in self._waiting_for_chunk_waiting:
            waiting.add_request(request)
        self._waiting_for_chunk_waiting = deque()
        running.extend(self._waiting_for_chunk_running)
        self._waiting_for_chunk_running = deque()

    def postprocess_scheduler_output(self, output: FakeSchedulerOutput) -> None:
        self.requests_with_ready_chunks -= set(output.num_scheduled_tokens)


@dataclass
class FakeSchedulerOutput:
    """vLLM's `SchedulerOutput` as far as the subclass reads it: the windows scheduled, and what the model runner acts
    on besides: `pending_input_registrations` (vllm-omni's requests whose inputs the runner's receiving thread is to
    look for, worker_v2/omni_model_runner.py line 210) and `finished_req_ids` (vLLM's requests to release)."""

    num_scheduled_tokens: dict[str, int]
    pending_input_registrations: list[FakeRequest] = field(default_factory=list)
    finished_req_ids: set[str] = field(default_factory=set)


class FakeGenerationScheduler:
    """`OmniGenerationScheduler` (core/sched/omni_generation_scheduler.py) on the native data plane, as Qwen3-TTS's
    code2wav runs it on CUDA: `_native_data_plane` True, `chunk_transfer_adapter` None, an `input_coordinator`
    (omni_scheduler_mixin.py `_init_omni_io_scheduling_state`, lines 128-171; qwen3_tts/pipeline.py declares
    `supports_native_mrv2_data_plane`, config/stage_config.py lines 1050-1059 derive `use_v2_model_runner`);
    `retains_state_across_chunks` False (qwen3_tts/pipeline.py sets none). Attributes a subclass touches:
    `vllm_config.model_config.stage_connector_config`, `waiting` (a request queue), `running` (a list), `requests`,
    `max_num_running_reqs`. `schedule()` follows lines 208-494 in order: `_requeue_completed_native_chunks` (every
    running stream whose window finished decoding joins the tail of `waiting`), `_process_pending_omni_inputs`
    (mixin lines 320-392: drain the inbox into the coordinator), skip running streams with tokens in flight,
    schedule each waiting stream with tokens to run, in order, up to `max_num_running_reqs` windows (lines 315-397),
    then `_restore_omni_wait_queues` (mixin lines 411-420). `update_from_output` settles `num_in_flight_tokens` and
    finishes a stream once its last window has run (lines 507-700). `_is_done_receiving_chunks` is lines 129-133.
    `seen_waiting` keeps, per `schedule()`, the streams left in `waiting` right before the step was built."""

    def __init__(self, connector_extra: dict[str, Any], *, max_num_seqs: int = 64) -> None:
        model_config = types.SimpleNamespace(stage_connector_config={"name": "x", "extra": connector_extra})
        self.vllm_config = types.SimpleNamespace(model_config=model_config)
        self._native_data_plane = True
        self.chunk_transfer_adapter = None
        self.input_coordinator = FakeSchedulingCoordinator()
        self.max_num_running_reqs = max_num_seqs
        self.waiting = FakeRequestQueue()
        self.running: list[FakeRequest] = []
        self.requests: dict[str, FakeRequest] = {}
        self.finished: list[str] = []
        self.seen_waiting: list[list[str]] = []
        self._inbox: list[FakeConnectorOutput] = []
        self._to_register: list[FakeRequest] = []  # added since the last schedule
        self._finished_since: set[str] = set()  # finished since the last schedule

    # -- what the stage's clients and the receiving thread do ------------------------------------------------------
    def add(self, request_id: str) -> None:
        request = FakeRequest(request_id)
        self.requests[request_id] = request
        self.waiting.add_request(request)
        self._to_register.append(request)

    def window_arrives(self, request_id: str, frames: int = 25, left_context: int = 0, last: bool = False) -> None:
        """A window of `frames` new frames (after `left_context` frames of reference codes) reaches code2wav."""
        metadata = {
            "code_predictor_codes": [0] * (CODE_GROUPS * (left_context + frames)),
            "left_context_size": left_context,
        }
        if last:
            metadata["input_terminal"] = True
        self.enqueue_omni_connector_output(
            FakeConnectorOutput({request_id}, {request_id} if last else set(), {request_id: metadata})
        )

    def enqueue_omni_connector_output(self, output: FakeConnectorOutput) -> None:
        """The receiving thread's hand-off (core/sched/omni_scheduler_mixin.py lines 120-122: onto the inbox that
        `_process_pending_omni_inputs` drains)."""
        self._inbox.append(output)

    # -- OmniGenerationScheduler ------------------------------------------------------------------------------------
    def _is_done_receiving_chunks(self, request_id: str) -> bool:
        return request_id in self.input_coordinator.finished_requests

    def _requeue_completed_native_chunks(self) -> None:
        in_flight = []
        for request in self.running:
            if request.num_in_flight_tokens > 0 or request.is_finished():
                in_flight.append(request)
                continue
            request.status = WAITING
            self.waiting.add_request(request)
        self.running = in_flight

    def _process_pending_omni_inputs(self, model_mode: str) -> None:
        outputs, self._inbox = self._inbox, []
        metadata: dict[str, dict[str, Any]] = {}
        ready: set[str] = set()
        finished: set[str] = set()
        for output in outputs:
            metadata.update(output.request_metadata)
            ready |= output.chunk_ready_req_ids
            finished |= output.chunk_finished_req_ids
        self.input_coordinator.update_request_metadata(self.requests, metadata, model_mode=model_mode)
        self.input_coordinator.process_pending_chunks(self.waiting, self.running, ready, finished)

    def _restore_omni_wait_queues(self) -> None:
        self.input_coordinator.restore_queues(self.waiting, self.running)

    def schedule(self, throttle_prefills: bool = False) -> FakeSchedulerOutput:
        self._requeue_completed_native_chunks()
        self._process_pending_omni_inputs(model_mode="generation")
        self.seen_waiting.append([r.request_id for r in self.waiting])
        scheduled: dict[str, int] = {}
        skipped = FakeRequestQueue()
        while self.waiting and len(scheduled) < self.max_num_running_reqs:
            request = self.waiting.popleft()
            required = len(request.prompt_token_ids) - request.num_computed_tokens
            if request.num_in_flight_tokens > 0 or required <= 0:
                skipped.append(request)
                continue
            request.status = RUNNING
            self.running.append(request)
            scheduled[request.request_id] = required
        self.waiting.extendleft(reversed(skipped))
        for request_id, tokens in scheduled.items():  # _update_after_schedule
            self.requests[request_id].num_computed_tokens += tokens
            self.requests[request_id].num_in_flight_tokens += tokens
        output = FakeSchedulerOutput(scheduled, self._to_register, self._finished_since)
        self._to_register, self._finished_since = [], set()
        self.input_coordinator.postprocess_scheduler_output(output)
        self._restore_omni_wait_queues()
        return output

    def update_from_output(self, scheduler_output: FakeSchedulerOutput, model_runner_output: Any) -> dict:
        for request_id, tokens in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(request_id)
            if request is None:
                continue
            request.num_in_flight_tokens -= tokens
            if self._is_done_receiving_chunks(request_id) and request.num_computed_tokens >= len(
                request.prompt_token_ids
            ):
                request.status = FINISHED_STOPPED
                self.running.remove(request)
                del self.requests[request_id]
                self.input_coordinator.finished_requests.discard(request_id)
                self.finished.append(request_id)
                self._finished_since.add(request_id)
        return {}


def install_generation_scheduler(modules: dict[str, Any], scheduler: type = FakeGenerationScheduler) -> None:
    """Make `vllm_omni.core.sched.omni_generation_scheduler` importable with the stand-in (into `modules`, e.g. a
    monkeypatched sys.modules)."""
    module = types.ModuleType("vllm_omni.core.sched.omni_generation_scheduler")
    module.OmniGenerationScheduler = scheduler  # type: ignore[attr-defined]
    for name in ("vllm_omni", "vllm_omni.core", "vllm_omni.core.sched"):
        modules.setdefault(name, types.ModuleType(name))
    modules["vllm_omni.core.sched.omni_generation_scheduler"] = module


def import_against_stand_ins(monkeypatch: Any, module: str, *installs: Callable[[dict[str, Any]], None]) -> Any:
    """Import `module` afresh against these stand-ins, in a sys.modules that the test's monkeypatch restores."""
    modules = dict(sys.modules)
    for install in installs:
        install(modules)
    modules.pop(module, None)
    monkeypatch.setattr(sys, "modules", modules)
    return importlib.import_module(module)
