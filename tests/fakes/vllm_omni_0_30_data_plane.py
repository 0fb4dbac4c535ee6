"""Stand-ins for the parts of vllm-omni 0.30.0 that the service's stage workers and connector extend (checked against
the wheel in tests/unit/test_vllm_omni_wheel.py): the shared-memory connector, the generation worker whose v2 model
runner holds the data plane and its one Event, and the AR worker (the talker's)."""

from __future__ import annotations

import threading
import types
from typing import Any

SHM_MODULE = "vllm_omni.distributed.omni_connectors.connectors.shm_connector"
WORKER_MODULE = "vllm_omni.worker.gpu_generation_worker"
AR_WORKER_MODULE = "vllm_omni.worker.gpu_ar_worker"


class FakeSharedMemoryConnector:
    """`SharedMemoryConnector` (connectors/shm_connector.py): `put(from_stage, to_stage, put_key, data)` answers
    `(success, size, metadata)`, `get` the stored object and its size or None, `close()`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.store: dict[str, Any] = {}
        self.fail_puts = False
        self.closed = False

    def put(self, from_stage: str, to_stage: str, put_key: str, data: Any) -> tuple[bool, int, dict[str, Any] | None]:
        if self.fail_puts:
            return False, 0, None
        self.store[put_key] = data
        return True, 1, {"shm": {"name": put_key, "size": 1}, "size": 1}

    def get(self, from_stage: str, to_stage: str, get_key: str, metadata: Any = None) -> tuple[Any, int] | None:
        return (self.store.pop(get_key), 1) if get_key in self.store else None

    def close(self) -> None:
        self.closed = True


class FakeDataPlane:
    """`OmniRunnerDataPlane` as far as its Event goes (model_runner/omni_connector_runtime.py: `_work_available =
    threading.Event()`, which `_recv_loop` and `_save_loop` wait on with a timeout, then clear)."""

    def __init__(self) -> None:
        self._work_available: Any = threading.Event()


class FakeModelRunner:
    """worker_v2/omni_model_runner.py: the data plane on `_omni_data_plane`, built with the runner."""

    def __init__(self) -> None:
        self._omni_data_plane = FakeDataPlane()
        self.steps = 0


class FakeCopyEvent:
    """The blocking `torch.cuda.Event` an `OmniGenerationAsyncOutput` records after its copy to the host:
    `synchronize()` waits until the test calls `done()` (or raises what `fail` holds)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.fail: BaseException | None = None

    def done(self) -> None:
        self._done.set()

    def synchronize(self) -> None:
        assert self._done.wait(10), "the test never finished the copy"
        if self.fail is not None:
            raise self.fail


class FakeAsyncOutput:
    """`OmniGenerationAsyncOutput` (worker_v2/omni_generation_model_runner.py): the step's output with its copy to the
    host under way, done when `copy_event` is."""

    def __init__(self, streams: list[str]) -> None:
        self.streams = streams
        self.copy_event = FakeCopyEvent()


class FakeGenerationWorker:
    """`GPUGenerationWorker` (worker/gpu_generation_worker.py): `init_device` builds `model_runner`; vLLM's worker
    base gives `execute_model`, `sample_tokens` and `shutdown`. With `deferred` (the model runner v2's way:
    `model_runner: v2`, as the service's profiles set it), a step's `execute_model` returns None and `sample_tokens`
    its output, a `FakeAsyncOutput`; otherwise `execute_model` returns the output itself, made on the host."""

    def __init__(self) -> None:
        self.model_runner: FakeModelRunner | None = None
        self.shut_down = False
        self.deferred = False
        self.outputs: list[FakeAsyncOutput] = []
        self._launched: list[str] | None = None

    def init_device(self) -> None:
        self.model_runner = FakeModelRunner()

    def execute_model(self, scheduler_output: Any) -> Any:
        """vLLM's `SchedulerOutput`: `num_scheduled_tokens` (request -> tokens; empty on the steps vLLM's loop runs
        with nothing scheduled)."""
        assert self.model_runner is not None
        self.model_runner.steps += 1
        if getattr(scheduler_output, "fails", False):
            raise RuntimeError("the step failed")
        if self.deferred:
            self._launched = sorted(scheduler_output.num_scheduled_tokens)
            return None
        return f"output of {sorted(scheduler_output.num_scheduled_tokens)}"

    def sample_tokens(self, grammar_output: Any) -> Any:
        """The output of the step launched last (None where there is none, as vllm-omni's runner answers)."""
        launched, self._launched = self._launched, None
        if launched is None:
            return None
        self.outputs.append(FakeAsyncOutput(launched))
        return self.outputs[-1]

    def shutdown(self) -> None:
        self.shut_down = True


class FakeARWorker:
    """`GPUARWorker` (worker/gpu_ar_worker.py): vLLM's worker's `execute_model(scheduler_output)`, whose
    `scheduled_new_reqs` (vllm/v1/core/sched/output.py `NewRequestData`, each a `req_id`) are the requests whose first
    step it is, and `sample_tokens(grammar_output)`; each hands the step to its `model_runner`'s method of that name
    (vllm/v1/worker/gpu_worker.py), where a test gives it one."""

    def __init__(self) -> None:
        self.steps: list[Any] = []
        self.model_runner: Any = None

    def execute_model(self, scheduler_output: Any) -> Any:
        self.steps.append(scheduler_output)
        if getattr(scheduler_output, "fails", False):
            raise RuntimeError("the step failed")
        if self.model_runner is not None:
            self.model_runner.execute_model(scheduler_output)
        return "launched"

    def sample_tokens(self, grammar_output: Any) -> Any:
        return self.model_runner.sample_tokens(grammar_output) if self.model_runner is not None else "sampled"


def install_data_plane(modules: dict[str, Any]) -> None:
    """Put the stand-ins where the doorbell's stage module imports them from (into `modules`, a copy of
    sys.modules that the test's monkeypatch restores)."""
    for name, attribute, value in (
        (SHM_MODULE, "SharedMemoryConnector", FakeSharedMemoryConnector),
        (WORKER_MODULE, "GPUGenerationWorker", FakeGenerationWorker),
        (AR_WORKER_MODULE, "GPUARWorker", FakeARWorker),
    ):
        module = types.ModuleType(name)
        setattr(module, attribute, value)
        modules[name] = module
    for parent in (
        "vllm_omni",
        "vllm_omni.distributed",
        "vllm_omni.distributed.omni_connectors",
        "vllm_omni.distributed.omni_connectors.connectors",
        "vllm_omni.worker",
    ):
        modules.setdefault(parent, types.ModuleType(parent))
