"""Qwen3-TTS on vllm-omni 0.30: the translation of a job into an engine request (the model's description and the checks
both engines share are `app.engines.qwen3_tts`).

Pure Python (no vllm import), so the translation is tested on the CPU. It mirrors vllm-omni 0.30.0's own speech
server (`vllm_omni/entrypoints/openai/serving_speech.py` and the Qwen3-TTS adapter in
`entrypoints/openai/tts_adapters/qwen3_tts.py`, `_build_tts_params` and `build`):

- the prompt is `prompt_token_ids=[1] * n` (placeholders: the talker rebuilds its embeddings from
  `additional_information`), n from the model's own prompt-length estimator;
- every `additional_information` value is a one-element list;
- per-stage sampling parameters are the engine's defaults, switched to DELTA output, with stage 0's `max_tokens`
  from `max_new_tokens` and the seed in both `seed` and `extra_args["tts_local_seed"]`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine_protocol import SynthesisJob, TaskType
from app.engines.omni.codec_windows import VLLM_OMNI_DEFAULT, CodecWindows
from app.engines.qwen3_tts import Qwen3TTSModel, reference_frames

log = logging.getLogger(__name__)


def additional_information(job: SynthesisJob, model: Qwen3TTSModel) -> dict[str, list[Any]]:
    """The talker's conditioning, key for key as vllm-omni 0.30's `_build_tts_params` writes it."""
    info: dict[str, list[Any]] = {
        "text": [job.text],
        "task_type": [job.task_type.value],
        "language": [job.language.title() if job.language else "Auto"],
        "instruct": [job.instructions or ""],
        "max_new_tokens": [job.max_new_tokens or 2048],  # informational there too; stage 0 max_tokens caps length
    }
    if job.task_type == TaskType.CUSTOM_VOICE:
        info["speaker"] = [job.voice.lower()]
        info["voice_created_at"] = [0]  # a built-in speaker
    if job.task_type == TaskType.BASE and job.speaker_embedding is not None:
        # as 0.30's adapter writes it: plain floats (they cross the engine's IPC), x-vector-only cloning
        info["voice_clone_prompt"] = [{"ref_spk_embedding": [float(x) for x in job.speaker_embedding]}]
        info["x_vector_only_mode"] = [True]
    elif job.task_type == TaskType.BASE and job.ref_audio is not None:
        samples = np.asarray(job.ref_audio.samples, dtype=np.float32)
        info["ref_audio"] = [[samples.tolist(), int(job.ref_audio.sample_rate)]]
        info["ref_code_length"] = [reference_frames(job.ref_audio)]
        info["x_vector_only_mode"] = [bool(job.x_vector_only_mode)]
        if job.ref_text:
            info["ref_text"] = [job.ref_text]
    if job.initial_codec_chunk_frames is not None:
        info["initial_codec_chunk_frames"] = [job.initial_codec_chunk_frames]  # read by stage 0's chunk connector
    if job.non_streaming_mode is not None:
        info["non_streaming_mode"] = [job.non_streaming_mode]
    elif job.task_type == TaskType.VOICE_DESIGN:
        info["non_streaming_mode"] = [True]  # vllm-omni's own fallback for VoiceDesign
    return info


@dataclass(frozen=True, slots=True)
class PromptHelpers:
    """What a request needs from vllm / vllm-omni (`app.engines.omni.engine.load_prompt_helpers` imports them): the
    engine's sampling defaults as DELTA, the model's prompt-length estimator, its tokenizer and vllm's
    `tokens_input`."""

    delta_defaults: list[Any]
    estimator: Callable[..., int]
    tokenizer: Any
    tokens_input: Callable[..., dict[str, Any]]


def prompt_for(helpers: PromptHelpers, model: Qwen3TTSModel, info: dict[str, list[Any]]) -> dict[str, Any]:
    """The prompt for the conditioning `info`: as many placeholder ids as the model's own estimator says. The estimate
    tokenizes the text (and instructions, reference transcript): call it from one thread only, as the tokenizer is not
    thread-safe."""
    try:
        length = int(
            helpers.estimator(
                additional_information=info,
                task_type=info["task_type"][0],
                tokenize_prompt=lambda text: helpers.tokenizer(text, padding=False)["input_ids"],
                codec_language_id=model.codec_language_id or None,
                spk_is_dialect=model.spk_is_dialect or None,
            )
        )
    except Exception:
        log.warning("prompt length estimate failed; using 2048 as vllm-omni does", exc_info=True)
        length = 2048
    prompt = helpers.tokens_input(prompt_token_ids=[1] * length)
    prompt["additional_information"] = info
    return prompt


async def build_prompt(
    helpers: PromptHelpers, model: Qwen3TTSModel, job: SynthesisJob, executor: Executor
) -> dict[str, Any]:
    """The prompt for `job`. A cloning job's conditioning carries its reference audio as a list of up to ~1.4 M
    floats: built in `executor`. The length estimate runs on the event loop, the tokenizer's one thread: a fast
    tokenizer takes ~65 us for a sentence and ~1 ms at the 4096-character limit, while a hop to a worker thread costs
    the request milliseconds once vllm-omni's orchestrator thread contends for the GIL (c=32)."""
    if job.ref_audio is None:
        info = additional_information(job, model)
    else:
        info = await asyncio.get_running_loop().run_in_executor(executor, additional_information, job, model)
    return prompt_for(helpers, model, info)


