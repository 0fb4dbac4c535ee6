"""The sglang engine: Qwen3-TTS on sglang-omni 0.1.8, run inside the server's process through sglang-omni's own objects,
the ones its `serve/launcher.py` uses: `ConfigManager` builds the pipeline's settings from the model directory,
`MultiProcessPipelineRunner` starts the pipeline (one spawned process holding the text preprocessing, the talker and
the streaming codec decoder, on GPU 0 of what this process sees), and `Client` submits requests and streams their
audio. Never its HTTP server.

sglang-omni is imported only when the engine starts (`load_runtime`), so the rest of the service runs without it. Its
coordinator and client live on the event loop `start` runs on: the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.audio.transforms import StreamTimeStretch
from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    EngineError,
    EngineHealth,
    EngineUnavailable,
    SynthesisJob,
    VoiceInfo,
)
from app.engines.qwen3_tts import (
    SAMPLES_PER_FRAME,
    Qwen3TTSModel,
    capabilities,
    check_job,
    input_tokens,
    voice_infos,
    warm_up,
    warmup_batch_sizes,
    warmup_job,
)
from app.engines.sglang.requests import (
    MAX_NEW_TOKENS,
    check_sglang_job,
    pipeline_settings,
    request_fields,
    stream_stride,
)
from app.settings import MAX_INPUT_CHARS

if TYPE_CHECKING:
    from app.settings import SglangSettings

log = logging.getLogger(__name__)

SGLANG_DEFAULT_QUEUE = 64  # sglang-omni 0.1.8's max_queued_requests for Qwen3-TTS (generation_admission_defaults)
# the pipeline's process is spawned and must find everything locally
ENGINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    # the talker's process group takes a TCP port (29500 first) by a claim file in this folder, under TMPDIR unless
    # set: two servers on one host with their own TMPDIRs both claimed 29500 and the second died (EADDRINUSE)
    "SGLANG_OMNI_PORT_CLAIM_DIR": "/tmp/sglang-omni-port-claims",
}
# sglang-omni's processes start with this directory on their path, whose sitecustomize sets what they cannot be told
# otherwise: Python's switch interval, and for benchmarks on random weights (`fixed_length`) the codec's end-of-speech
# token masked, so every request runs to max_new_tokens
PROCESS_START_PATH = str(Path(__file__).parent / "stage_plugins" / "process_start")
FIXED_LENGTH_VARIABLE = "QWEN3_TTS_FIXED_LENGTH"
SWITCH_INTERVAL_VARIABLE = "SPEECH_SGLANG_SWITCH_INTERVAL_S"


@dataclass(frozen=True, slots=True)
class SglangRuntime:
    """What the engine uses of sglang-omni 0.1.8 (a stand-in provides the same on the CPU)."""

    config_manager: Any  # sglang_omni.config.manager.ConfigManager
    pipeline_runner: Any  # sglang_omni.pipeline.mp_runner.MultiProcessPipelineRunner
    client: Any  # sglang_omni.client.Client
    generate_request: Any  # sglang_omni.client.GenerateRequest
    sampling_params: Any  # sglang_omni.client.SamplingParams
    apply_gpu_compat_env_defaults: Callable[[], Any]
    tokenizer: Callable[[str], Any]  # the model's text tokenizer, for usage: model dir -> tokenizer
    profiler_control: Any  # sglang_omni.profiler.profiler_control.ProfilerControlClient
    event_recorder: Callable[[], Any]  # sglang_omni.profiler.event_recorder.get_recorder: this process's


def compile_cache_environment(cache_dir: str) -> dict[str, str]:
    """Everything a start compiles, under one directory: Inductor's graphs, Triton's kernels, FlashInfer's JIT
    workspace, sglang's own caches and the user cache directory (~/.cache otherwise, lost with the container)."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
        "FLASHINFER_WORKSPACE_BASE": cache_dir,  # FlashInfer's JIT cache (else ~/.cache/flashinfer)
        # sglang ignores XDG_CACHE_HOME: its caches (FlashInfer's autotune among them) stay under ~/.cache/sglang
        # otherwise, and its JIT-built kernels (minutes of a cold start) follow a variable of their own, not that
        # one: both set, in sglang's own layout (a copy of a ~/.cache/sglang fits as it is)
        "SGLANG_CACHE_DIR": os.path.join(cache_dir, "sglang"),
        "SGLANG_JIT_CACHE_DIR": os.path.join(cache_dir, "sglang", "jit"),
        "XDG_CACHE_HOME": cache_dir,
    }


