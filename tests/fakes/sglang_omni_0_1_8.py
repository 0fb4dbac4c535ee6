"""Stand-ins for the sglang-omni 0.1.8 objects the sglang engine touches, mirroring them field for field (checked
against the pinned wheel's own source in tests/unit/test_sglang_omni_stand_in.py):

- `sglang_omni.client.types`: `SamplingParams`, `GenerateRequest`, `UsageInfo`, `GenerateChunk` (dataclasses, same
  fields, order and defaults);
- `sglang_omni.client.Client(coordinator)`: `generate(request, request_id=None)` as an async generator whose early
  close aborts the request, `abort(request_id, level)`, `health()`;
- `sglang_omni.pipeline.mp_runner.MultiProcessPipelineRunner(config)`: `start(timeout)`, `stop()`, `coordinator`,
  `wait_failed()`, `fatal_error`, `groups` (each with `any_dead()` and `dead_summary()`);
- `sglang_omni.config.manager.ConfigManager`: `from_model_path(path)` (the pipeline chosen from config.json's
  architecture or model type) and `merge_config(dotted)` (a key the pipeline does not have is refused, as sglang-omni
  refuses a factory argument its stage does not take);
- `sglang_omni.utils.gpu_compat.apply_gpu_compat_env_defaults`;
- `sglang_omni.profiler.profiler_control.ProfilerControlClient(stage_endpoints)`: `broadcast_start(run_id,
  trace_path_template, ...)`, `broadcast_stop(run_id)`, `close()`, on the runner's `stage_control_endpoints`; the
  stand-in's pipeline writes `<template>_pid<PID>_rank0.trace.json` when a run stops, as the stage's profiler does;
  with an `event_dir` and `enable_torch=False`, the pipeline's request events instead (`events_<stage>_<pid>.jsonl`);
- `sglang_omni.profiler.event_recorder.get_recorder()`: the process's `RequestEventRecorder` (`start(run_id,
  event_dir, stage)`, `stop(run_id=)`, `is_active()`): a JSON line per request event while a run is on.

What a Qwen3-TTS request yields is sglang-omni's (`models/qwen3_tts/streaming_vocoder.py`): float32 deltas at 24 kHz in
windows of 1, 2, 4 frames then 8 each (or the `stream_chunk_ramp`, the steady `stream_followup_stride`, a request's
`initial_codec_chunk_frames` for its first), then a final chunk with no audio, `finish_reason="stop"` and the usage
(prompt tokens: a clone's reference frames; completion tokens: frames). The request builder's checks are its
messages, raised in the stream as `RuntimeError` (a stage's error reaches the client so). The talker stops at its end of
speech (a length that grows with the text) unless the fixed-length switch is on in the environment
(QWEN3_TTS_FIXED_LENGTH=1), as `app/engines/sglang/stage_plugins/process_start` makes it on the GPU.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import time
import wave
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from app.engines.sglang.engine import SglangRuntime
from tests.fakes.vllm_omni_0_30 import WordTokenizer

SAMPLES_PER_FRAME = 1920
SAMPLE_RATE = 24_000
DEFAULT_RAMP = (1, 2, 4)
DEFAULT_STEADY = 8
STREAM_STRIDE = 16

# The dotted settings this pipeline has (sglang-omni 0.1.8's EngineArgs is open: any other engine key goes to SGLang's
# ServerArgs; a factory key must be an argument of the stage's factory)
ENGINE_KEYS_FREE = "tts_engine.engine."
PREPROCESSING_FACTORY_ARGS = frozenset(
    {"max_concurrency", "stream_codec_output", "load_frontend", "device", "gpu_id", "dtype", "attn_implementation"}
)
TTS_ENGINE_FACTORY_ARGS = frozenset(  # the talker's factory, e.g. its prefill coalescing (a burst's prefills merged)
    {
        "device", "gpu_id", "dtype", "attn_implementation", "prefill_coalesce_requests", "prefill_coalesce_wait_ms",
        "server_args_overrides", "reference_encoder_cuda_graph_bucket_frames", "leading_silence_mask_frames",
    }
)  # fmt: skip
STAGES = ("preprocessing", "tts_engine", "vocoder")
# where a stage runs and what it may take there (sglang-omni's StageConfig fields of that kind)
STAGE_FIELDS = frozenset(
    {"process", "gpu", "tp_size", "gpu_memory_fraction", "total_reserve_bytes", "enforce_total_reserve"}
)
COMM_FIELDS = frozenset(  # a stage's channel (CommConfig: every field)
    {
        "slot_size_mb", "credits", "cuda_ipc_slot_size_kb", "cuda_ipc_pool_size_mb", "mooncake_protocol",
        "mooncake_hostname", "mooncake_device_name",
    }
)  # fmt: skip
TOP_LEVEL_KEYS = frozenset(  # the pipeline's placement limits (PlacementConfig: every field)
    {"placement.max_total_gpu_memory_fraction_per_gpu", "placement.require_memory_fraction_for_colocation"}
)
PROCESS_FIELDS = frozenset({"num_replicas", "replica_devices"})  # processes.<name>.<field> (ProcessConfig: every field)
DEFAULT_PROCESS = "pipeline"  # where a stage runs unless its `process` says otherwise
VOCODER_FACTORY_ARGS = frozenset(
    {
        "max_batch_size", "max_batch_wait_ms", "stream_stride", "stream_followup_stride",
        "stream_initial_followup_stride", "initial_chunk_frames", "stream_chunk_ramp", "stream_left_context_frames",
        "initial_max_batch_size", "initial_batch_wait_ms", "followup_max_batch_size", "followup_batch_wait_ms",
        "followup_worker_count", "initial_cuda_graph", "followup_cuda_graph", "async_decode",
        "enable_stateful_codec_decoder", "codec_state_slots",
    }
)  # fmt: skip


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    max_new_tokens: int | None = None


@dataclass
class GenerateRequest:
    model: str | None = None
    prompt: str | dict[str, Any] | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stage_sampling: dict[str, SamplingParams] | None = None
    stage_params: dict[str, dict[str, Any]] | None = None
    extra_params: dict[str, Any] = field(default_factory=dict)
    stream: bool = True
    max_tokens: int | None = None
    output_modalities: list[str] | None = None
    multimodal_train_inputs: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class UsageInfo:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    engine_time_s: float | None = None


@dataclass
class GenerateChunk:
    request_id: str
    index: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: Any = None
    output_token_logprobs: Any = None
    omni_rollout: Any = None
    finish_reason: str | None = None
    model_finish_reason: str | None = None
    usage: UsageInfo | None = None
    weight_version: str | None = None
    stage_id: int | None = None
    stage_name: str | None = None
    modality: str = "text"
    language: str | None = None
    audio_data: object = None
    sample_rate: int | None = None


class AbortLevel(Enum):
    SOFT = "soft"
    HARD = "hard"


@dataclass
class AbortResult:
    success: bool
    level_applied: AbortLevel
    partial_output: Any = None


class QueueFullError(RuntimeError):
    MESSAGE = "The request queue is full."


def windows(frames: int, pipeline: Mapping[str, object], first: int | None) -> list[int]:
    """The vocoder's windows for `frames` frames: the ramp (a request's first size, clamped to the stride, replaces its
    head), then steady. The default ramp's later windows are no larger than the steady ones."""
    steady = int(pipeline.get("vocoder.factory.stream_followup_stride") or DEFAULT_STEADY)  # type: ignore[call-overload]
    default = (DEFAULT_RAMP[0], *(min(size, steady) for size in DEFAULT_RAMP[1:]))
    ramp = list(pipeline.get("vocoder.factory.stream_chunk_ramp") or default)  # type: ignore[call-overload]
    if first is not None:
        ramp[0] = min(first, int(pipeline.get("vocoder.factory.stream_stride") or STREAM_STRIDE))  # type: ignore[call-overload]
    sizes: list[int] = []
    while sum(sizes) < frames:
        size = ramp[len(sizes)] if len(sizes) < len(ramp) else steady
        sizes.append(min(size, frames - sum(sizes)))
    return sizes