def sampling_params_for(job: SynthesisJob, delta_defaults: list[Any], *, fixed_length: bool = False) -> list[Any]:
    """Per-stage sampling parameters: copies of the engine's DELTA defaults with stage 0 set for this job.

    `fixed_length` (benchmarks on random weights only) makes stage 0 generate exactly max_new_tokens tokens, since
    random weights stop at random times; a job's own `ignore_eos` with `max_new_tokens` does the same for that job
    (vLLM's benchmark asks for it; `vllm serve --omni` 0.30 drops the field unread)."""
    params = copy.deepcopy(delta_defaults)
    talker = params[0]
    if job.extra_params:
        # as vllm-omni 0.30's serving_speech applies `extra_params`: its sampling keys on the talker, the whole object
        # in the talker's extra_args; then the request's token limit, as its adapter does after it
        for name in ("temperature", "top_p", "top_k"):
            if job.extra_params.get(name) is not None:
                setattr(talker, name, job.extra_params[name])
        talker.extra_args = {**(talker.extra_args or {}), **job.extra_params}
    if job.max_new_tokens is not None:
        talker.max_tokens = job.max_new_tokens
    if fixed_length or (job.ignore_eos and job.max_new_tokens is not None):
        # vLLM holds back every stop token, end-of-speech included, until min_tokens: exactly max_tokens frames
        talker.min_tokens = talker.max_tokens
        talker.ignore_eos = True
    if job.seed is not None:
        talker.seed = job.seed
        talker.extra_args = {**(talker.extra_args or {}), "tts_local_seed": job.seed}
    return params


class AudioOutputReader:
    """New audio from each `OmniRequestOutput`, whether the engine sends deltas or everything so far.

    DELTA outputs carry `multimodal_output["audio"]` as the new chunk (a tensor); cumulative ones carry either a
    growing list of chunk tensors or one tensor of all audio so far. vllm-omni's speech server handles the list form
    by index; a cumulative tensor is sliced past what was already read."""

    def __init__(self, cumulative: bool) -> None:
        self.cumulative = cumulative
        self._items_seen = 0
        self._samples_seen = 0
        self.sample_rate: int | None = None

    def read(self, output: Any) -> np.ndarray | None:
        payload = _multimodal(output)
        if not payload or "audio" not in payload:
            return None
        rate = payload.get("sr") if hasattr(payload, "get") else None
        if rate is not None:
            self.sample_rate = int(_to_numpy(rate[-1] if isinstance(rate, list) else rate).reshape(-1)[-1])
        audio = payload["audio"]
        if isinstance(audio, list):
            fresh = audio[self._items_seen :]
            self._items_seen = len(audio)
            if not fresh:
                return None
            samples = np.concatenate([_to_numpy(part).reshape(-1) for part in fresh])
        else:
            samples = _to_numpy(audio).reshape(-1)
            if self.cumulative:
                samples = samples[self._samples_seen :]
        self._samples_seen += len(samples)
        return samples.astype(np.float32, copy=False)


def _connectors(deploy_config: str | None) -> list[dict[str, Any]]:
    """Every connector a deploy profile file declares (none for one of vllm-omni's own, named bare)."""
    if not deploy_config or not os.path.exists(deploy_config):
        return []
    import yaml

    with open(deploy_config, encoding="utf-8") as f:
        connectors = (yaml.safe_load(f) or {}).get("connectors") or {}
    return [connector or {} for connector in connectors.values()]


def _connector_extras(deploy_config: str | None) -> list[dict[str, Any]]:
    return [connector.get("extra") or {} for connector in _connectors(deploy_config)]


def connector_names(deploy_config: str | None) -> set[str]:
    return {str(connector.get("name")) for connector in _connectors(deploy_config) if connector.get("name")}


WINDOW_SETTINGS = frozenset(
    {"codec_chunk_frames", "initial_codec_chunk_frames", "codec_chunk_ramp", "codec_chunk_adaptive"}
)


def codec_windows(deploy_config: str | None) -> CodecWindows:
    """The window schedule a deploy profile's connector settings give (vllm-omni's own without one). A profile that
    leaves the first window to vllm-omni (sized by load) is read as its smallest, 1 frame."""
    windows = VLLM_OMNI_DEFAULT
    for extra in _connector_extras(deploy_config):
        if WINDOW_SETTINGS & set(extra):
            steady = int(extra.get("codec_chunk_frames") or 25)
            windows = CodecWindows.from_connector_extra(extra) or CodecWindows((1,), steady)
    return windows


def engine_probe_interval_s(deploy_config: str | None) -> float:
    """How often the engine's probes log (the connector's `engine_probe_interval_s`); 0 = off."""
    intervals = [float(extra.get("engine_probe_interval_s") or 0) for extra in _connector_extras(deploy_config)]
    return max(intervals, default=0.0)


def _multimodal(output: Any) -> Any:
    """`OmniRequestOutput.multimodal_output`, falling back where vllm-omni's speech server looks."""
    payload = getattr(output, "multimodal_output", None)
    if payload:
        return payload
    request_output = getattr(output, "request_output", None)
    for completion in getattr(request_output, "outputs", None) or []:
        payload = getattr(completion, "multimodal_output", None)
        if payload:
            return payload
    return None


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float32)
