"""The one settings object. Every field is also an environment variable: `SPEECH_<FIELD>` (e.g. SPEECH_PORT); an
engine's own settings are grouped under its name, `SPEECH_<ENGINE>__<FIELD>` (e.g. SPEECH_OMNI__DEPLOY_CONFIG).

The engine settings were flat fields once (SPEECH_DEPLOY_CONFIG, SPEECH_EMBEDDED_WORKERS, ...). Those names are still
read, as environment variables and as keyword arguments, and logged as deprecated at start (`FLAT_NAMES`); where both
names are set, the grouped one wins."""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from app.audio.fetch import MAX_REFERENCE_BYTES, FetchPolicy
from app.text.hygiene import text_problem
from app.voices import MAX_VOICE_NAME_CHARS

log = logging.getLogger(__name__)

EngineName = Literal["auto", "embedded", "omni", "sglang"]
ENV_PREFIX = "SPEECH_"
NESTED_DELIMITER = "__"
WS_MAX_MESSAGE_BYTES = 128 * 1024  # a WebSocket message's default limit
MIN_MESSAGE_BYTES = 1024  # the lowest limit of a request's body or a WebSocket message
MAX_INPUT_CHARS = 4096  # the longest `input` OpenAI accepts, and this service's default and upper bound

# OpenAI's voice names (every one its Python SDK offers), so OpenAI client code runs unchanged. The empty target means
# "the engine's default voice".
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "onyx", "nova", "sage", "shimmer", "verse"
)  # fmt: skip

# The engine settings' old flat names (a field of `Settings` once, `SPEECH_<NAME>` in the environment) -> the engine
# group and field that took them over.
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "embedded_workers": ("embedded", "workers"),
    "embedded_threads_per_worker": ("embedded", "threads_per_worker"),
    "model": ("omni", "model"),
    "served_model_name": ("omni", "served_model_name"),
    "deploy_config": ("omni", "deploy_config"),
    "stage_overrides": ("omni", "stage_overrides"),
    "load_format": ("omni", "load_format"),
    "compile_cache_dir": ("omni", "compile_cache_dir"),
    "omni_stage_init_timeout_s": ("omni", "stage_init_timeout_s"),
    "omni_init_timeout_s": ("omni", "init_timeout_s"),
    "omni_warmup_batch_sizes": ("omni", "warmup_batch_sizes"),
    "omni_sentence_pipeline": ("omni", "sentence_pipeline"),
    "omni_code2wav_scheduler": ("omni", "code2wav_scheduler"),
    "omni_cuda_mps": ("omni", "cuda_mps"),
    "omni_fixed_length": ("omni", "fixed_length"),
}

# Classes a setting names by dotted path that have moved: old path -> new path. A setting given the old path gets the
# new one (the class is the same), and the variable naming it is logged as deprecated at start, as the flat names are.
MOVED_PATHS: dict[str, str] = {
    "app.engines.omni_code2wav_scheduler.FirstAudioFirstScheduler": (
        "app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler"
    ),
}


def flat_env_name(flat: str) -> str:
    return f"{ENV_PREFIX}{flat}".upper()


def nested_env_name(group: str, field: str) -> str:
    return f"{ENV_PREFIX}{group}{NESTED_DELIMITER}{field}".upper()


def _deprecated(flat: str) -> str:
    """The sentence every field with an old flat name ends its description with (the settings page shows it)."""
    return f" Deprecated name, still read: `{flat_env_name(flat)}`."


