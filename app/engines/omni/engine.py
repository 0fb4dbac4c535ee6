"""The omni engine: Qwen3-TTS on vllm-omni's `AsyncOmni` (talker -> shared-memory chunk connector -> code2wav).

Written against vllm-omni 0.30.0 with vllm 0.30.0. vllm-omni is imported only when the engine starts, after the
environment it needs is set, so the rest of the service runs without it. Requests are built the way vllm-omni's own
speech server builds them (see `app.engines.omni.requests`); audio is streamed as DELTA outputs. (0.26's talker could
send a stream's tail window twice under load, which a frame guard here used to drop; 0.30 counts the frames it has
sent per request and never sends one again, so every sample now goes to the caller as it comes.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    EngineError,
    EngineHealth,
    EngineUnavailable,
    SynthesisJob,
    TaskType,
    VoiceInfo,
)
from app.engines.omni import model_info, stage_memory
from app.engines.omni.cuda_mps import CudaMpsDaemon
from app.engines.omni.requests import (
    AudioOutputReader,
    PromptHelpers,
    build_prompt,
    codec_windows,
    connector_names,
    engine_probe_interval_s,
    sampling_params_for,
)
from app.engines.omni.stage_plugins import (
    fused_launch,
    lever_switch,
    model_registration,
    prompt_batch,
    timeline,
    window_doorbell,
)
from app.engines.omni.stage_plugins import talker_windows as service_talker_windows
from app.engines.omni.stage_plugins.fused_launch import FusedLaunch
from app.engines.qwen3_tts import (
    SAMPLES_PER_FRAME,
    Qwen3TTSModel,
    capabilities,
    check_job,
    input_tokens,
    voice_infos,
    warm_up,
    warmup_batch_sizes,
)
from app.settings import MAX_INPUT_CHARS

if TYPE_CHECKING:
    from app.settings import OmniSettings

log = logging.getLogger(__name__)
# vllm-omni 0.30's per-request summary tables (metrics/stats.py, in the server's process): its `init_logger(__name__)`
REQUEST_SUMMARY_LOGGER = "vllm_omni.metrics.stats"

# vllm-omni's stage processes are spawned and must find everything locally.
ENGINE_ENVIRONMENT = {
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    # vLLM's native top-k/top-p sampler: flashinfer's would compile itself with nvcc at first use, which a runtime
    # image does not have
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
}

# vllm-omni 0.30.0's code2wav decoder counts, when asked, the windows it decoded in a CUDA graph and those that fell
# back to eager (no graph of their batch size and length): one cumulative log line every so many decoder calls, from
# the code2wav stage process, which reads these at start. The service asks whenever the deploy profile turns the
# engine probes on, so that eager fallbacks show beside the probes' step times.
DECODER_GRAPH_STATS_ENVIRONMENT = {
    "VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS": "1",
    "VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS_LOG_EVERY": "500",  # about a line a minute at c=8, more under load
}


PROFILED_STAGES = (0, 1)  # the talker (with its code predictor) and code2wav
# How often a running engine's stages are asked whether each still has a live process (AsyncOmni.check_health, as
# `vllm serve`'s /health asks it): readiness fails within this of a stage's death, inside the fleet's 5 s.
STAGE_CHECK_INTERVAL_S = 0.5


def profiler_overrides(
    overrides: dict[str, dict[str, object]] | None, profiler_dir: str | None, stacks: bool = False
) -> dict[str, Any]:
    """The stage overrides, with vLLM's torch profiler configured in every stage where a profiler directory is given
    (vllm-omni 0.30 builds a stage's profiler from its `profiler_config`; a stage without one refuses to profile).
    Python stacks and operator shapes only with `stacks`: they multiply a trace's size and the profiler's own cost
    per step. A stage's own `profiler_config` among the overrides wins."""
    merged: dict[str, Any] = {stage: dict(values) for stage, values in (overrides or {}).items()}
    if profiler_dir:
        config = {
            "profiler": "torch",
            "torch_profiler_dir": profiler_dir,
            "torch_profiler_with_stack": stacks,
            "torch_profiler_record_shapes": stacks,
        }
        for stage in PROFILED_STAGES:
            merged.setdefault(str(stage), {}).setdefault("profiler_config", config)
    return merged


def _default_omni_factory(
    code2wav_scheduler: str = "",
    talker_windows: bool = False,
    code2wav_architecture: str = "",
    talker_architecture: str = "",
    **kwargs: Any,
) -> Any:
    import torch
    from vllm.model_executor.models import ModelRegistry
    from vllm_omni import AsyncOmni
    from vllm_omni.model_executor.models.qwen3_tts.pipeline import QWEN3_TTS_PIPELINE
    from vllm_omni.model_executor.models.registry import OmniModelRegistry
    from vllm_omni.plugins import load_omni_general_plugins

    if code2wav_scheduler or talker_windows or code2wav_architecture or talker_architecture:
        register_stage_plugins(code2wav_scheduler, talker_windows, code2wav_architecture, talker_architecture)
    # vllm-omni's plugins (the service's registers its models by name) run once a process, first thing in AsyncOmni:
    # run here, they cannot register by name again what model_info registers as a class
    load_omni_general_plugins()
    model_info.register_in_process(
        (ModelRegistry, OmniModelRegistry),
        stage_architectures(QWEN3_TTS_PIPELINE, code2wav_architecture, talker_architecture),
        torch.cuda.is_initialized,
    )
    return AsyncOmni(**kwargs)


# each lever a switch file may switch (settings.SWITCHABLE_LEVERS): the stage plugin whose variable turns it on
SWITCHABLE_PLUGINS = {
    "prompt_batch": prompt_batch,
    "frames_as_lists": service_talker_windows,
}
# the talker's window producer: vllm-omni's, and the service's around it (adaptive windows' first window)
UPSTREAM_TALKER_WINDOWS = "vllm_omni.model_executor.stage_input_processors.qwen3_tts.talker2code2wav_async_chunk"
TALKER_WINDOWS = f"{service_talker_windows.__name__}.{service_talker_windows.talker2code2wav_async_chunk.__name__}"


def register_stage_plugins(
    scheduler_path: str, talker_windows: bool = False, code2wav_architecture: str = "", talker_architecture: str = ""
) -> None:
    """Make vllm-omni's Qwen3-TTS pipeline run code2wav (stage 1) under the scheduler class at `scheduler_path` (if
    any), with `talker_windows` its talker (stage 0) hand windows on through the service's producer
    (`stage_plugins.talker_windows`: the profile fixes adaptive windows' first one), and with `code2wav_architecture`
    and `talker_architecture` code2wav and the talker as those registered models (`stage_plugins.model_registration`,
    which registers them here too, where AsyncOmni checks the stages' architectures; the stage processes register
    them through the entry point).

    vllm-omni 0.30 takes a stage's scheduler class and producer only from the pipeline's topology: a stage override or
    a deploy profile naming `scheduler_cls` is refused at start ("no structured config owner",
    `config/omni_config.py`). Its way for out-of-tree pipelines is `config.pipeline_registry.register_pipeline`, so the
    Qwen3-TTS pipeline is registered again, with both, in this process, where AsyncOmni resolves its stages; the stage
    processes load them by dotted path."""
    from vllm_omni.config.pipeline_registry import register_pipeline
    from vllm_omni.model_executor.models.qwen3_tts.pipeline import QWEN3_TTS_PIPELINE

    if code2wav_architecture or talker_architecture:
        model_registration.register()
    register_pipeline(
        pipeline_with_stage_plugins(
            QWEN3_TTS_PIPELINE, scheduler_path, talker_windows, code2wav_architecture, talker_architecture
        )
    )


def pipeline_with_stage_plugins(
    pipeline: Any,
    scheduler_path: str,
    talker_windows: bool = False,
    code2wav_architecture: str = "",
    talker_architecture: str = "",
) -> Any:
    """A copy of a (frozen) vllm-omni `PipelineConfig` whose stage 1 runs under the scheduler class at
    `scheduler_path` (empty: vllm-omni's) and as the model registered as `code2wav_architecture` (empty: the
    pipeline's own), whose stage 0 runs as the model registered as `talker_architecture` (empty: the pipeline's own),
    and, with `talker_windows`, whose stage 0, where it hands windows on through vllm-omni's Qwen3-TTS producer, does
    so through the service's (which calls vllm-omni's): a producer of another release or pipeline is left alone, and
    `talker_windows` is refused where no stage has vllm-omni's."""
    if (scheduler_path or code2wav_architecture) and not any(stage.stage_id == 1 for stage in pipeline.stages):
        raise ValueError(f"pipeline {pipeline.model_type!r} has no stage 1 to give a scheduler or a model")
    if talker_architecture and not any(stage.stage_id == 0 for stage in pipeline.stages):
        raise ValueError(f"pipeline {pipeline.model_type!r} has no stage 0 to give a talker model")
    producers = [getattr(stage, "async_chunk_process_next_stage_input_func", None) for stage in pipeline.stages]
    if talker_windows and UPSTREAM_TALKER_WINDOWS not in producers:
        # the service would accept a request's first-window size that vllm-omni's adaptive windows then override
        raise ValueError(
            "the service's talker producer (for SPEECH_OMNI__FRAMES_AS_LISTS, on by default: set it false; the "
            "deploy profile's codec_adaptive_first_frames; or the request timeline of a server with a profiler "
            f"directory) wraps {UPSTREAM_TALKER_WINDOWS}, but no stage of pipeline {pipeline.model_type!r} hands "
            "its windows on through it"
        )

    def plugged(stage: Any) -> Any:
        changes: dict[str, str] = {}
        if stage.stage_id == 1 and scheduler_path:
            changes["scheduler_cls"] = scheduler_path
        if stage.stage_id == 1 and code2wav_architecture:
            changes["model_arch"] = code2wav_architecture
        if stage.stage_id == 0 and talker_architecture:
            changes["model_arch"] = talker_architecture
        producer = getattr(stage, "async_chunk_process_next_stage_input_func", None)
        if talker_windows and producer == UPSTREAM_TALKER_WINDOWS:
            changes["async_chunk_process_next_stage_input_func"] = TALKER_WINDOWS
        return dataclasses.replace(stage, **changes) if changes else stage

    return dataclasses.replace(pipeline, stages=tuple(plugged(stage) for stage in pipeline.stages))


def stage_architectures(pipeline: Any, code2wav_architecture: str = "", talker_architecture: str = "") -> list[str]:
    """The model each stage of `pipeline` runs with the service's models in place: a stage's own, or the pipeline's
    where the stage names none (as vllm-omni assembles a stage's engine arguments, `config/stage_config.py`)."""
    plugged = pipeline_with_stage_plugins(
        pipeline, "", code2wav_architecture=code2wav_architecture, talker_architecture=talker_architecture
    )
    return [stage.model_arch or plugged.model_arch for stage in plugged.stages]


def set_or_unset(variable: str, value: str | None) -> None:
    """`variable` in this process's environment as `value`, or taken away where it is None."""
    if value is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = value


class OmniEngine:
    name = "omni"

    def __init__(
        self,
        settings: OmniSettings,
        omni_factory: Callable[..., Any] | None = None,
        *,
        max_input_chars: int = MAX_INPUT_CHARS,
        max_concurrency: int | None = None,
        profiler_dir: str | None = None,
    ) -> None:
        """`settings` are the engine's own; of the service's it needs the longest input it accepts (which its
        capabilities report), the admission limit (the largest batch it warms up for; unset: its talker's) and where
        its stages' profiler writes (unset: no profiler)."""
        if not settings.model:
            raise ValueError("the omni engine needs SPEECH_OMNI__MODEL: a Qwen3-TTS model directory")
        self._settings = settings
        self._max_input_chars = max_input_chars
        self._max_concurrency = max_concurrency
        self._model = Qwen3TTSModel.from_dir(settings.model)
        self.model_id = settings.served_model_name or os.path.basename(os.path.normpath(settings.model))
        self._factory = omni_factory or _default_omni_factory
        self._profiler_dir = os.path.abspath(profiler_dir) if profiler_dir else None
        # the request timeline's flag, which the stage processes look for (stage_plugins/timeline.py), and this
        # process's own recorder, which follows the engine's runs at once
        # (a dot first: no run's folder can be named so)
        self._timeline_flag = os.path.join(self._profiler_dir, ".timeline-active") if self._profiler_dir else None
        self._timeline = timeline.Recorder("server", None)
        self._timeline_run: str | None = None
        self._profiler_on = False  # a run of vllm-omni's torch profiler, started and not yet stopped
        self._omni: Any = None
        self._cumulative = False
        self._helpers: PromptHelpers | None = None
        # reference audio becomes the conditioning's list of floats here, one request at a time, off the event loop
        self._prompt_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qwen3-prompt")
        self._active: set[str] = set()
        self._ready = False
        self._detail = "not started"
        self._failed = False  # died or never started: a restart is the only way back
        self._watch: asyncio.Task[None] | None = None
        self._start_phases: dict[str, float] = {}  # seconds per phase, once started
        self._talker_batch, graph_cap = talker_limits(settings.deploy_config, settings.stage_overrides)
        if graph_cap is not None and graph_cap < self._talker_batch:
            log.warning(
                "the talker batches beyond its CUDA graphs: raise compilation_config.max_cudagraph_capture_size "
                "with max_num_seqs",
                extra={"max_num_seqs": self._talker_batch, "max_cudagraph_capture_size": graph_cap},
            )
        self._windows = codec_windows(settings.deploy_config)
        self._probes_on = engine_probe_interval_s(settings.deploy_config) > 0
        # a profile whose connector rings code2wav's window doorbell: the stages get an address, code2wav a worker
        # that listens (stage_plugins/window_doorbell.py)
        self._doorbell = window_doorbell.CONNECTOR_NAME in connector_names(settings.deploy_config)
        codec_load_format = ((settings.stage_overrides or {}).get("1") or {}).get("load_format", settings.load_format)
        if codec_load_format == "dummy":
            # vLLM's dummy loader never calls a model's load_weights, and vllm-omni 0.30.0's code2wav does its set-up
            # there: the codec decoder's CUDA graphs, its dtype cast, its chunk schedule and decode_* batching settings.
            log.warning(
                "random weights (load_format dummy): code2wav decodes eagerly, without the profile's decoder graphs "
                "and batching, so its timing is not that of real weights"
            )
        self._mps = (
            CudaMpsDaemon(
                only_alone=settings.cuda_mps == "auto",
                stages_share_a_gpu=stages_share_a_gpu(settings.deploy_config, settings.stage_overrides),
            )
            if settings.cuda_mps
            else None
        )

    # -- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        for key, value in ENGINE_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
        if self._settings.compile_cache_dir:
            caches = compile_cache_environment(self._settings.compile_cache_dir)
            for key, value in caches.items():
                os.environ.setdefault(key, value)  # a variable the operator set explicitly wins
            log.info("omni compile caches", extra={key: os.environ[key] for key in caches})
        if self._probes_on:
            for key, value in DECODER_GRAPH_STATS_ENVIRONMENT.items():
                os.environ.setdefault(key, value)
        # the stage processes, spawned below, read these (the switch interval at their plugin's registration, the fused
        # kernels' launch and the talker's levers as its model and window producer are made); this start's settings,
        # whatever an earlier start left
        interval_ms = self._settings.switch_interval_ms
        set_or_unset(
            model_registration.SWITCH_INTERVAL_VARIABLE, None if interval_ms is None else repr(interval_ms / 1000)
        )
        launch = FusedLaunch(self._settings.fused_kernels, self._settings.fused_dependent_launch)
        set_or_unset(fused_launch.VARIABLE, launch.environment_value())
        levers = self._settings.switchable_levers_on()
        for name, plugin in SWITCHABLE_PLUGINS.items():
            set_or_unset(plugin.VARIABLE, "1" if name in levers else None)
        set_or_unset(lever_switch.VARIABLE, self._settings.lever_switch_file or None)
        set_or_unset(timeline.FLAG_VARIABLE, self._timeline_flag)
        # this start's choice, whatever an earlier start in this process set
        summaries = logging.INFO if self._settings.request_summary_log else logging.WARNING
        logging.getLogger(REQUEST_SUMMARY_LOGGER).setLevel(summaries)
        # one address a server: two servers on a host each ring their own code2wav
        doorbell = f"speech-windows-{os.getpid()}-{os.urandom(4).hex()}" if self._doorbell else None
        set_or_unset(window_doorbell.ADDRESS_VARIABLE, doorbell)
        if self._timeline_flag is not None:
            timeline.stop(self._timeline_flag)  # an earlier server's run, never stopped, is not this one's
        started = time.perf_counter()
        self._detail = "starting vllm-omni (a cold start compiles and captures CUDA graphs: minutes)"
        log.info("omni engine starting", extra={"model": self._model.path, "variant": self._model.variant})
        try:
            self._check_stage_models()
            if self._mps is not None:
                await asyncio.to_thread(self._mps.start)  # before the stage processes exist: they inherit it
            # off the event loop: the kwargs read the deploy profile and may ask the GPU's driver (stage_memory)
            kwargs = await asyncio.to_thread(self._engine_kwargs)
            self._omni = await asyncio.to_thread(self._factory, **kwargs)
            if self._helpers is None:
                self._helpers = await asyncio.to_thread(load_prompt_helpers, self._omni, self._model.path)
            self._detail = "warming up"
            engine_s = round(time.perf_counter() - started, 1)
            log.info("omni engine started", extra={"start_s": engine_s})
            mark = time.perf_counter()
            await self._warm_up()
            warmup_s = round(time.perf_counter() - mark, 1)
        except Exception as exc:
            self._detail = f"failed to start: {exc}"
            self._failed = True
            log.exception("omni engine failed to start")
            raise
        self._ready = True
        self._detail = "ready"
        self._start_phases = {"engine": engine_s, "warmup": warmup_s}
        self._watch = asyncio.create_task(self._watch_stages(), name="omni-stage-watch")
        log.info("omni engine ready", extra={"total_s": round(time.perf_counter() - started, 1), "warmup_s": warmup_s})

    def start_phases(self) -> dict[str, float]:
        """engine (AsyncOmni: its stage processes, their imports, model load, compilation and CUDA graphs, one after
        another as vllm-omni starts them, then the prompt helpers), warmup (every batch size admission can produce)."""
        return dict(self._start_phases)

    async def start_profile(self, run_id: str) -> str:
        """The PyTorch profiler on in both stages (talker, code2wav), through vllm-omni's own call. One call a stage,
        each with a prefix of its own: vllm-omni names a run's folder `<time>_<prefix>` and both stages' processes
        are rank 0, so one prefix for both would put their traces in one file. Each stage writes
        `<profiler_dir>/<run_id>/<time>_stage<N>/` once stopped."""
        omni = self._profiling()
        self._stop_timeline()  # one run at a time
        folder = os.path.join(self._profiler_dir or "", run_id)
        await asyncio.gather(
            *(
                omni.start_profile(profile_prefix=os.path.join(folder, f"stage{stage}"), stages=[stage])
                for stage in PROFILED_STAGES
            )
        )
        self._profiler_on = True
        return folder

    async def start_timeline(self, run_id: str) -> str:
        """The request timeline instead of the profiler: this process, the talker's and code2wav's record when each
        request's windows passed them (stage_plugins/timeline.py), as `events_<role>_<pid>.jsonl` under
        `<profiler_dir>/<run_id>`, the stages from their next look at the flag on (within a quarter of a second);
        deploy/gpu/omni_timeline.py lays them out."""
        omni = self._profiling()
        assert self._timeline_flag is not None  # a profiler directory, or _profiling() refused
        if self._profiler_on:  # one run at a time: the profiler's run ends first
            await omni.stop_profile(stages=list(PROFILED_STAGES))
            self._profiler_on = False
        folder = os.path.join(self._profiler_dir or "", run_id)
        timeline.start(self._timeline_flag, folder)
        self._timeline.pin(folder)
        self._timeline_run = run_id
        return folder

    async def stop_profile(self, run_id: str | None) -> None:
        """Whichever run is on: a timeline's (the stages record until their next look at the flag), or the profiler's
        (vllm-omni's call returns once the traces are written; called too where this process knows of no run)."""
        if self._stop_timeline() and not self._profiler_on:
            return
        self._profiler_on = False
        await self._profiling().stop_profile(stages=list(PROFILED_STAGES))

    def _stop_timeline(self) -> bool:
        """Ends the timeline run, if one is on (True)."""
        if self._timeline_run is None or self._timeline_flag is None:
            return False
        timeline.stop(self._timeline_flag)
        self._timeline.pin(None)
        self._timeline_run = None
        return True

    def _profiling(self) -> Any:
        if not self._profiler_dir:
            raise RuntimeError("the omni engine was started without a profiler directory")
        if self._omni is None or not self._ready:
            raise EngineUnavailable(self._detail)
        return self._omni

    def _check_stage_models(self) -> None:
        """The service's stage models, where the settings name them, within the stage processes' reach."""
        named = [
            (setting, model)
            for setting, model in (
                ("SPEECH_OMNI__CODE2WAV_MODEL", self._settings.code2wav_model),
                ("SPEECH_OMNI__TALKER_MODEL", self._settings.talker_model),
            )
            if model != "vllm-omni"
        ]
        unreachable = model_registration.unreachable_reason() if named else None
        if unreachable is not None:
            which = ", ".join(f"{setting}={model}" for setting, model in named)
            instead = "set it to vllm-omni" if len(named) == 1 else "set each to vllm-omni"
            raise RuntimeError(f"{which}: {unreachable}; or {instead}")

    def _engine_kwargs(self) -> dict[str, Any]:
        settings = self._settings
        kwargs: dict[str, Any] = {"model": self._model.path, "log_stats": settings.engine_stats}
        if settings.deploy_config:
            kwargs["deploy_config"] = settings.deploy_config
        overrides = profiler_overrides(settings.stage_overrides, self._profiler_dir, settings.profiler_stacks)
        if settings.parallel_stage_init:
            kwargs["parallel_stage_init"] = True
            # vllm-omni would count code2wav's concurrent load as the talker's memory (stage_memory.py)
            budget = stage_memory.parallel_start_budget(
                stage_settings(settings.deploy_config, settings.stage_overrides, 0),
                stage_settings(settings.deploy_config, settings.stage_overrides, 1),
                self._model.path,
            )
            if budget is not None:
                overrides.setdefault("0", {})["kv_cache_memory_bytes"] = budget
        # a worker the operator named for a stage, in the profile or the overrides, is left as it is (code2wav's: its
        # doorbell unheard; either: its steps off the request timeline)
        named = {
            stage
            for stage in (0, 1)
            if stage_settings(settings.deploy_config, settings.stage_overrides, stage).get("worker_cls")
        }
        if self._doorbell and 1 not in named:
            overrides.setdefault("1", {})["worker_cls"] = window_doorbell.WORKER_CLASS
        if self._profiler_dir:  # the stages' steps on the request timeline (the doorbell's worker records them too)
            for stage, worker in ((0, timeline.TALKER_WORKER), (1, timeline.CODE2WAV_WORKER)):
                if stage not in named:
                    overrides.setdefault(str(stage), {}).setdefault("worker_cls", worker)
        if overrides:
            kwargs["stage_overrides"] = overrides
        if settings.code2wav_scheduler:
            kwargs["code2wav_scheduler"] = settings.code2wav_scheduler  # for the factory, not AsyncOmni
        if settings.code2wav_model != "vllm-omni":  # for the factory too
            kwargs["code2wav_architecture"] = model_registration.CODE2WAV_ARCHITECTURES[settings.code2wav_model]
        if settings.talker_model != "vllm-omni":  # for the factory too
            kwargs["talker_architecture"] = model_registration.TALKER_ARCHITECTURES[settings.talker_model]
        if self._windows.first_fixed or self._profiler_dir or settings.frames_as_lists:
            # for the factory: the service's talker producer sets the first window, records each window it hands on
            # while a request timeline runs, and keeps the frames as lists
            kwargs["talker_windows"] = True
        if settings.load_format:
            kwargs["load_format"] = settings.load_format
        kwargs["stage_init_timeout"] = settings.stage_init_timeout_s
        kwargs["init_timeout"] = settings.init_timeout_s
        return kwargs

    def use_helpers(
        self,
        delta_defaults: list[Any],
        estimator: Callable[..., int],
        tokenizer: Any,
        tokens_input: Callable[..., dict[str, Any]],
    ) -> None:
        """Install what `load_prompt_helpers` would import from vllm / vllm-omni (for an engine built by a factory)."""
        self._helpers = PromptHelpers(delta_defaults, estimator, tokenizer, tokens_input)

    def warmup_batch_sizes(self) -> list[int]:
        """The batch sizes admission can produce: powers of two up to the limit, and the limit itself."""
        return warmup_batch_sizes(self._settings.warmup_batch_sizes, self._max_concurrency or self._talker_batch)

    async def _warm_up(self) -> None:
        await warm_up(self._model, self.warmup_batch_sizes(), lambda job: self.synthesize(job, warming=True), "omni")

    async def _watch_stages(self) -> None:
        """vllm-omni 0.30 keeps its engine up when a stage's last process dies: its orchestrator evicts the process,
        fails the requests routed through that stage, and `errored` stays false (it means the orchestrator thread
        died). With no request in flight to fail, only `check_health` says that a stage has no live process left.
        Asked twice a second, so that a replica whose code2wav died leaves the pool at once instead of refusing each
        request sent to it. Any other failure of the check is logged once (until it passes again) and not taken for
        a death."""
        failing = False
        while True:
            await asyncio.sleep(STAGE_CHECK_INTERVAL_S)
            if not self._ready:
                return  # closed, or already dead by a request that failed
            try:
                await self._omni.check_health()
            except Exception as exc:
                if _is_engine_dead(exc):
                    log.error("a vllm-omni stage died", extra={"error": str(exc)})
                    self._died(f"the vllm-omni engine died: {exc}")
                    return
                if not failing:
                    log.warning("vllm-omni's health check failed", extra={"error": repr(exc)})
                failing = True
            else:
                failing = False

    async def close(self) -> None:
        self._ready = False
        self._detail = "closed"
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(BaseException):
                await self._watch
        try:
            if self._omni is not None:
                await asyncio.to_thread(self._omni.shutdown)
        finally:
            if self._mps is not None:
                await asyncio.to_thread(self._mps.stop)  # its clients, the stage processes, are gone (or dead)
            self._prompt_executor.shutdown(wait=False, cancel_futures=True)

    def health(self) -> EngineHealth:
        if self._ready and self._omni is not None and getattr(self._omni, "errored", False):
            self._died("the vllm-omni engine died")
        return EngineHealth(ready=self._ready, detail=self._detail, failed=self._failed)

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
            max_concurrency=self._talker_batch,
            speed_range=(1.0, 1.0),  # Qwen3-TTS has no speed control (vllm-omni refuses other speeds when streaming)
            # a first chunk larger than the steady windows only delays the first audio; under a ramp or adaptive
            # windows vllm-omni ignores a request's first-chunk size, so the field is refused rather than dropped
            initial_chunk_frames=None if self._windows.request_first_size_ignored else (1, self._windows.steady),
            prompt_modes=True,
            # a Base checkpoint clones from a precomputed x-vector as wide as its talker (vllm-omni 0.30's check)
            speaker_embedding_dim=self._embedding_dim(),
            extra_params=True,
        )

    def _embedding_dim(self) -> int | None:
        return (self._model.hidden_size or None) if TaskType.BASE in self._model.task_types else None

    # -- synthesis ------------------------------------------------------------------------------------------------
    async def abort(self, request_id: str) -> None:
        """Tell vllm-omni to drop the request. The stream that consumed it has normally closed its generator already,
        which makes vllm-omni's generate() abort the request itself; this covers a caller that could not close it."""
        if request_id in self._active:
            await self._omni.abort(request_id)

    async def synthesize(self, job: SynthesisJob, warming: bool = False) -> AsyncIterator[AudioChunk]:
        if not warming and not self.health().ready:
            raise EngineUnavailable(f"the omni engine is not ready ({self._detail})")
        check_job(job, self._model)
        assert self._helpers is not None
        prompt = await build_prompt(self._helpers, self._model, job, self._prompt_executor)
        params = sampling_params_for(job, self._helpers.delta_defaults, fixed_length=self._settings.fixed_length)
        reader = AudioOutputReader(cumulative=self._cumulative)
        self._active.add(job.request_id)
        if job.timing is not None:
            job.timing.mark("submitted")
        self._timeline.record("submitted", job.request_id)
        outputs = self._omni.generate(
            prompt=prompt, request_id=job.request_id, sampling_params_list=params, output_modalities=["audio"]
        )
        tokens_in, audio_tokens_in = input_tokens(self._helpers.tokenizer, job)
        input_tokens_reported = False
        try:
            async for output in outputs:
                if getattr(output, "error", None):
                    raise EngineError(f"vllm-omni failed the request: {output.error}")
                samples = reader.read(output)
                if samples is None or len(samples) == 0:
                    continue
                self._timeline.record("audio", job.request_id)  # each window's audio back: the n-th, the n-th decoded
                frames = len(samples) // SAMPLES_PER_FRAME
                rate = reader.sample_rate or self._model.sample_rate
                if input_tokens_reported:
                    yield AudioChunk(samples, rate, output_tokens=frames)
                else:  # the request's input, with its first audio
                    input_tokens_reported = True
                    self._timeline.record("first_audio", job.request_id)
                    yield AudioChunk(samples, rate, tokens_in, frames, input_audio_tokens=audio_tokens_in)
        except Exception as exc:
            if _is_engine_dead(exc):
                self._died(f"the vllm-omni engine died: {exc}")
                raise EngineUnavailable(self._detail) from exc
            raise
        finally:
            with contextlib.suppress(Exception):
                await outputs.aclose()  # on early exit, generate() aborts the engine request itself
            self._active.discard(job.request_id)  # after: abort() can still reach a request whose close was cut