def check_request(request: GenerateRequest, model_type: str, speakers: tuple[str, ...]) -> None:
    """sglang-omni's Qwen3-TTS request builder's refusals (`build_qwen3_tts_state`, `validate_qwen3_tts_model_task`),
    with its messages."""
    tts = request.metadata.get("tts_params") or {}
    prompt = request.prompt
    references = prompt.get("references", []) if isinstance(prompt, dict) else []
    task = tts.get("task_type") or ("Base" if references or "ref_audio" in tts else "CustomVoice")
    if task == "CustomVoice":
        for name in ("ref_audio", "ref_text", "x_vector_only_mode"):
            if name in tts:
                raise ValueError(f"Qwen3-TTS CustomVoice does not accept {name}")
        if references:
            raise ValueError("Qwen3-TTS CustomVoice does not accept ref_audio")
        voice = str(tts.get("voice") or "vivian").lower()
        if voice not in speakers:
            raise ValueError(f"Unsupported Qwen3-TTS CustomVoice speaker '{voice}'. Supported: {', '.join(speakers)}")
    elif task == "VoiceDesign" and not tts.get("instructions"):
        raise ValueError("Qwen3-TTS VoiceDesign requires instructions")
    elif task == "Base":
        if not references and "ref_audio" not in tts:
            raise ValueError("Qwen3-TTS Base requires reference audio via ref_audio or references[0].audio_path")
        text = references[0].get("text") if references else tts.get("ref_text")
        if not tts.get("x_vector_only_mode", not text) and not text:
            raise ValueError("Qwen3-TTS Base requires non-empty ref_text unless x_vector_only_mode is enabled")
    wanted = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}[model_type]
    if task != wanted:
        raise ValueError(f"Qwen3-TTS {wanted} checkpoint does not support {task}")