def load_runtime() -> SglangRuntime:
    """sglang-omni's objects (imports torch, sglang and transformers: call it off the event loop)."""
    from sglang_omni.client import Client, GenerateRequest, SamplingParams
    from sglang_omni.config.manager import ConfigManager
    from sglang_omni.pipeline.mp_runner import MultiProcessPipelineRunner
    from sglang_omni.profiler.event_recorder import get_recorder
    from sglang_omni.profiler.profiler_control import ProfilerControlClient
    from sglang_omni.utils.gpu_compat import apply_gpu_compat_env_defaults
    from transformers import AutoTokenizer

    def tokenizer(model_dir: str) -> Any:
        return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)

    return SglangRuntime(
        ConfigManager, MultiProcessPipelineRunner, Client, GenerateRequest, SamplingParams,
        apply_gpu_compat_env_defaults, tokenizer, ProfilerControlClient, get_recorder,
    )  # fmt: skip


class SglangEngine:
    name = "sglang"

    def __init__(
        self,
        settings: SglangSettings,
        runtime_factory: Callable[[], SglangRuntime] | None = None,
        *,
        max_input_chars: int = MAX_INPUT_CHARS,
        max_concurrency: int | None = None,
        profiler_dir: str | None = None,
    ) -> None:
        """`settings` are the engine's own; of the service's it needs the longest input it accepts, the admission
        limit (the largest batch it warms up for; unset: max_running_requests) and where the pipeline's profiler
        writes (unset: no profiler)."""
        if not settings.model:
            raise ValueError("the sglang engine needs SPEECH_SGLANG__MODEL: a Qwen3-TTS model directory")
        self._settings = settings
        self._max_input_chars = max_input_chars
        self._max_concurrency = max_concurrency
        self._model = Qwen3TTSModel.from_dir(settings.model)
        self.model_id = settings.served_model_name or os.path.basename(os.path.normpath(settings.model))
        self._runtime_factory = runtime_factory or load_runtime
        self._profiler_dir = os.path.abspath(profiler_dir) if profiler_dir else None
        self._profiler: Any = None  # the stages' profiler control, once the pipeline runs (with a profiler_dir)
        self._pipeline = pipeline_settings(settings)
        # sglang-omni refuses requests past its talker's running + queued requests (64 + 64 by default) with "The
        # request queue is full.": room for every request the service admits at once, warm-up included
        admitted = max_concurrency or settings.max_running_requests
        queued_key = "tts_engine.engine.max_queued_requests"
        if queued_key not in self._pipeline and admitted > settings.max_running_requests + SGLANG_DEFAULT_QUEUE:
            self._pipeline[queued_key] = admitted - settings.max_running_requests
        self._runtime: SglangRuntime | None = None
        self._runner: Any = None
        self._client: Any = None
        self._tokenizer: Any = None
        self._watch: asyncio.Task[None] | None = None
        self._active: set[str] = set()
        self._ready = False
        self._detail = "not started"
        self._failed = False  # died or never started: a restart is the only way back
        self._start_phases: dict[str, float] = {}  # seconds per phase, once started

    @property
    def pipeline(self) -> dict[str, object]:
        """The sglang-omni pipeline settings the engine starts with, by their dotted names."""
        return dict(self._pipeline)

    # -- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        for key, value in ENGINE_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
        if self._settings.compile_cache_dir:
            caches = compile_cache_environment(self._settings.compile_cache_dir)
            for key, value in caches.items():
                os.environ.setdefault(key, value)  # a variable the operator set explicitly wins
            log.info("sglang compile caches", extra={key: os.environ[key] for key in caches})
        if self._profiler_dir:  # the stages' profiler reads its options (stacks, shapes) from SGLANG_TORCH_PROFILER_*
            os.environ.setdefault("SGLANG_TORCH_PROFILER_DIR", self._profiler_dir)
        self._set_up_process_start()
        started = time.perf_counter()
        self._detail = "starting sglang-omni (a cold start captures CUDA graphs and compiles the codec: minutes)"
        log.info("sglang engine starting", extra={"model": self._model.path, "pipeline": self._pipeline})
        try:
            runtime = self._runtime = await asyncio.to_thread(self._runtime_factory)
            phases: dict[str, float] = {"imports": round(time.perf_counter() - started, 1)}
            runtime.apply_gpu_compat_env_defaults()
            config = await asyncio.to_thread(self._config, runtime)
            self._tokenizer = await asyncio.to_thread(runtime.tokenizer, self._model.path)
            mark = time.perf_counter()
            # on this loop: the coordinator's sockets and queues belong to the loop that starts it
            self._runner = runtime.pipeline_runner(config)
            await self._runner.start(timeout=float(self._settings.start_timeout_s))
            phases["pipeline"] = round(time.perf_counter() - mark, 1)
            self._client = runtime.client(self._runner.coordinator)
            if self._profiler_dir:  # built once, with the pipeline: a run's start and stop share it
                self._profiler = runtime.profiler_control(dict(self._runner.stage_control_endpoints))
            self._watch = asyncio.create_task(self._watch_pipeline(), name="sglang-pipeline-watch")
            self._detail = "warming up"
            mark = time.perf_counter()
            await self._warm_up()
            phases["warmup"] = round(time.perf_counter() - mark, 1)
        except Exception as exc:
            self._died(f"failed to start: {exc}")
            log.exception("sglang engine failed to start")
            await self._stop_runner()
            raise
        self._ready = True
        self._detail = "ready"
        self._start_phases = phases
        extra = {"total_s": round(time.perf_counter() - started, 1), **{f"{k}_s": v for k, v in phases.items()}}
        log.info("sglang engine ready", extra=extra)

    def start_phases(self) -> dict[str, float]:
        """imports (sglang-omni, sglang, torch), pipeline (its process: model load, CUDA graphs, the codec's compile),
        warmup (every batch size admission can produce)."""
        return dict(self._start_phases)

    async def start_profile(self, run_id: str) -> str:
        """The PyTorch profiler on in the pipeline's process, as `sgl-omni serve`'s /start_profile does it (a control
        message to every stage): its trace goes to `<profiler_dir>/<run_id>/trace_pid<PID>_rank0.trace.json.gz`
        once stopped. sglang-omni 0.1.8 records the CPU operations of the stage's event-loop thread only; its kernels
        and CUDA calls from every thread."""
        folder = os.path.join(self._profiler_dir or "", run_id)
        await self._profiling().broadcast_start(run_id=run_id, trace_path_template=os.path.join(folder, "trace"))
        return folder

    async def start_timeline(self, run_id: str) -> str:
        """sglang-omni's request events instead of the PyTorch profiler, as `sgl-omni serve`'s /start_request_profile
        records them: the pipeline's stages, and the coordinator in this process, each append
        `events_<stage>_<pid>.jsonl` under `<profiler_dir>/<run_id>` until the run stops (`python -m
        sglang_omni.profiler <folder> --format table` lays them out request by request)."""
        folder = os.path.join(self._profiler_dir or "", run_id)
        profiling = self._profiling()
        assert self._runtime is not None  # a ready engine has its runtime
        self._runtime.event_recorder().start(run_id=run_id, event_dir=folder, stage="coordinator")
        await profiling.broadcast_start(run_id=run_id, trace_path_template="", event_dir=folder, enable_torch=False)
        return folder

    async def stop_profile(self, run_id: str | None) -> None:
        """Stops the run (None: whichever runs); the stages write their traces after this returns (the message is not
        answered)."""
        await self._profiling().broadcast_stop(run_id=run_id)
        if self._runtime is not None:  # the coordinator's events, where the run recorded a timeline
            self._runtime.event_recorder().stop(run_id=run_id)

    def _profiling(self) -> Any:
        if not self._profiler_dir:
            raise RuntimeError("the sglang engine was started without a profiler directory")
        if self._profiler is None or not self._ready:
            raise EngineUnavailable(f"the sglang engine is not ready ({self._detail})")
        return self._profiler

    def _set_up_process_start(self) -> None:
        """What the processes sglang-omni spawns set as they start (`PROCESS_START_PATH`): every variable its
        sitecustomize reads is set to this engine's settings, whatever an earlier start in this process left."""
        fixed_length, interval = self._settings.fixed_length, self._settings.switch_interval_ms
        os.environ[FIXED_LENGTH_VARIABLE] = "1" if fixed_length else "0"
        if interval:
            os.environ[SWITCH_INTERVAL_VARIABLE] = str(interval / 1000)
        else:
            os.environ.pop(SWITCH_INTERVAL_VARIABLE, None)
        path = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        if (fixed_length or interval) and PROCESS_START_PATH not in path:
            os.environ["PYTHONPATH"] = os.pathsep.join([PROCESS_START_PATH, *path])

    def _config(self, runtime: SglangRuntime) -> Any:
        manager = runtime.config_manager.from_model_path(self._model.path)
        return manager.merge_config(dict(self._pipeline))

    async def _watch_pipeline(self) -> None:
        """sglang-omni's runner checks its process every few seconds and fails the pipeline when it is gone."""
        try:
            await self._runner.wait_failed()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._ready:
                log.error("the sglang-omni pipeline died", extra={"error": str(exc)})
            self._died(f"the sglang-omni pipeline died: {exc}")

    def warmup_batch_sizes(self) -> list[int]:
        """The batch sizes admission can produce: powers of two up to the limit, and the limit itself."""
        limit = self._max_concurrency or self._settings.max_running_requests
        return warmup_batch_sizes(self._settings.warmup_batch_sizes, limit)

    async def _warm_up(self) -> None:
        """sglang-omni's own server sends no warm-up for Qwen3-TTS: its first burst was served one request at a time.
        With preprocessing in several processes, sglang-omni binds each request to the next copy in turn as it admits
        it: 2N more requests one after another, the first N of one kind and the next N of the other, give every copy
        both (a Base model's in-context and x-vector-only cloning) wherever the turn stands."""

        def synthesize(job: SynthesisJob) -> AsyncIterator[AudioChunk]:
            return self.synthesize(job, warming=True)

        await warm_up(self._model, self.warmup_batch_sizes(), synthesize, "sglang")
        copies = self._settings.preprocessing_processes
        if copies > 1:
            started, run = time.perf_counter(), uuid.uuid4().hex[:8]
            for position in range(2 * copies):  # in turn: a batch's requests would be admitted in any order
                job = warmup_job(self._model, f"warmup-{run}-copies-{position}", position // copies)
                async for _ in synthesize(job):
                    pass
            log.info("sglang warm-up", extra={"copies": copies, "seconds": round(time.perf_counter() - started, 2)})

    async def close(self) -> None:
        self._ready = False
        self._detail = "closed"
        started = time.perf_counter()
        await self._stop_runner()
        log.info("sglang engine stopped", extra={"seconds": round(time.perf_counter() - started, 2)})

    async def _stop_runner(self) -> None:
        if self._profiler is not None:
            with contextlib.suppress(Exception):
                await self._profiler.close()
            self._profiler = None
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(BaseException):
                await self._watch
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.stop()

    def health(self) -> EngineHealth:
        if self._ready and (dead := self._pipeline_dead()):
            self._died(f"the sglang-omni pipeline died: {dead}")
        return EngineHealth(ready=self._ready, detail=self._detail, failed=self._failed)

    def _pipeline_dead(self) -> str:
        """Why the pipeline is gone, or "": its process exited (seen at once, before the runner's own check), or the
        runner failed it."""
        runner = self._runner
        if runner is None:
            return ""
        if getattr(runner, "fatal_error", None) is not None:
            return str(runner.fatal_error)
        for group in getattr(runner, "groups", None) or ():
            if group.any_dead():
                return group.dead_summary()
        return ""

    def _died(self, detail: str) -> None:
        self._ready, self._detail, self._failed = False, detail, True

    # -- description ----------------------------------------------------------------------------------------------
    def voices(self) -> list[VoiceInfo]:
        return voice_infos(self._model)

    def languages(self) -> list[str]:
        return list(self._model.languages)

    def capabilities(self) -> EngineCapabilities:
        return capabilities(
            self._model,
            self._max_input_chars,
            max_concurrency=self._settings.max_running_requests,
            speed_range=(0.25, 4.0),  # the service's pitch-preserving time stretch; the model has no speed
            initial_chunk_frames=(1, stream_stride(self._pipeline)),
            prompt_modes=True,  # non_streaming_mode: false for Base only (check_sglang_job)
            speaker_embedding_dim=None,  # sglang-omni clones from reference audio only
            extra_params=True,  # its sampling fields only (check_sglang_job)
        )

    # -- synthesis ------------------------------------------------------------------------------------------------
    async def abort(self, request_id: str) -> None:
        """Tell sglang-omni to drop the request. Closing its stream aborts it already; this covers a caller that could
        not close it."""
        if request_id in self._active and self._client is not None:
            await self._client.abort(request_id)

    async def synthesize(self, job: SynthesisJob, warming: bool = False) -> AsyncIterator[AudioChunk]:
        if not warming and not self.health().ready:
            raise EngineUnavailable(f"the sglang engine is not ready ({self._detail})")
        check_job(job, self._model, MAX_NEW_TOKENS)
        check_sglang_job(job, fixed_length=self._settings.fixed_length)
        runtime, client = self._runtime, self._client
        assert runtime is not None and client is not None
        fields = await self._fields(job)
        request = runtime.generate_request(
            prompt=fields.prompt,
            sampling=runtime.sampling_params(**fields.sampling),
            extra_params=fields.extra_params,
            stream=True,
            output_modalities=["audio"],
            metadata=fields.metadata,
        )
        tokens_in, audio_tokens_in = input_tokens(self._tokenizer, job)
        stretch = StreamTimeStretch(self._model.sample_rate, job.speed) if job.speed != 1.0 else None
        self._active.add(job.request_id)
        if job.timing is not None:
            job.timing.mark("submitted")

        def counted(samples: np.ndarray, rate: int, frames: int, first: bool) -> AudioChunk:
            """A chunk with the frames generated since the last; the first carries the request's input too."""
            if first:
                return AudioChunk(samples, rate, tokens_in, frames, input_audio_tokens=audio_tokens_in)
            return AudioChunk(samples, rate, output_tokens=frames)

        stream = client.generate(request, request_id=job.request_id)
        first = True
        frames = 0  # generated, not yet reported (a stretch may hold a window's audio back a little)
        try:
            async for chunk in stream:
                audio = getattr(chunk, "audio_data", None)
                if audio is None:
                    continue
                samples = np.asarray(audio, dtype=np.float32).reshape(-1)
                if len(samples) == 0:
                    continue
                rate = int(chunk.sample_rate or self._model.sample_rate)
                frames += round(len(samples) / SAMPLES_PER_FRAME)
                if stretch is not None:  # FFmpeg's filter, off the loop every stream shares
                    samples = await asyncio.to_thread(stretch.process, samples)
                    if len(samples) == 0:
                        continue
                yield counted(samples, rate, frames, first)
                first, frames = False, 0
            if stretch is not None:  # what the filter still holds, with the frames not yet reported
                tail = await asyncio.to_thread(stretch.flush)
                if len(tail) or (frames and not first):
                    yield counted(tail, self._model.sample_rate, frames, first)
        except RuntimeError as exc:
            if dead := self._pipeline_dead():
                self._died(f"the sglang-omni pipeline died: {dead}")
                raise EngineUnavailable(self._detail) from exc
            if type(exc).__name__ == "QueueFullError":  # sglang-omni's own admission: only past the service's
                raise EngineUnavailable(f"sglang-omni is full: {exc}") from exc
            raise EngineError(f"sglang-omni failed the request: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # on early exit, the coordinator aborts the request itself
            self._active.discard(job.request_id)

    async def _fields(self, job: SynthesisJob) -> Any:
        """A clone's reference clip becomes a WAV in base64 off the event loop (up to 30 s of audio)."""
        if job.ref_audio is None:
            return request_fields(job, self._model)
        return await asyncio.to_thread(request_fields, job, self._model)