def compile_cache_environment(cache_dir: str) -> dict[str, str]:
    """Everything compiled at start-up kept under one directory, so that persisting it lets a restart skip the work:
    vLLM's torch.compile artifacts and model-info cache (VLLM_CACHE_ROOT), Inductor's graphs (vLLM moves them under
    its own root for the talker, but not always before other compilations such as the code predictor's) and Triton's
    kernels (otherwise in ~/.triton, lost with the container)."""
    return {
        "VLLM_CACHE_ROOT": cache_dir,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
    }


def load_prompt_helpers(omni: Any, model_dir: str) -> PromptHelpers:
    """What a request's prompt needs, from a started `AsyncOmni` and the model directory (imports vllm)."""
    from transformers import AutoTokenizer
    from vllm.inputs import tokens_input
    from vllm_omni.entrypoints.utils import coerce_param_message_types
    from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import Qwen3TTSPromptEmbedsBuilder

    return PromptHelpers(
        coerce_param_message_types(list(omni.default_sampling_params_list), True),
        Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information,
        AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True, padding_side="left"),
        tokens_input,
    )


VLLM_OMNI_DEFAULT_MAX_NUM_SEQS = 64  # stage 0 of vllm-omni 0.30.0's own qwen3_tts.yaml


def stage_settings(
    deploy_config: str | None, stage_overrides: dict[str, dict[str, object]] | None, stage_id: int = 0
) -> dict:
    """A stage's settings (0: the talker, 1: code2wav): the deploy profile's, with the stage overrides on top."""
    stage: dict = {}
    if deploy_config and os.path.exists(deploy_config):
        import yaml

        with open(deploy_config, encoding="utf-8") as f:
            stages = (yaml.safe_load(f) or {}).get("stages") or []
        stage = dict(next((s for s in stages if s.get("stage_id") == stage_id), {}))
    return {**stage, **((stage_overrides or {}).get(str(stage_id)) or {})}