def reference_seconds(reference: Mapping[str, Any]) -> float:
    with wave.open(io.BytesIO(base64.b64decode(reference["data"]))) as clip:
        return clip.getnframes() / clip.getframerate()


class RequestEventRecorder:
    """A process's request-event sink, as sglang-omni's: one JSON line per event in `events_<stage>_<pid>.jsonl` under
    the run's directory while a run is on."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.fp: Any = None

    def is_active(self) -> bool:
        return self.fp is not None

    def start(self, run_id: str, event_dir: str, stage: str) -> str:
        self.stop()
        directory = Path(event_dir).expanduser().resolve()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"events_{stage}_{os.getpid()}.jsonl"
        self.fp, self.run_id = path.open("a", buffering=1, encoding="utf-8"), run_id
        return str(path)

    def stop(self, *, run_id: str | None = None) -> str | None:
        if self.fp is None or (run_id is not None and run_id != self.run_id):
            return None
        path = self.fp.name
        self.fp.close()
        self.fp = None
        return str(path)

    def emit(self, request_id: str, stage: str, event_name: str) -> None:
        if self.fp is not None:
            event = {"request_id": request_id, "stage": stage, "event_name": event_name, "run_id": self.run_id}
            self.fp.write(json.dumps({**event, "timestamp_ns": time.time_ns(), "pid": os.getpid()}) + "\n")


RECORDER = RequestEventRecorder()  # the service's process (the coordinator's)
PIPELINE_RECORDER = RequestEventRecorder()  # the pipeline's process (its stages'), here in the same one


def get_recorder() -> RequestEventRecorder:
    return RECORDER


class FakeCoordinator:
    def __init__(self, pipeline: FakePipeline) -> None:
        self.pipeline = pipeline
        self.running = True
        self.fatal_error: str | None = None
        self.requests: dict[str, asyncio.Event] = {}  # in flight: set when aborted
        self.submitted: list[tuple[str, GenerateRequest]] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self.step_delay_s = 0.0

    def health(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "stages": list(STAGES),
            "entry_stage": "preprocessing",
            "total_requests": len(self.requests),
            "pending_completions": len(self.requests),
            "request_states": {},
        }

    def frames_for(self, request: GenerateRequest) -> int:
        limit = request.sampling.max_new_tokens or request.max_tokens or 2048
        if os.environ.get("QWEN3_TTS_FIXED_LENGTH") == "1":
            return limit
        prompt = request.prompt
        text = prompt["text"] if isinstance(prompt, dict) else str(prompt)
        return min(limit, 4 + 3 * len(text.split()))  # the talker's end of speech

    async def stream(self, request_id: str, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        if not self.running:
            raise RuntimeError(self.fatal_error or "Coordinator stopped")
        if request_id in self.requests:
            raise ValueError(f"Request {request_id} already exists")
        if len(self.requests) >= 128:
            raise QueueFullError(QueueFullError.MESSAGE)
        self.submitted.append((request_id, request))
        RECORDER.emit(request_id, "coordinator", "request_admission")
        aborted = self.requests[request_id] = asyncio.Event()
        try:
            await asyncio.sleep(0)
            try:
                check_request(request, self.pipeline.model_type, self.pipeline.speakers)
            except ValueError as exc:
                raise RuntimeError(str(exc)) from None
            frames = self.frames_for(request)
            references = request.prompt.get("references", []) if isinstance(request.prompt, dict) else []
            in_context = bool(references) and bool(references[0].get("text"))
            ref_frames = int(np.ceil(reference_seconds(references[0]) * 12.5)) if in_context else 0
            first = request.extra_params.get("initial_codec_chunk_frames")
            rng = np.random.default_rng(len(self.submitted))
            PIPELINE_RECORDER.emit(request_id, "tts_engine", "scheduler_queue_enter")
            for index, size in enumerate(windows(frames, self.pipeline.settings, first)):
                if self.step_delay_s:
                    await asyncio.sleep(self.step_delay_s)
                else:
                    await asyncio.sleep(0)
                if aborted.is_set():
                    raise RuntimeError("aborted")
                if not self.running:
                    raise RuntimeError(self.fatal_error or "Coordinator stopped")
                audio = rng.uniform(-0.5, 0.5, size * SAMPLES_PER_FRAME).astype(np.float32)
                chunk = GenerateChunk(request_id, stage_name="vocoder", modality="audio")
                chunk.audio_data, chunk.sample_rate = audio, SAMPLE_RATE
                if index == 0:
                    PIPELINE_RECORDER.emit(request_id, "vocoder", "stage_first_stream_chunk_sent")
                yield chunk
            usage = UsageInfo(ref_frames, frames, ref_frames + frames, 0.5)
            yield GenerateChunk(
                request_id, finish_reason="stop", model_finish_reason="", usage=usage, sample_rate=SAMPLE_RATE
            )
            self.finished.append(request_id)
        finally:
            if self.requests.pop(request_id, None) is not None and request_id not in self.finished:
                self.aborted.append(request_id)  # Coordinator.stream's finally aborts a request still tracked

    def abort(self, request_id: str) -> bool:
        event = self.requests.get(request_id)
        if event is None:
            return False
        event.set()
        return True


class Client:
    def __init__(self, coordinator: FakeCoordinator, result_builder: Any = None, stream_builder: Any = None) -> None:
        self.coordinator = coordinator

    async def generate(self, request: GenerateRequest, request_id: str | None = None) -> AsyncIterator[GenerateChunk]:
        assert request.stream, "the engine streams every request"
        assert request.output_modalities == ["audio"]
        async with contextlib.aclosing(self.coordinator.stream(request_id or "generated", request)) as stream:
            async for chunk in stream:
                yield chunk

    async def abort(self, request_id: str, level: AbortLevel = AbortLevel.SOFT) -> AbortResult:
        return AbortResult(self.coordinator.abort(request_id), level)

    def health(self) -> dict[str, Any]:
        return self.coordinator.health()


@dataclass
class FakePipeline:
    """The merged pipeline config: its model and the dotted settings it was given."""

    model_path: str
    model_type: str
    speakers: tuple[str, ...]
    settings: dict[str, object] = field(default_factory=dict)


def check_processes(args: Mapping[str, object]) -> None:
    """sglang-omni's rules for the `processes.<name>.<field>` replica policies: only for a process a stage runs in,
    only its fields, at least one copy; copies of a process with a stage on the GPU need devices of their own, which a
    process without one may not declare, and a stage's own GPU is refused beside them."""
    where = {stage: str(args.get(f"{stage}.process") or DEFAULT_PROCESS) for stage in STAGES}
    on_gpu = {"tts_engine", "vocoder"} | ({"preprocessing"} if "preprocessing.gpu" in args else set())
    for key, value in args.items():
        if not key.startswith("processes."):
            continue
        _, process, name = key.split(".", 2)
        if process not in where.values() or name not in PROCESS_FIELDS:
            raise ValueError(f"processes references unknown process or field: {key!r}")
        gpu_stages = [stage for stage, home in where.items() if home == process and stage in on_gpu]
        devices = f"processes.{process}.replica_devices" in args
        if name == "num_replicas" and int(value) < 1:  # type: ignore[call-overload]
            raise ValueError("processes.num_replicas must be >= 1")
        if name == "num_replicas" and int(value) > 1 and gpu_stages and not devices:  # type: ignore[call-overload]
            raise ValueError(
                f"Process {process!r}: num_replicas on a process with GPU stage(s) requires replica_devices"
            )
        if name == "replica_devices" and not gpu_stages:
            raise ValueError(f"Process {process!r} has no GPU stage and must not declare replica_devices")
        if name == "replica_devices" and any(f"{stage}.gpu" in args for stage in gpu_stages):
            raise ValueError(
                f"a stage's gpu cannot override GPU placement: process {process!r} declares replica_devices"
            )