def _list_from_text(value: object) -> object:
    """A list setting given as text: a JSON list, or a comma list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _switch_interval_field(where: str, why: str) -> Any:
    """Python's thread switch interval in `where` (the server's process, or an engine's own processes), the same
    bounds everywhere."""
    return Field(
        None,
        ge=0.01,
        le=1000,
        allow_inf_nan=False,
        description=f"Python's thread switch interval in {where} (sys.setswitchinterval): how long a thread that "
        f"wants the interpreter's lock waits before the one holding it must let go. {why} Default: Python's 5 ms.",
    )


def user_voice_store(env: Mapping[str, str] = os.environ) -> str:
    """Where a user's data belongs (the XDG base directories): $XDG_DATA_HOME/speech-service/voices, else
    ~/.local/share/speech-service/voices. Never the working directory, which a service may not be able to write."""
    data_home = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):  # unset, empty or relative: the spec says to ignore it
        data_home = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return os.path.join(data_home, "speech-service", "voices")


class SettingsGroup(BaseModel):
    """A group of settings (an engine's own): a key that is none of its settings is refused, whether the group is
    given whole (SPEECH_<GROUP> as JSON) or key by key (SPEECH_<GROUP>__<KEY>), as a misspelt name would otherwise
    leave the server on the default the operator meant to change."""

    model_config = ConfigDict(extra="forbid")


class EmbeddedSettings(SettingsGroup):
    """The embedded engine (hibari-tts on the CPU): `SPEECH_EMBEDDED__<FIELD>`."""

    workers: int = Field(
        default_factory=lambda: max(1, os.cpu_count() or 1),
        ge=1,
        description="Synthesis threads, each with its own model instance (default: CPU cores)."
        + _deprecated("embedded_workers"),
    )
    threads_per_worker: int = Field(
        1, ge=1, description="onnxruntime threads per worker." + _deprecated("embedded_threads_per_worker")
    )


# the levers of the service's talker (each a switch of OmniSettings, none in force with vllm-omni's talker)...
TALKER_LEVERS = ("prompt_batch",)
# ...and every lever a lever switch file may turn on and off in a running server: those, and the talker's window
# producer's (app/engines/omni/stage_plugins/lever_switch.py's LEVERS, tests/unit/test_lever_switch.py)
SWITCHABLE_LEVERS = (*TALKER_LEVERS, "frames_as_lists")


class OmniSettings(SettingsGroup):
    """The omni engine (Qwen3-TTS on vllm-omni, on a GPU): `SPEECH_OMNI__<FIELD>`."""

    model: str | None = Field(None, description="Qwen3-TTS model directory." + _deprecated("model"))
    served_model_name: str | None = Field(
        None, description="Model id in the API (default: dir name)." + _deprecated("served_model_name")
    )
    deploy_config: str | None = Field(
        None,
        description="vllm-omni deploy profile (YAML), e.g. deploy/vllm-omni/customvoice.yaml; unset: vllm-omni's "
        "default profile for the model." + _deprecated("deploy_config"),
    )
    stage_overrides: dict[str, dict[str, object]] | None = Field(
        None,
        description='Per-stage engine arguments as JSON, e.g. {"0": {"max_num_seqs": 32}} (sampling defaults are set '
        "in the deploy profile)." + _deprecated("stage_overrides"),
    )
    load_format: str | None = Field(
        None, description="vLLM load_format (`dummy`: random weights)." + _deprecated("load_format")
    )
    compile_cache_dir: str | None = Field(
        None,
        description="One directory for every compile cache (vLLM, Inductor, Triton); persist it and a restart skips "
        "compilation (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR or TRITON_CACHE_DIR set explicitly win)."
        + _deprecated("compile_cache_dir"),
    )
    stage_init_timeout_s: int = Field(
        900, ge=30, description="Seconds allowed per stage start." + _deprecated("omni_stage_init_timeout_s")
    )
    init_timeout_s: int = Field(
        1200, ge=30, description="Seconds allowed for the whole start." + _deprecated("omni_init_timeout_s")
    )
    engine_stats: bool = Field(
        True,
        description="vllm-omni's statistics (its log_stats): its own Prometheus families on /metrics (`vllm_omni:*`, "
        "`vllm:*`: requests running and waiting per stage, KV cache use; the dashboard's engine panels) "
        "and, with them, a summary of every finished request that vllm-omni 0.30 formats as log tables on the "
        "server's event loop (3-5% of that loop's time at c=16 on an H200: 3-4 ms per request that every stream "
        "waits behind). false: neither summary nor the `vllm:*` families, nor vllm-omni's audio, stage and transfer "
        "figures (its running, waiting and latency families stay). Measured with the GPUs swapped on two H200s "
        "(benchmarks/gpu/2026-11-30-h200x2-engine-stats-swapped/): off took the wait out of a second wave's first "
        "audio (up to 37-42 ms in the server against 118-163) and did 1.01-1.04x the work at a sustained c=32, but "
        "more streams ran dry in every burst of 32 (27-47% against 11-23%): the wait had held each second-wave "
        "stream's first audio back while its next window came. On by default.",
    )
    request_summary_log: bool = Field(
        False,
        description="With ENGINE_STATS on, write vllm-omni's summary tables of every finished request to the log "
        "(vllm-omni 0.30 logs them at INFO: about 4 kB of plain-text tables a request, most of a busy server's "
        "log). Off: its statistics logger (`vllm_omni.metrics.stats`) logs warnings only; the tables are still "
        "formatted (vllm-omni formats them before it logs) and the statistics and their families stay as "
        "ENGINE_STATS says.",
    )
    profiler_stacks: bool = Field(
        False,
        description="With the server's profiler directory (SPEECH_PROFILER_DIR): both stages' PyTorch profiler "
        "records Python stacks and operator shapes too (vLLM's torch_profiler_with_stack and _record_shapes), so "
        "that a trace says which code ran each operation (deploy/gpu/trace_summary.py names the innermost Python "
        "function around each of the first step's longest ones). Traces grow several times over and each profiled "
        "step costs more: for a window of a few steps (a request of a few frames; deploy/gpu/lever-starts.sh "
        "PROFILE_EXTRA_BODY). A whole 8-s request's, written and summarised, took more than six minutes after the "
        "stop on an H200.",
    )
    parallel_stage_init: bool = Field(
        False,
        description="Start the stages (talker, codec decoder) at once instead of one after the other: vllm-omni's "
        "parallel_stage_init, which admits the stages' memory budgets on their GPU before either starts and locks "
        "each stage's memory measurement. Only for a GPU this server has to itself. With both stages on one GPU the "
        "talker's KV cache is then sized by the service (its gpu_memory_utilization share less its weights and 1 GiB), "
        "not measured: vllm-omni would count code2wav's concurrent load as the talker's memory. A "
        "kv_cache_memory_bytes of its own wins.",
    )
    warmup_batch_sizes: Annotated[list[int] | None, NoDecode] = Field(
        None,
        description="Batch sizes warmed up before /ready (each new size costs a JIT compile). "
        "Default: 1, 2, 4, ... up to the admission limit." + _deprecated("omni_warmup_batch_sizes"),
    )
    sentence_pipeline: bool = Field(
        False,
        description="Speak long text sentence by sentence (as the embedded engine always does)."
        + _deprecated("omni_sentence_pipeline"),
    )
    code2wav_scheduler: str = Field(
        "app.engines.omni.stage_plugins.code2wav_scheduler.FirstAudioFirstScheduler",
        description="code2wav (stage 1) scheduler class by dotted path; empty = vllm-omni's own. vllm-omni 0.30 "
        "refuses a scheduler_cls in SPEECH_OMNI__STAGE_OVERRIDES: set this instead."
        + _deprecated("omni_code2wav_scheduler"),
    )
    code2wav_model: Literal["vllm-omni", "service", "service-folded"] = Field(
        "service-folded",
        description="The codec decoder's model (stage 1): one of the service's, vllm-omni's Qwen3TTSCode2Wav kept off "
        "the slow kernel cuDNN's heuristics pick for some dilated convolutions, or `vllm-omni`'s own. "
        "`service-folded` (the default) computes each dilated convolution as an undilated one over its input's "
        "phases; `service` makes its CUDA graphs from cuDNN algorithms timed at start (cudnn.benchmark; a minute and "
        "a half more start on an H200). app/engines/omni/stage_plugins/code2wav_model.py; registered in the stage "
        "processes by the package's vllm_omni.general_plugins entry point, so the service must be installed, as its "
        "image is.",
    )
    talker_model: Literal["vllm-omni", "service", "fused", "compiled-once"] = Field(
        "fused",
        description="The talker's model (stage 0), vllm-omni's talker with one of four code predictors. `fused` (the "
        "default): the frame's 16 positions run once each over a key/value cache instead of recomputing the frame's "
        "whole sequence at each of its 15 steps (16 rows a frame instead of 255), each layer in five Triton kernels "
        "of the service's instead of eleven, uncompiled, its top-k threshold found by selection instead of a sort "
        "(`fused_kernels` and `fused_dependent_launch` say how its kernels launch). Against vllm-omni's, each on both "
        "of two H200s: 1.06–1.28× the requests a second at every load level, the time to uninterrupted audio the "
        "same or lower but in bursts of 32 (which went with the pair's side), a warm start of 49.6–53.1 s against "
        "67.3, its warm-up 9 s against 86 cold (benchmarks/gpu/2026-11-30-h200x2-fused-default/). `service`: the same "
        "predictor in PyTorch, compiled. Both: codes equal to vllm-omni's in float32 (on the CPU and on an H200), a "
        "draw from the same distribution in bfloat16. `vllm-omni`: vllm-omni's own. `compiled-once`: vllm-omni's "
        "with its code predictor compiled for a batch of 1 and for any larger batch instead of once per batch bucket "
        "(its warm-up 24 s against vllm-omni's 111 on an H200, but slower under load), its maths unchanged. "
        "docs/deploy.md; app/engines/omni/stage_plugins/talker_model.py; registered in the stage processes by the "
        "package's vllm_omni.general_plugins entry point, so the service must be installed, as its image is.",
    )
    fused_kernels: Literal["as-tuned", "split", "prefetch"] = Field(
        "prefetch",
        description="With `talker_model` `fused`, how its projection kernels are cut, in launches of up to 16 rows in "
        "bfloat16 (16 streams; 8 in a frame's first pass, which takes two positions at once; past that the "
        "tuned kernels' own launches, bit for bit, and in float32 their tiles): each reduction split so that "
        "each program loads its whole share of the weights before its input (`prefetch`, the default); their "
        "tiles as each kernel's own timing chose (`as-tuned`); or each reduction split across about as many "
        "programs as an H200 has SMs, the last of a block's programs summing their float32 partials in order "
        "(`split`, as sglang-omni's predictor cuts its own). Alone on an H200 at one stream, with dependent "
        "launches, prefetch took 0.78–0.79× and split 1.03× the as-tuned predictor's GPU time a frame "
        "(benchmarks/gpu/2026-11-30-h200x2-fused-launch/). In the server, prefetch with dependent launches "
        "started in turn with as-tuned on one H200, three starts each, under CUDA MPS: at one stream "
        "0.83–0.95× the time end to end on the load tool and 1.13–1.19× the requests a second on vllm-omni's "
        "benchmark; at 8 streams 1.22× the benchmark's and 1.17× the load tool's steady requests a second "
        "(medians), with no longer gap; at 32 streams level (the same kernels there) "
        "(benchmarks/gpu/2026-12-04-h200-omni-prefetch-six-starts/). "
        "app/engines/omni/stage_plugins/predictor_kernels.py.",
    )
    fused_dependent_launch: bool = Field(
        True,
        description="With `talker_model` `fused`, launch its kernels as programmatic dependent launches (Hopper "
        "GPUs and later; elsewhere ordinary launches): each starts while the one before it finishes and waits only "
        "where it first reads what that one wrote; in launches of up to 16 rows (one row block of the kernels: 16 "
        "streams, 8 in a frame's first pass, which takes two positions at once): past that, where prefetch with them "
        "lost bursts of 32 by its dependent launches alone (benchmarks/gpu/2026-12-01-h200-omni-fused-prefetch-in-"
        "turn/), the kernels launch as they do without. Alone on an H200 at one stream 0.95× the predictor's GPU time "
        "a frame with the as-tuned kernels; see `fused_kernels` for them with prefetch, the default.",
    )
    prompt_batch: bool = Field(
        True,
        description="With the service's talker (`talker_model` service, fused or compiled-once; with vllm-omni's "
        "talker it does not apply, and setting it true there is an error), build the "
        "CustomVoice and VoiceDesign prompts a talker step takes in together, before that step's per-request "
        "preprocessing: one tokenizer call and one copy of their ids to the GPU (from pinned memory, waiting for "
        "nothing) for all of them, and the part of each prompt that depends only on the speaker and the language "
        "(role header, codec tags, speaker embedding) made once and kept, where vllm-omni makes each prompt alone, two "
        "waiting copies and some twenty kernels each. The same tensors, bit for bit. Switched in rounds on one H200 "
        "against the profile without it, a burst of 32 streams' steps that took in prompts lasted 13–16 ms p50 "
        "against 20–32, its time to uninterrupted audio p95 174 and 209 ms against 245–282, with 1–2% of streams "
        "run dry against 12–18% (benchmarks/gpu/2026-12-01-h200-omni-levers-switched/). "
        "app/engines/omni/stage_plugins/prompt_batch.py.",
    )
    frames_as_lists: bool = Field(
        True,
        description="Keep each stream's codec frames in the talker's process as lists of their codes, as vllm-omni's "
        "connector runtime declares them, where vllm-omni 0.30's Qwen3-TTS producer keeps each frame as a tensor and "
        "then builds every window's codes element by element: a steady window's 400 codes each read as a tensor of its "
        "own, on the data plane's thread, holding the GIL the talker's step loop waits for. The same code tensors for "
        "the same windows; the service's window producer runs in place of vllm-omni's (it calls vllm-omni's), with "
        "either talker. It acts where vllm-omni builds a step's windows together: vLLM's second model runner with "
        "`async_chunk`, as in the shipped profiles. On one H200 its producer took 0.78 ms a step at p95 against "
        "vllm-omni's 2.69 at 32 streams, and switched in rounds against the profile without it, "
        "one stream's time to uninterrupted audio p95 was 40 and 41 ms against 45–53, bursts of 8 87 and 88 against "
        "99–135, vllm-omni's benchmark at 32 streams 20.94 and 20.56 req/s against 15.82–20.36, with 32 streams' "
        "figures split (benchmarks/gpu/2026-12-01-h200-omni-frames-as-lists/). "
        "app/engines/omni/stage_plugins/talker_windows.py.",
    )
    lever_switch_file: str | None = Field(
        None,
        description="For benchmarks: a file whose words (`prompt_batch`, `frames_as_lists`) name "
        "which of those levers, each turned on by its own setting, is in force at a time (also a lever that is on "
        "unless told otherwise: a round without `prompt_batch` in the file runs without it); the talker reads it at "
        "most every quarter second and logs each change, a missing file naming none. A lever and its baseline are then "
        "measured in alternating load levels of one start rather than across starts, whose own spread was as wide as "
        "the levers measured (deploy/gpu/lever-starts.sh, SWITCH_ROUNDS). "
        "app/engines/omni/stage_plugins/lever_switch.py.",
    )
    switch_interval_ms: float | None = _switch_interval_field(
        "vllm-omni's stage processes, the talker's and code2wav's, not the server's",
        "In the talker's process the engine's step loop shares one lock with the threads that copy each step's codes "
        "out and hand them to code2wav. At 1 ms against the 5-ms default, code2wav's wait for its first window at one "
        "stream was unchanged (41.7 against 41.5 ms; benchmarks/gpu/2026-11-30-h200x2-pair-fused-prefetch/).",
    )
    cuda_mps: bool | Literal["auto"] = Field(
        "auto",
        description="Run its stage processes (talker, codec decoder) as clients of a CUDA MPS daemon this server "
        "starts, so that their kernels share the GPU side by side instead of time-sliced; needs "
        "nvidia-cuda-mps-control (the NVIDIA driver's utilities). Under an MPS daemon set by CUDA_MPS_PIPE_DIRECTORY "
        "(a GPU shared through the device plugin's MPS), that one serves. `auto` (the default): only where the two "
        "stages share a GPU (the deploy profile's `devices`), at the start the GPU is this server's alone (nvidia-smi "
        "lists no other compute process on it) and the control program is there; otherwise, or where the daemon fails "
        "to start, without, the log saying why. `true` starts it whatever it sees and refuses to start without it; "
        "`false` never. The single-GPU deploy profiles make code2wav a below-normal-priority MPS client "
        "(CUDA_MPS_CLIENT_PRIORITY in its stage's env, read only under MPS), so that the talker's kernels go first. "
        "On one H200, two starts each beside three without (benchmarks/gpu/2026-12-04-h200-omni-mps-priority-both-"
        "tools/), it cut the time to uninterrupted audio p95 to 0.84-0.86x at a steady 8 streams and 0.68-0.76x at "
        "32 and 64, with 1.06-1.12x the requests a second at 8 and 32 and 1-6% of streams run dry at 64 against "
        "9-14%; in a burst of 32 its p95 was within the starts' spread at 1.09-1.10x the requests a second; "
        "vllm-omni's own benchmark at 32 streams did 1.10-1.16x the requests a second at 0.76-0.92x the time to "
        "first audio p95. At one stream the time to uninterrupted audio (35-37 ms) was within the spread of the "
        "starts without (32-44), but each whole utterance took about 1.1x as long. Set `false` for a GPU that other "
        "processes or pods share unseen (in a container nvidia-smi sees only its own)." + _deprecated("omni_cuda_mps"),
    )
    fixed_length: bool = Field(
        False,
        description="Benchmarks on random weights only: generate exactly max_new_tokens."
        + _deprecated("omni_fixed_length"),
    )

    @field_validator("warmup_batch_sizes", mode="before")
    @classmethod
    def _list_from_env(cls, value: object) -> object:
        return _list_from_text(value)

    @field_validator("code2wav_scheduler")
    @classmethod
    def _moved_scheduler(cls, path: str) -> str:
        return MOVED_PATHS.get(path, path)

    def talker_levers_on(self) -> list[str]:
        """The service talker's levers in force: each as its setting says, none with vllm-omni's talker (where a
        lever on by default does not apply)."""
        if self.talker_model == "vllm-omni":
            return []
        return [name for name in TALKER_LEVERS if getattr(self, name)]

    def switchable_levers_on(self) -> list[str]:
        """The levers in force that a lever switch file may switch."""
        return self.talker_levers_on() + (["frames_as_lists"] if self.frames_as_lists else [])

    @model_validator(mode="after")
    def _talker_levers_need_the_services_talker(self) -> OmniSettings:
        for name in TALKER_LEVERS:
            # a default that does not apply is no error; a lever asked for by name that cannot apply is (so a dump
            # of these settings is validated again with exclude_unset, or it asks for every default by name)
            if self.talker_model == "vllm-omni" and getattr(self, name) and name in self.model_fields_set:
                talker = nested_env_name("omni", "talker_model")
                raise ValueError(
                    f"{nested_env_name('omni', name)} needs the service's talker: set {talker} to service, fused or "
                    "compiled-once"
                )
        if self.lever_switch_file and not self.switchable_levers_on():
            if self.talker_model == "vllm-omni":
                raise ValueError(
                    f"{nested_env_name('omni', 'lever_switch_file')} with vllm-omni's talker switches frames_as_lists "
                    f"only: set {nested_env_name('omni', 'frames_as_lists')}=true"
                )
            levers = f"{', '.join(SWITCHABLE_LEVERS[:-1])} and {SWITCHABLE_LEVERS[-1]}"
            raise ValueError(
                f"{nested_env_name('omni', 'lever_switch_file')} switches {levers}: turn on one of them "
                f"({', '.join(nested_env_name('omni', lever) for lever in SWITCHABLE_LEVERS)})"
            )
        return self


class SglangSettings(SettingsGroup):
    """The sglang engine (Qwen3-TTS on sglang-omni 0.1.8, on a GPU, in the server's process): `SPEECH_SGLANG__<FIELD>`.
    The pipeline's own settings keep sglang-omni's names (its `--<stage>.<group>.<field>` flags)."""

    model: str | None = Field(None, description="Qwen3-TTS model directory.")
    served_model_name: str | None = Field(None, description="Model id in the API (default: dir name).")
    mem_fraction_static: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="Share of the GPU's memory the talker takes for its weights and KV cache "
        "(tts_engine.engine.mem_fraction_static); the codec decoder and its graphs need the rest.",
    )
    load_format: str | None = Field(
        None, description="The talker's load format (`dummy`: random weights; the codec decoder always loads its own)."
    )
    max_running_requests: int = Field(
        64, ge=1, description="Syntheses the talker batches at once (tts_engine.engine.max_running_requests)."
    )
    disable_radix_cache: bool = Field(
        False,
        description="Turn off the talker's prefix cache (tts_engine.engine.disable_radix_cache): with it, a prompt "
        "seen before skips its prefill.",
    )
    preprocessing: Literal["inline", "cpu", "gpu"] = Field(
        "inline",
        description="Where sglang-omni's preprocessing runs (tokenizing, the prompt's embeddings, a clone's reference "
        "audio): inline, 8 threads in the talker's process (sglang-omni's default); cpu, a process of its own on the "
        "CPU, off the talker's Python lock (a clone's reference audio is then encoded on the CPU); gpu, a process of "
        "its own on the talker's GPU. A process of its own loads the prompt's weights from the model directory, "
        "whatever LOAD_FORMAT says.",
    )
    preprocessing_processes: int = Field(
        1,
        ge=1,
        description="With PREPROCESSING=cpu: how many processes preprocessing runs in "
        "(processes.frontend.num_replicas), each request bound to the next one in turn, meant to let a burst's "
        "requests reach the talker sooner, in fewer prefills. Each process loads its own prompt frontend. Not with "
        "PREPROCESSING=gpu: sglang-omni 0.1.8 cannot run copies of that process (it refuses a copied GPU process "
        "without devices of its own, and preprocessing's own GPU beside them).",
    )
    switch_interval_ms: float | None = _switch_interval_field(
        "the processes sglang-omni spawns, the talker's and preprocessing's own, not the server's",
        "The talker's scheduler, preprocessing's and the decoder's threads share one lock in the talker's process.",
    )
    first_window_batch: int = Field(
        32,
        ge=1,
        description="First audio windows the decoder batches in one step (vocoder.factory.initial_max_batch_size).",
    )
    first_window_wait_ms: float = Field(
        2.0, ge=0, description="How long the decoder waits to fill a batch of first windows (initial_batch_wait_ms)."
    )
    prefill_graph_tokens: int | None = Field(
        None,
        ge=1,
        description="The talker's prefills replay CUDA graphs up to this many tokens, above it they run eagerly "
        "(tts_engine.engine.cuda_graph_max_bs_prefill; sglang-omni extends its own ladder to it). Default: "
        "sglang-omni's 512, which a burst of 15 or more CustomVoice requests exceeds.",
    )
    prefill_graph_requests: int | None = Field(
        None,
        ge=1,
        description="CustomVoice models: the requests one of the talker's prefill CUDA graphs holds, a prefill of more "
        "runs eagerly (tts_engine.engine.cuda_graph_config, prefill.full_prefill_max_req; Base and VoiceDesign "
        "prefills replay SGLang's breakable graphs, which hold any number). Default: SGLang's chunked prefill size "
        "/ 512, 16 on an H100 or H200.",
    )
    chunk_ramp: Annotated[list[int] | None, NoDecode] = Field(
        None,
        description="Codec frames in each window before the steady ones (vocoder.factory.stream_chunk_ramp; JSON or "
        "comma list). Default: sglang-omni's 1, 2, 4.",
    )
    steady_chunk_frames: int | None = Field(
        None, ge=1, description="Codec frames in each window after the ramp (stream_followup_stride; default 8)."
    )
    pipeline_overrides: dict[str, object] | None = Field(
        None,
        description="Any other setting of sglang-omni's pipeline, by its dotted name, as JSON, e.g. "
        '{"vocoder.factory.followup_max_batch_size": 16}. They win over the fields above.',
    )
    start_timeout_s: int = Field(
        1200,
        ge=30,
        description="Seconds allowed for the pipeline's start (cold: 390–632 s on H200s, 519 s on an H100).",
    )
    compile_cache_dir: str | None = Field(
        None,
        description="One directory for the compile caches a start fills (Inductor, Triton, FlashInfer, sglang's "
        "JIT-built kernels and autotune results, and what sglang-omni keeps under the user's cache directory); persist "
        "it and a restart skips the work (variables set explicitly win).",
    )
    warmup_batch_sizes: Annotated[list[int] | None, NoDecode] = Field(
        None,
        description="Batch sizes warmed up before /ready, so that the first burst is served as fast as later ones. "
        "Default: 1, 2, 4, ... up to the admission limit.",
    )
    sentence_pipeline: bool = Field(False, description="Speak long text sentence by sentence.")
    fixed_length: bool = Field(
        False,
        description="Benchmarks on random weights only: every request runs to max_new_tokens (its talker never ends "
        "speech early); also what `ignore_eos` asks for.",
    )

    @field_validator("warmup_batch_sizes", "chunk_ramp", mode="before")
    @classmethod
    def _list_from_env(cls, value: object) -> object:
        return _list_from_text(value)

    @model_validator(mode="after")
    def _processes_need_a_cpu_frontend(self) -> SglangSettings:
        if self.preprocessing_processes > 1 and self.preprocessing != "cpu":
            raise ValueError(
                f"{nested_env_name('sglang', 'preprocessing_processes')}={self.preprocessing_processes} needs "
                f"{nested_env_name('sglang', 'preprocessing')}=cpu (it is {self.preprocessing!r}): only a process of "
                "its own on the CPU runs as several"
            )
        return self


def nest_flat_names(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments (or a dict to validate) with the old flat engine names moved into their engine's group; a
    value given under the grouped name wins over the same setting given flat."""
    out = {key: value for key, value in values.items() if key not in FLAT_NAMES}
    for flat, (group, field) in FLAT_NAMES.items():
        if flat not in values:
            continue
        current = out.get(group)
        if isinstance(current, BaseModel):
            continue  # a whole engine settings object was given: it says everything about its engine
        merged = dict(current) if isinstance(current, Mapping) else {}
        merged.setdefault(field, values[flat])
        out[group] = merged
    return out


def deprecated_env_names(env: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """(old name, new name) for every old flat engine variable set in `env`, in `FLAT_NAMES` order."""
    present = {key.upper() for key in env}
    return [
        (flat_env_name(flat), nested_env_name(group, field))
        for flat, (group, field) in FLAT_NAMES.items()
        if flat_env_name(flat) in present
    ]


def moved_path_env(env: Mapping[str, str] = os.environ) -> list[tuple[str, str, str]]:
    """(variable, old path, new path) for every service variable in `env` set to a dotted path that has moved
    (`MOVED_PATHS`), in `env` order."""
    return [
        (key.upper(), value, MOVED_PATHS[value])
        for key, value in env.items()
        if key.upper().startswith(ENV_PREFIX) and value in MOVED_PATHS
    ]


# Variables of this prefix that are no settings: the engines set them for their own processes (a value given for the
# server passes on to them). tests/unit/test_settings.py checks that every SPEECH_ name the code reads is a setting or
# one of these.
PROCESS_ENV = frozenset(
    {
        "SPEECH_OMNI_FRAMES_AS_LISTS",
        "SPEECH_OMNI_FUSED_KERNELS",
        "SPEECH_OMNI_LEVER_SWITCH",
        "SPEECH_OMNI_PROMPT_BATCH",
        "SPEECH_OMNI_SWITCH_INTERVAL_S",
        "SPEECH_OMNI_TIMELINE_FLAG",
        "SPEECH_OMNI_WINDOW_DOORBELL",
        "SPEECH_SGLANG_SWITCH_INTERVAL_S",
    }
)


# ...and variables of this prefix that the project's own scripts and GPU tests read, never the server: exported in a
# shell that also starts servers (deploy/fleet/fleet.sh, the GPU recipe), they reach a server without meaning anything
TOOL_ENV = frozenset({"SPEECH_SERVER"})
TOOL_ENV_PREFIX = "SPEECH_GPU_"


def setting_env_names() -> frozenset[str]:
    """Every variable a setting is read from: the service's, each engine group whole (JSON) and field by field, and
    the old flat names."""
    names = {f"{ENV_PREFIX}{name}".upper() for name in Settings.model_fields}
    for group, info in Settings.model_fields.items():
        if _is_group(info):
            names |= {nested_env_name(group, field) for field in info.annotation.model_fields}  # type: ignore[union-attr]
    return frozenset(names | {flat_env_name(flat) for flat in FLAT_NAMES})


def _mapping_env_names() -> frozenset[str]:
    """The variables of settings that are mappings, whose keys may be set one by one (`<setting>__<key>`)."""

    def mapping(info: FieldInfo) -> bool:
        kinds = typing.get_args(info.annotation) if isinstance(info.annotation, types.UnionType) else (info.annotation,)
        return any(typing.get_origin(kind) is dict for kind in kinds)

    names = {f"{ENV_PREFIX}{name}".upper() for name, info in Settings.model_fields.items() if mapping(info)}
    for group, info in Settings.model_fields.items():
        if _is_group(info):
            fields = info.annotation.model_fields.items()  # type: ignore[union-attr]
            names |= {nested_env_name(group, field) for field, inner in fields if mapping(inner)}
    return frozenset(names)


def _is_group(info: FieldInfo) -> bool:
    """A setting that is an engine's group of settings (SPEECH_<GROUP>__<FIELD>)."""
    return isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)


def unknown_env_names(env: Mapping[str, str] = os.environ) -> list[tuple[str, str | None]]:
    """(variable, the setting it may have meant) for every SPEECH_ variable in `env` that no setting reads, in `env`
    order: a misspelt name is otherwise ignored without a word. A nested field's own keys (`<setting>__<key>`)
    count as the field's. A name under a group that is none of its settings is among them, but a start never logs it:
    the settings refuse it first (`SettingsGroup`)."""
    known = setting_env_names()
    read = known | PROCESS_ENV | TOOL_ENV
    nested = tuple(setting + NESTED_DELIMITER for setting in _mapping_env_names())  # a mapping's keys below it
    unknown = []
    for key in env:
        name = key.upper()
        if not name.startswith(ENV_PREFIX) or name in read or name.startswith((TOOL_ENV_PREFIX, *nested)):
            continue
        unknown.append((key, likely_meant(name, known)))
    return unknown


def log_env_warnings(env: Mapping[str, str] = os.environ) -> None:
    """Once at start: each old flat engine variable still set, with the name that replaces it; each variable set to a
    class's old dotted path, with the path that replaces it; and each SPEECH_ variable no setting reads."""
    for variable, meant in unknown_env_names(env):
        log.warning(
            f"{variable} is no setting and is ignored" + (f": did you mean {meant}?" if meant else ""),
            extra={"ignored": variable, "meant": meant},
        )
    present = {key.upper() for key in env}
    for old, new in deprecated_env_names(env):
        ignored = new in present
        log.warning(
            f"{old} is deprecated: set {new} instead" + (f" ({new} is set too and wins)" if ignored else ""),
            extra={"deprecated": old, "use": new, "ignored": ignored},
        )
    for variable, old, new in moved_path_env(env):
        log.warning(
            f"{variable}={old} is a deprecated path, read as {new}: set that instead",
            extra={"deprecated": old, "use": new, "variable": variable},
        )


def settings_set(settings: Settings) -> dict[str, object]:
    """The settings given a value (by a variable, a flag or a keyword), by the variable that sets each, defaults left
    out: what the start logs so that an operator sees the configuration in force. A secret (a field kept out of its
    repr, such as API keys) is given as how many values it holds, never as itself."""

    def shown(info: FieldInfo, value: object) -> object:
        if info.repr:
            return value
        return f"({len(value)} hidden)" if isinstance(value, Sized) else "(hidden)"

    out: dict[str, object] = {}
    for name in settings.model_fields_set:
        info, value = Settings.model_fields[name], getattr(settings, name)
        if isinstance(value, BaseModel):  # an engine's group: each of its fields set
            for field in value.model_fields_set:
                out[nested_env_name(name, field)] = shown(type(value).model_fields[field], getattr(value, field))
        else:
            out[f"{ENV_PREFIX}{name}".upper()] = shown(info, value)
    return dict(sorted(out.items()))


def log_settings_warnings(settings: Settings) -> None:
    """Once at start: a setting that, with the others as they are, does nothing."""
    if settings.api_key_max_concurrency is not None and not (settings.api_keys or settings.api_keys_file):
        log.warning(
            "SPEECH_API_KEY_MAX_CONCURRENCY is set but the API has no keys (SPEECH_API_KEYS, SPEECH_API_KEYS_FILE): "
            "it limits nothing",
            extra={"ignored": "SPEECH_API_KEY_MAX_CONCURRENCY"},
        )


class _FlatEnvSource(EnvSettingsSource):
    """The old flat engine variables, read as if they had been given under their grouped names (so parsed exactly as
    those are). A grouped name that is set wins: the old one is then not read at all."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = super()._load_env_vars()
        renamed: dict[str, str | None] = {}
        for flat, (group, field) in FLAT_NAMES.items():
            old, new = flat_env_name(flat), nested_env_name(group, field)
            if not self.case_sensitive:
                old, new = old.lower(), new.lower()
            if old in env and new not in env:  # not merged: a dict given both ways would mix (sources deep-merge)
                renamed[new] = env[old]
        return renamed


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED_DELIMITER, extra="ignore")

    def __init__(self, **values: Any) -> None:
        # Old flat keyword arguments (Settings(deploy_config=...)) are moved into their group before the sources are
        # merged, so that they win over the environment as every keyword argument does.
        super().__init__(**nest_flat_names(values))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FlatEnvSource(settings_cls), dotenv_settings, file_secret_settings)

    host: str = Field("0.0.0.0", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    engine: EngineName = Field(
        "auto",
        description="Speech engine: embedded (CPU), omni (vllm-omni on a GPU), sglang (sglang-omni on a GPU), or "
        "auto (omni, then sglang, when installed with a GPU and a model; else embedded).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    model_aliases: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"],
        description="Model names accepted besides the engine's own model id (JSON list or comma-separated).",
    )
    voice_aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys(OPENAI_VOICES, ""),
        description="Voice name -> engine voice id (JSON object); an empty id means the engine's default voice, and so "
        "does an id that is no voice of the engine, with a warning at start. A name is one a request's `voice` can "
        f"send (at most {MAX_VOICE_NAME_CHARS} characters, no control characters, not empty, no space at either "
        "end, and not one that differs from another only in case: names are matched without regard to case), else "
        "the server does not start.",
    )
    max_input_chars: int = Field(
        MAX_INPUT_CHARS, ge=1, le=MAX_INPUT_CHARS, description="Longest accepted `input`, in characters."
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description="Syntheses at once (default per engine: embedded: workers; omni: stage-0 max_num_seqs; sglang: "
        "max_running_requests).",
    )
    max_queue: int | None = Field(None, ge=0, description="Requests waiting for a slot (default: 2 x concurrency).")
    batch_max_items: int = Field(
        32, ge=1, description="POST /v1/audio/speech/batch: most items in one batch (400 beyond)."
    )
    batch_max_chars: int = Field(
        32768,
        ge=1,
        description="POST /v1/audio/speech/batch: most `input` characters of all its items (413 beyond); at least "
        "max_input_chars.",
    )
    batch_concurrency: int | None = Field(
        None,
        ge=1,
        description="POST /v1/audio/speech/batch: items of all batches synthesized at once, each admitted like a "
        "request (default: a quarter of the concurrency, at least 1; at most the concurrency).",
    )
    switch_interval_ms: float | None = _switch_interval_field(
        "the server's own process",
        "The event loop shares that process with the threads an engine runs there (vllm-omni's orchestrator, and the "
        "thread that hands its outputs to the loop one at a time), so a stream's audio can wait for that lock at "
        "every hand-over.",
    )
    queue_timeout_s: float = Field(
        10.0,
        ge=0,
        description="Longest wait for a slot before a 429; never past the request's own request_timeout_s, which "
        "refuses a request still queued when it passes the same way.",
    )
    request_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Longest synthesis; then it is aborted. A request still waiting for a slot when it passes is "
        "refused with the queue's 429 instead, never sent to the engine. The time its client takes to read the audio "
        "sent to it is not counted, up to that audio's length (a player reading in real time is never cut). A "
        "batch's longest too, whole: its items not ended by then fail with the timeout, those that ended are "
        "answered.",
    )
    drain_timeout_s: float = Field(
        30.0,
        ge=0,
        allow_inf_nan=False,
        description="On SIGTERM: how long accepted requests (streaming or queued) may take to finish.",
    )
    request_read_timeout_s: float = Field(
        10.0, gt=0, description="Longest time a request's headers, and then its body, may take to arrive (408 beyond)."
    )
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="Idle keep-alive connections are closed after this.")
    client_stall_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A client that reads none of what it is sent (a response, a WebSocket's frames) for this long is "
        "cut off (its stream stopped, its slot freed); one that reads anything meanwhile, however slowly, is reading. "
        "Above the time a real-time player takes to read ~64 KiB of audio.",
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, repr=False, description="API keys (comma list); none = open API."
    )
    api_keys_file: str | None = Field(None, description="File of API keys, one per line (# comments).")
    api_key_max_concurrency: int | None = Field(
        None,
        ge=1,
        description="Speech in progress per API key (a request, a batch, a WebSocket session) and voice uploads "
        "(429 beyond); its other API calls (the models, the voices' listing, the capabilities) are not counted.",
    )
    ref_audio_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts ref_audio URLs may name (comma list; '.example.com' = its subdomains); none = no URLs.",
    )
    ref_audio_allow_http: bool = Field(False, description="Also fetch plain-http ref_audio URLs.")
    ref_audio_allow_private: bool = Field(
        False,
        description="Also fetch from non-public addresses (private, loopback, link-local): trusted networks only.",
    )
    ref_audio_max_bytes: int = Field(
        MAX_REFERENCE_BYTES,
        ge=1024,
        description="Largest reference audio accepted: a request's ref_audio (400 beyond) and a voice upload's "
        "audio_sample (413 beyond).",
    )
    ref_audio_ca_bundle: str | None = Field(None, description="CA bundle for https ref_audio hosts with a private CA.")
    voice_store: str = Field(
        default_factory=user_voice_store,
        description="Directory of registered voices, created when the first is stored; share it (ReadWriteMany) "
        "between replicas. Default: speech-service/voices in the user's data directory ($XDG_DATA_HOME, else "
        "~/.local/share).",
    )
    profiler_dir: str | None = Field(
        None,
        description="Where a GPU engine's PyTorch profiler writes traces. Set, the server serves POST "
        "/admin/profile/start and /admin/profile/stop (behind the API keys), to find where a frame's time goes; "
        "leave it unset in production. On an engine without a profiler (embedded) the start warns of it.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web origins allowed to call the API from a browser (comma list, e.g. https://app.example.com, "
        "or *); none = no CORS. The WebSocket too: a browser's page of another origin than the server's own (its "
        "Host) opens a session only where listed here (403 `origin_not_allowed` before the upgrade otherwise).",
    )
    max_body_bytes: int = Field(
        25 * 1024 * 1024, ge=MIN_MESSAGE_BYTES, description="Largest accepted request body (413 beyond)."
    )
    sentence_max_chars: int = Field(
        250, ge=40, description="Sentences longer than this are cut at commas (then spaces) before synthesis."
    )
    ws_config_timeout_s: float = Field(
        10.0, gt=0, description="WebSocket speech: how long a new connection may take to send a valid session.config."
    )
    ws_idle_timeout_s: float = Field(
        30.0,
        gt=0,
        description="WebSocket speech: a session that sends nothing and has nothing to speak is closed (counted "
        "from its last message, or from when a listener playing the last audio in real time has heard it all).",
    )
    ws_sentence_idle_s: float = Field(
        1.0,
        gt=0,
        description="WebSocket speech: text that ends like a sentence is spoken after this pause in the input, "
        "even before the next word shows that the sentence is over.",
    )
    ws_max_message_bytes: int = Field(
        WS_MAX_MESSAGE_BYTES,
        ge=MIN_MESSAGE_BYTES,
        description="WebSocket speech: largest message but session.config (max_body_bytes). Left unset, "
        "max_body_bytes where that is lower.",
    )
    ws_max_read_ahead_chars: int = Field(
        32768,
        ge=1,
        description="WebSocket speech: most characters of text read ahead of the speech (queued, not yet spoken); "
        "past it, the next message is read once some has been spoken, and a client that sends more than that plus "
        "what its connection buffers before it reads any audio is cut off as stalled. At least max_input_chars: a "
        "text one request could speak is read whole, in however many messages, before its client reads any audio.",
    )
    # -- each engine's own settings: the engine is given these and nothing else of this object ---------------------
    embedded: EmbeddedSettings = Field(default_factory=EmbeddedSettings)
    omni: OmniSettings = Field(default_factory=OmniSettings)
    sglang: SglangSettings = Field(default_factory=SglangSettings)

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, values: object) -> object:
        """Settings.model_validate({...}) with the old flat names, as `__init__` takes them."""
        return nest_flat_names(values) if isinstance(values, Mapping) else values

    @model_validator(mode="before")
    @classmethod
    def _message_limit_under_the_body_limit(cls, values: object) -> object:
        """The WebSocket message limit left unset follows a body limit set below its default: else a lower body
        limit alone would be refused, over a variable the operator never set."""
        if not isinstance(values, Mapping) or "ws_max_message_bytes" in values or "max_body_bytes" not in values:
            return values
        try:
            body = int(values["max_body_bytes"])
        except (TypeError, ValueError):
            return values  # the field's own check refuses it
        # not below the message limit's own floor: a body limit that low is refused for itself, and told once
        return {**values, "ws_max_message_bytes": body} if MIN_MESSAGE_BYTES <= body < WS_MAX_MESSAGE_BYTES else values

    @field_validator("model_aliases", "ref_audio_allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _list_from_env(cls, value: object) -> object:
        return _list_from_text(value)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys_from_env(cls, value: object) -> object:
        keys = _list_from_text(value)
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            return keys  # the field's own check refuses it
        named = [key.strip() for key in keys if key.strip()]
        # set to something that names no key (",", blanks): the operator meant the API closed, not open; set to
        # nothing at all ("", as an empty value in a manifest) is unset
        if (value != "" if isinstance(value, str) else keys) and not named:
            raise ValueError("names no key (only commas and blanks); the API would be open. Unset it for that")
        return named

    @field_validator("ws_max_message_bytes")
    @classmethod
    def _within_the_body_limit(cls, limit: int, info: ValidationInfo) -> int:
        body = info.data.get("max_body_bytes")
        if isinstance(body, int) and limit > body:
            raise ValueError(
                f"{limit} is above SPEECH_MAX_BODY_BYTES ({body}), which holds every WebSocket message first: it "
                "could never take effect. Raise that, or lower this"
            )
        return limit

    @field_validator("batch_max_chars")
    @classmethod
    def _holds_the_longest_input(cls, limit: int, info: ValidationInfo) -> int:
        longest = info.data.get("max_input_chars")
        if isinstance(longest, int) and limit < longest:
            raise ValueError(
                f"{limit} is below SPEECH_MAX_INPUT_CHARS ({longest}): an input a request may send could never be "
                "sent in a batch, not even alone. Raise this, or lower that"
            )
        return limit

    @field_validator("ws_max_read_ahead_chars")
    @classmethod
    def _reads_the_longest_input_ahead(cls, limit: int, info: ValidationInfo) -> int:
        longest = info.data.get("max_input_chars")
        if isinstance(longest, int) and limit < longest:
            raise ValueError(
                f"{limit} is below SPEECH_MAX_INPUT_CHARS ({longest}): a client that sends an input a request may "
                "send, in pieces, before it reads any audio could be held back on its sends, and cut off as stalled. "
                "Raise this, or lower that"
            )
        return limit

    @field_validator("voice_aliases")
    @classmethod
    def _aliases_a_request_can_name(cls, aliases: dict[str, str]) -> dict[str, str]:
        """An alias is asked for as a request's `voice`, and held to what that field takes: one no request could send
        would never be used, yet the server would start with it without a word."""
        for alias in aliases:
            if len(alias) > MAX_VOICE_NAME_CHARS:
                raise ValueError(
                    f"the alias {_quoted(alias)} is {len(alias)} characters, longer than a request's `voice` may be "
                    f"({MAX_VOICE_NAME_CHARS}): no request could name it. Shorten it"
                )
            if (problem := text_problem(alias)) is not None:
                raise ValueError(
                    f"the alias {_quoted(alias)} cannot be a request's `voice`, as {problem}: no request could name it"
                )
            if alias != alias.strip() or not alias:  # a request's voice is matched stripped (VoiceCatalog.resolve)
                raise ValueError(
                    f"the alias {_quoted(alias)} is empty or begins or ends with a space: no request could name it"
                )
        # matched without regard to case: of two that differ only in case, a request could name only one
        seen: dict[str, str] = {}
        for alias in aliases:
            if (other := seen.setdefault(alias.casefold(), alias)) != alias:
                raise ValueError(
                    f"the aliases {_quoted(other)} and {_quoted(alias)} differ only in case, and a request's `voice` "
                    "is matched without regard to case: only one could be named"
                )
        return aliases

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        cleaned = [origin.rstrip("/") for origin in origins]
        for origin in cleaned:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"a CORS origin is scheme://host[:port] or *, not {origin!r}")
        return cleaned

    def fetch_policy(self) -> FetchPolicy:
        return FetchPolicy(
            allowed_hosts=frozenset(h.lower().rstrip(".") for h in self.ref_audio_allowed_hosts),
            allow_http=self.ref_audio_allow_http,
            allow_private=self.ref_audio_allow_private,
            max_bytes=self.ref_audio_max_bytes,
            ca_bundle=self.ref_audio_ca_bundle,
        )


def _quoted(text: str, most: int = 64) -> str:
    """`text` quoted (control characters escaped), cut short past `most` characters."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}..."


def settings_help() -> str:
    """A table of every setting for `--help`: the service's, then each engine's under its grouped name."""
    lines = ["settings (environment variables):"]
    groups: list[tuple[str, type[BaseModel]]] = []
    for name, info in Settings.model_fields.items():
        if _is_group(info):
            groups.append((name, info.annotation))  # type: ignore[arg-type]
            continue
        lines.append(_help_line(f"{ENV_PREFIX}{name}".upper(), info))
    for group, model in groups:
        for name, info in model.model_fields.items():
            lines.append(_help_line(nested_env_name(group, name), info))
    return "\n".join(lines)


def _help_line(env: str, info: FieldInfo) -> str:
    default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
    return f"  {env:<39} {info.description} [default: {default}]"


class InvalidSettings(ValueError):
    """Settings the server cannot start with, in the operator's words: the SPEECH_* variable (or flag) at fault."""


def env_name(location: Sequence[object]) -> str:
    """The variable that sets a field: ("embedded", "workers") -> SPEECH_EMBEDDED__WORKERS; what follows the field
    in `location` (a key of a JSON mapping, an index) is no part of the name: see `within_value`."""
    return ENV_PREFIX + NESTED_DELIMITER.join(str(part) for part in _field_path(location)).upper()


def within_value(location: Sequence[object]) -> str:
    """Where in a variable's JSON value the fault lies ("'alloy': "), or "" where the value is the field's whole."""
    inside = list(location)[len(_field_path(location)) :]
    return "".join(f"{part!r}: " for part in inside)


def _field_path(location: Sequence[object]) -> list[str]:
    """The leading parts of `location` that name fields: a settings group's, then one of its fields."""
    path: list[str] = []
    model: type[BaseModel] | None = Settings
    for part in location:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            break
        path.append(part)
        info = model.model_fields[part]
        model = info.annotation if _is_group(info) else None  # type: ignore[assignment]
    return path or [str(part) for part in location if isinstance(part, str)][:1]


def likely_meant(name: str, known: Iterable[str]) -> str | None:
    """The one of `known` that `name` is most likely a misspelling of, if any is close: a letter or two off in a name
    of some length, never a guess between unlike names."""
    meant = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return meant[0] if meant else None


def unknown_group_key(group: str, key: str, present: set[str]) -> str:
    """The refusal of `key` in settings group `group`, naming the variable that gave it (among `present`, the
    environment's names in capitals): the key's own (SPEECH_<GROUP>__<KEY>, or one below it), else the group's whole."""
    whole = f"{ENV_PREFIX}{group}".upper()
    own = nested_env_name(group, key)
    variable = next((name for name in sorted(present) if name == own or name.startswith(own + NESTED_DELIMITER)), None)
    fields = list(Settings.model_fields[group].annotation.model_fields)  # type: ignore[union-attr]
    meant = likely_meant(key.lower(), fields)
    if meant is None:
        hint = " (speech-server --help lists them)"
    elif variable is None:
        hint = f": did you mean {meant!r}?"
    else:
        hint = f": did you mean {nested_env_name(group, meant)}?"
    return f"{variable or whole}: {key!r} is no setting of the {whole} group{hint}"


def load_settings(flags: Mapping[str, Any] | None = None) -> Settings:
    """`Settings` from the environment with the command line's `flags` on top, or `InvalidSettings` naming what is
    wrong; a secret's value (a field not shown in its repr, such as API keys) is never repeated."""
    flags = dict(flags or {})
    try:
        return Settings(**flags)
    except ValidationError as exc:
        problems = []
        present = {key.upper() for key in os.environ}
        set_as = {new: old for old, new in deprecated_env_names() if new not in present}  # read from the old name
        for error in exc.errors():
            location = error.get("loc", ())
            if error.get("type") == "extra_forbidden" and len(location) == 2:  # a group's key: none of its settings
                problems.append(unknown_group_key(str(location[0]), str(location[1]), present))
                continue
            field = Settings.model_fields.get(str(location[0])) if location else None
            name = env_name(location)
            if name in set_as:
                name = f"{set_as[name]} (deprecated: {name})"
            if location and location[0] in flags:
                name = f"--{str(location[0]).replace('_', '-')} ({name})"
            # the settings' own refusals (a ValueError) say what they refuse, cut short where it is long: the value
            # is repeated only after pydantic's, and never a secret's
            hidden = error.get("type") == "value_error" or (field is not None and not field.repr)
            shown = "" if hidden else f" (got {error.get('input')!r})"
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            if message.startswith(env_name(location) + NESTED_DELIMITER):  # a group's refusal naming its variables
                problems.append(f"{message}{shown}")
                continue
            problems.append(f"{name}: {within_value(location)}{message}{shown}")
        raise InvalidSettings("; ".join(problems)) from None
    except SettingsError as exc:  # a value the environment could not parse (a JSON setting that is not JSON)
        found = re.search(r'field "([^"]+)"', str(exc))
        name = env_name(found.group(1).split(".")) if found else "a SPEECH_* variable"
        raise InvalidSettings(f"{name}: not valid JSON ({exc.__cause__ or exc})") from None