def stages_share_a_gpu(deploy_config: str | None, stage_overrides: dict[str, dict[str, object]] | None) -> bool:
    """Whether the talker and code2wav may run on one GPU: their `devices` (the profile's, or the overrides') name one
    in common, or either names none (vllm-omni's own profiles put both on the first)."""
    named = [str(stage_settings(deploy_config, stage_overrides, stage).get("devices") or "") for stage in (0, 1)]
    talker, code2wav = ({entry.strip() for entry in devices.split(",") if entry.strip()} for devices in named)
    return not talker or not code2wav or bool(talker & code2wav)


def talker_limits(
    deploy_config: str | None, stage_overrides: dict[str, dict[str, object]] | None
) -> tuple[int, int | None]:
    """Stage 0's max_num_seqs (the talker's batch, which bounds how many syntheses run at once) and its largest
    CUDA graph in tokens (a decode batch's size), where the profile sets one: its list of sizes, else their cap."""
    stage = stage_settings(deploy_config, stage_overrides)
    compilation = stage.get("compilation_config")
    if not isinstance(compilation, dict):
        compilation = {}
    sizes = compilation.get("cudagraph_capture_sizes")
    cap = max(sizes) if sizes else compilation.get("max_cudagraph_capture_size")
    return int(stage.get("max_num_seqs", VLLM_OMNI_DEFAULT_MAX_NUM_SEQS)), None if cap is None else int(cap)


def _is_engine_dead(exc: BaseException) -> bool:
    return any(cls.__name__ in ("EngineDeadError", "OmniEngineDeadError") for cls in type(exc).__mro__)