class ConfigManager:
    def __init__(self, config: FakePipeline | None = None) -> None:
        self.config = config

    @staticmethod
    def from_model_path(model_path: str, variant: str | None = None) -> ConfigManager:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
        architecture = (config.get("architectures") or [None])[0] or config.get("model_type")
        if architecture not in ("Qwen3TTSForConditionalGeneration", "qwen3_tts"):
            raise ValueError(f"no pipeline for architecture {architecture!r}")
        speakers = tuple(name.lower() for name in (config.get("talker_config") or {}).get("spk_id") or {})
        return ConfigManager(FakePipeline(model_path, config.get("tts_model_type", "base"), speakers))

    def merge_config(self, extra_args: Mapping[str, object], *, extra_patches: Any = None) -> FakePipeline:
        assert self.config is not None
        check_processes(extra_args)
        for key in extra_args:
            if key in TOP_LEVEL_KEYS or key.startswith("processes."):
                continue
            stage, _, rest = key.partition(".")
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r} in {key!r}")
            if rest in STAGE_FIELDS:
                continue
            group, _, name = rest.partition(".")
            factory_args = {
                "vocoder": VOCODER_FACTORY_ARGS,
                "preprocessing": PREPROCESSING_FACTORY_ARGS,
                "tts_engine": TTS_ENGINE_FACTORY_ARGS,
            }[stage]
            known = (
                key.startswith(ENGINE_KEYS_FREE)
                or (group == "factory" and name in factory_args)
                or (group == "env" and bool(name))
                or (group == "comm" and name in COMM_FIELDS)
            )
            if not known:
                raise ValueError(f"Stage {stage!r} sets {group}.{name} but its factory does not accept {name!r}")
        return FakePipeline(self.config.model_path, self.config.model_type, self.config.speakers, dict(extra_args))


