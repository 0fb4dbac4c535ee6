"""Qwen3-TTS on sglang-omni 0.1.8: the translation of a job into the fields of a `GenerateRequest`, and the pipeline
settings the engine starts with.

Pure Python (no sglang-omni import), so the translation is tested on the CPU. It mirrors what sglang-omni 0.1.8's own
speech server hands its `Client` (`serve/speech_service.py`, `build_generate_request` and `build_tts_params`) and what
its request builder reads back (`models/qwen3_tts/request_builders.py`, `build_qwen3_tts_state`):

- the text is the prompt; a clone's reference audio rides in the prompt as `references[0]` (base64 WAV, its
  transcript beside it);
- everything else is `metadata["tts_params"]`: the task type, voice, language, instructions, `x_vector_only_mode`
  (Base only: its mere presence is refused on the other tasks), seed, `non_streaming_mode` (Base only: sglang-omni
  fixes it on for CustomVoice and VoiceDesign) and `stream_codec_output`, always on (without it `non_streaming_mode`
  would also turn the codec stream off);
- sampling values equal to sglang-omni's own defaults are dropped by its request builder unless named in
  `explicit_generation_params`: every sampling field the job sets is named there;
- the first window's size is `extra_params["initial_codec_chunk_frames"]`.
"""

from __future__ import annotations

import base64
import io
import wave
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine_protocol import ReferenceAudio, SynthesisJob, TaskType, UnsupportedParameter
from app.engines.qwen3_tts import Qwen3TTSModel

# sglang-omni 0.1.8's Qwen3-TTS pipeline: its talker's context is fixed at 8192 tokens (`engine_builder.py`); a request
# also holds its prompt, so the service caps a request's frames where vllm-omni's shipped profile does
MAX_NEW_TOKENS = 4096
# the vocoder's `stream_stride`: a request's first window is clamped to it (`scheduling/streaming_vocoder.py`)
DEFAULT_STREAM_STRIDE = 16
# the sampling fields sglang-omni's Qwen3-TTS request builder reads (`_GENERATION_FIELDS` but the sub-talker's and the
# token limit): the keys of `extra_params` this engine honours
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass(frozen=True, slots=True)
class RequestFields:
    """A `GenerateRequest`'s fields for one job (`sampling`: the `SamplingParams` fields it sets)."""

    prompt: str | dict[str, Any]
    sampling: dict[str, Any]
    metadata: dict[str, Any]
    extra_params: dict[str, Any] = field(default_factory=dict)


def check_sglang_job(job: SynthesisJob, *, fixed_length: bool) -> None:
    """What this engine refuses beyond the checks both Qwen3-TTS engines share (`app.engines.qwen3_tts.check_job`)."""
    if job.non_streaming_mode is False and job.task_type != TaskType.BASE:
        raise UnsupportedParameter(
            "non_streaming_mode",
            f"sglang-omni builds every {job.task_type.value} prompt with the whole text (non_streaming_mode true); "
            "'non_streaming_mode': false is honoured for task_type Base only.",
        )
    if job.ignore_eos and job.max_new_tokens is not None and not fixed_length:
        raise UnsupportedParameter(
            "ignore_eos",
            "This engine (sglang-omni) always stops at the model's end of speech: 'ignore_eos' cannot make a request "
            "run to max_new_tokens here.",
        )
    unknown = sorted(set(job.extra_params or {}) - set(SAMPLING_FIELDS))
    if unknown:
        raise UnsupportedParameter(
            "extra_params",
            f"This engine (sglang-omni) takes only {', '.join(SAMPLING_FIELDS)} in 'extra_params', not "
            f"{', '.join(repr(name) for name in unknown)}.",
        )
    # sglang's own SamplingParams.verify, which sglang-omni's talker runs on every request (a failure there would be a
    # failed request, not a refusal naming the field): top_k -1 or at least 1, repetition_penalty in (0, 2]
    given = job.extra_params or {}
    if given.get("top_k") == 0:
        raise UnsupportedParameter("extra_params", "'extra_params.top_k' must be -1 (off) or at least 1 here.")
    value = given.get("repetition_penalty")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2):
        raise UnsupportedParameter("extra_params", "'extra_params.repetition_penalty' must be a number in (0, 2].")


def reference_wav_base64(reference: ReferenceAudio) -> str:
    """The reference clip as a 16-bit mono WAV in base64: the stage process decodes it with soundfile."""
    pcm = (np.clip(np.asarray(reference.samples, dtype=np.float32), -1.0, 1.0) * 32767.0).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(reference.sample_rate))
        out.writeframes(pcm.tobytes())
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def request_fields(job: SynthesisJob, model: Qwen3TTSModel) -> RequestFields:
    """The `GenerateRequest` for `job` (checked already), as sglang-omni 0.1.8's speech server would build it."""
    tts: dict[str, Any] = {
        "task_type": job.task_type.value,
        "language": job.language.lower() if job.language else "auto",
        "stream_codec_output": True,
    }
    if job.instructions:
        tts["instructions"] = job.instructions
    if job.task_type == TaskType.CUSTOM_VOICE:
        tts["voice"] = job.voice.lower() if job.voice else model.speakers[0]
    prompt: str | dict[str, Any] = job.text
    if job.task_type == TaskType.BASE:
        tts["x_vector_only_mode"] = bool(job.x_vector_only_mode)
        if job.non_streaming_mode is not None:
            tts["non_streaming_mode"] = job.non_streaming_mode
        if job.ref_audio is not None:
            reference: dict[str, Any] = {"data": reference_wav_base64(job.ref_audio), "media_type": "audio/wav"}
            if job.ref_text and not job.x_vector_only_mode:
                reference["text"] = job.ref_text
            prompt = {"text": job.text, "references": [reference]}
    if job.seed is not None:
        tts["seed"] = job.seed
    given = job.extra_params or {}
    sampling = {name: given[name] for name in SAMPLING_FIELDS if given.get(name) is not None}
    if sampling:
        tts["explicit_generation_params"] = sorted(sampling)
    # always a length: sglang-omni's own default is 2048 frames (164 s), where a 4096-character input may need more
    sampling["max_new_tokens"] = job.max_new_tokens or MAX_NEW_TOKENS
    extra = {}
    if job.initial_codec_chunk_frames is not None:
        extra["initial_codec_chunk_frames"] = job.initial_codec_chunk_frames
    return RequestFields(prompt, sampling, {"task": "tts", "tts_params": tts}, extra)


FRONTEND_PROCESS = "frontend"  # the name of preprocessing's own process
TALKER_PROCESS = "pipeline"  # sglang-omni's process for a stage that names none: the talker's and the vocoder's


def preprocessing_layout(where: str, pipeline: dict[str, object], processes: int = 1) -> dict[str, object]:
    """sglang-omni's settings that put preprocessing `inline` (its default: threads in the talker's process), or in a
    process of its own on the `cpu` or on the talker's GPU (`gpu`), for a pipeline of these other settings. On the
    CPU, `processes` copies of that process (sglang-omni's process replicas: each request bound to one in turn).

    In a process of its own it loads its own prompt frontend and hands the talker prepared tensors, and each of its 8
    threads runs its ops on one CPU (sglang-omni's default: the server's OMP_NUM_THREADS where set, else a share of
    the CPUs each). On the CPU those tensors cross by shared memory, a channel that lets through as many at once as
    it has credits: 2 by default would let a burst reach the talker two requests at a time, so it gets one a request
    the talker runs (a semaphore; each segment is the tensor's own size; each copy of the process has its own). On
    the GPU they cross by CUDA IPC, which takes no credit."""
    if where == "inline":
        return {}
    layout: dict[str, object] = {"preprocessing.process": FRONTEND_PROCESS, "preprocessing.env.OMP_NUM_THREADS": "1"}
    if where == "cpu":
        credits = pipeline["tts_engine.engine.max_running_requests"]
        layout |= {"preprocessing.factory.device": "cpu", "preprocessing.comm.credits": credits}
        if processes > 1:  # the process preprocessing runs in, under an override's name where one gives it
            name = pipeline.get("preprocessing.process") or FRONTEND_PROCESS
            if name in {pipeline.get(f"{stage}.process") or TALKER_PROCESS for stage in ("tts_engine", "vocoder")}:
                raise ValueError(f"preprocessing_processes: preprocessing runs in {name!r} with the talker, not alone")
            if "preprocessing.gpu" in pipeline:  # sglang-omni refuses a stage's GPU beside copies' devices
                raise ValueError("preprocessing_processes: pipeline_overrides put preprocessing on a GPU")
            layout[f"processes.{name}.num_replicas"] = processes
        return layout
    # sglang-omni then asks every stage on the GPU for a memory share unless told not to: the shares are bookkeeping
    # (the talker's KV cache is sized from the memory free when it starts, whatever share it declares)
    gpu = pipeline.get("tts_engine.gpu", 0)
    return {**layout, "preprocessing.gpu": gpu, "placement.require_memory_fraction_for_colocation": False}


def pipeline_settings(settings: Any) -> dict[str, object]:
    """sglang-omni's pipeline settings, by the dotted names of its `--<stage>.<group>.<field>` flags, from the engine's
    own settings (`app.settings.SglangSettings`); `pipeline_overrides` win, each key whole."""
    values: dict[str, object] = {
        "tts_engine.engine.mem_fraction_static": settings.mem_fraction_static,
        "tts_engine.engine.max_running_requests": settings.max_running_requests,
        "vocoder.factory.initial_max_batch_size": settings.first_window_batch,
        "vocoder.factory.initial_batch_wait_ms": settings.first_window_wait_ms,
    }
    if settings.load_format:
        values["tts_engine.engine.load_format"] = settings.load_format
    if settings.disable_radix_cache:
        values["tts_engine.engine.disable_radix_cache"] = True
    if settings.prefill_graph_tokens:
        values["tts_engine.engine.cuda_graph_max_bs_prefill"] = settings.prefill_graph_tokens
    if settings.prefill_graph_requests:
        prefill_graph = {"full_prefill_max_req": settings.prefill_graph_requests}
        values["tts_engine.engine.cuda_graph_config"] = {"prefill": prefill_graph}
    if settings.chunk_ramp:
        values["vocoder.factory.stream_chunk_ramp"] = list(settings.chunk_ramp)
    if settings.steady_chunk_frames:
        values["vocoder.factory.stream_followup_stride"] = settings.steady_chunk_frames
    overrides = settings.pipeline_overrides or {}
    layout = preprocessing_layout(settings.preprocessing, {**values, **overrides}, settings.preprocessing_processes)
    return {**values, **layout, **overrides}


def stream_stride(pipeline: dict[str, object]) -> int:
    """The largest first window a request may ask for (the vocoder's `stream_stride`)."""
    return int(pipeline.get("vocoder.factory.stream_stride") or DEFAULT_STREAM_STRIDE)