class FakeStageGroup:
    def __init__(self) -> None:
        self.exit_code: int | None = None

    def any_dead(self) -> bool:
        return self.exit_code is not None

    def dead_summary(self) -> str:
        return f"pipeline (pid=4242, exit={self.exit_code})"


class MultiProcessPipelineRunner:
    """Every runner built is kept (`built`), so a test reaches the one its engine started."""

    built: ClassVar[list[MultiProcessPipelineRunner]] = []

    def __init__(self, config: FakePipeline) -> None:
        self.config = config
        self.started = False
        self.stopped = False
        self.fatal_error: BaseException | None = None
        self.fatal_event: asyncio.Event | None = None
        self.groups: list[FakeStageGroup] = []
        self._coordinator: FakeCoordinator | None = None
        self.start_timeout: float | None = None
        MultiProcessPipelineRunner.built.append(self)

    @property
    def coordinator(self) -> FakeCoordinator:
        if self._coordinator is None:
            raise RuntimeError("Runner not started")
        return self._coordinator

    async def start(self, timeout: float = 120.0) -> None:  # noqa: ASYNC109  (sglang-omni's signature)
        self.start_timeout = timeout
        self.fatal_event = asyncio.Event()
        self._coordinator = FakeCoordinator(self.config)
        self.groups = [FakeStageGroup()]
        self.started = True

    def kill(self, exit_code: int = -9) -> None:
        """The pipeline's process dies: seen by `any_dead` at once; the runner fails itself as its monitor would."""
        self.groups[0].exit_code = exit_code
        message = f"Dead stage process(es) detected: {self.groups[0].dead_summary()}"
        self.fatal_error = RuntimeError(message)
        coordinator = self.coordinator
        coordinator.running, coordinator.fatal_error = False, message
        assert self.fatal_event is not None
        self.fatal_event.set()

    async def wait_failed(self) -> None:
        assert self.fatal_event is not None
        await self.fatal_event.wait()
        raise self.fatal_error or RuntimeError("pipeline failed")

    @property
    def stage_control_endpoints(self) -> dict[str, str]:
        if not self.started:
            raise RuntimeError("Runner not started")
        return {stage: f"ipc:///tmp/stand-in-{stage}-control" for stage in STAGES}

    async def stop(self) -> None:
        if not self.started:
            return
        self.started, self.stopped = False, True
        if self._coordinator is not None:
            self._coordinator.running = False
            self._coordinator.fatal_error = self._coordinator.fatal_error or "Coordinator stopped"
        self._coordinator = None


def apply_gpu_compat_env_defaults(env: Any = None) -> dict[str, str]:
    return {}


def _write_trace(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text('{"traceEvents": []}')


@dataclass
class ProfilerControlClient:
    """Control messages to the stages; the one pipeline process writes its trace when its run stops. Every client
    built is kept (`built`) with the messages it sent (`sent`)."""

    stage_endpoints: dict[str, str]
    socks: dict[str, Any] | None = None
    sent: list[tuple[str, str | None]] = field(default_factory=list)
    built: ClassVar[list[ProfilerControlClient]] = []
    _templates: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ProfilerControlClient.built.append(self)

    async def start(self) -> None:
        if self.socks is None:
            self.socks = dict.fromkeys(self.stage_endpoints)

    async def close(self) -> None:
        self.socks = None

    async def broadcast_start(
        self,
        run_id: str,
        trace_path_template: str,
        config: Mapping[str, object] | None = None,
        stages: list[str] | None = None,
        event_dir: str | None = None,
        enable_torch: bool = True,
    ) -> None:
        await self.start()
        self.sent.append(("start", run_id))
        if enable_torch:
            self._templates[run_id] = trace_path_template
        if event_dir:
            PIPELINE_RECORDER.start(run_id, event_dir, "preprocessing")

    async def broadcast_stop(self, run_id: str | None = None, stages: list[str] | None = None) -> None:
        await self.start()
        self.sent.append(("stop", run_id))
        PIPELINE_RECORDER.stop(run_id=run_id)
        for run in [run_id] if run_id is not None else list(self._templates):
            template = self._templates.pop(run, None)
            if template:
                await asyncio.to_thread(_write_trace, f"{template}_pid{os.getpid()}_rank0.trace.json")


def runtime() -> SglangRuntime:
    """The stand-ins as the engine's runtime (the model's tokenizer: one token a word)."""
    return SglangRuntime(
        ConfigManager, MultiProcessPipelineRunner, Client, GenerateRequest, SamplingParams,
        apply_gpu_compat_env_defaults, lambda model_dir: WordTokenizer(), ProfilerControlClient, get_recorder,
    )  # fmt: skip
