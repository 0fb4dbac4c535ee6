"""Stand-ins for the vllm / vllm-omni types the omni engine touches, mirroring vllm 0.30.0 + vllm-omni 0.30.0.

vllm-omni cannot run on the CPU machines where CI runs; these mirror, field for field, what the engine uses:
- `vllm.sampling_params.RequestOutputKind` and the `SamplingParams` fields it reads or sets;
- `vllm_omni.outputs.mm_outputs.MultimodalPayload` (a Mapping: "audio", "sr") and `MultimodalCompletionOutput`;
- `vllm_omni.outputs.OmniRequestOutput` (request_id, finished, stage_id, final_output_type, request_output, metrics,
  error, and the `multimodal_output` property that looks at the completion output first);
- `vllm_omni.entrypoints.utils.coerce_param_message_types` (DELTA when streaming, FINAL_ONLY otherwise);
- `vllm.inputs.tokens_input`;
- `vllm_omni.AsyncOmni` (`vllm_omni/entrypoints/async_omni.py`): `default_sampling_params_list` (CUMULATIVE, as the
  engine builds them), `generate(prompt, sampling_params=None, request_id="", *, sampling_params_list,
  output_modalities, arrival_time, ...)` as an async generator whose early close aborts the request, `abort` (by the
  caller's request id: 0.30 adds a suffix of its own internally and maps it back), `start_profile(profile_prefix,
  stages)` / `stop_profile(stages)` (recorded in `profiles`), `shutdown`, `errored`, `check_health`.
  A stage's last process dying (`kill_stage`) is what 0.30's orchestrator makes of it (`engine/orchestrator.py`): the
  process is evicted and the requests in flight fail with the process's own error (`_handle_dead_replica`), every
  later one with "Stage-N has no live replica" (`_fail_request_dead_stage`), both raised by AsyncOmni as
  `OmniEngineDeadError`; `errored` stays false (it means the orchestrator thread died, `entrypoints/omni_base.py`),
  and `check_health` raises `EngineDeadError` for the dead stage.
  AsyncOmni's orchestrator is a Python thread of the caller's process, holding the GIL while it handles the stages'
  outputs; `orchestrator_busy_ms` every `orchestrator_period_ms` while requests run models that load. Audio follows
  code2wav's windows (`vllm_omni/model_executor/stage_input_processors/qwen3_tts.py`): 1 frame (or the request's
  `initial_codec_chunk_frames`), then 25-frame windows, then the tail; a profile's `codec_chunk_ramp` or
  `codec_chunk_adaptive` replaces the request's first size. Every frame is sent once (0.30 tracks the frames it has
  emitted per request); N talker tokens make N - 1 frames of 1920 samples at 24 kHz.
Torch tensors are replaced by `FakeTensor`, which has the methods the engine calls (detach, float, cpu, numpy).
"""

from __future__ import annotations

import asyncio
import copy
import enum
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

SAMPLES_PER_FRAME = 1920


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int | None = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    detokenize: bool = True
    extra_args: dict[str, Any] | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE


def coerce_param_message_types(params: list[Any], is_streaming: bool) -> list[Any]:
    kind = RequestOutputKind.DELTA if is_streaming else RequestOutputKind.FINAL_ONLY
    out = []
    for p in params:
        clone = copy.copy(p)
        clone.output_kind = kind
        out.append(clone)
    return out


def tokens_input(prompt_token_ids: list[int], *, prompt: str | None = None, cache_salt: str | None = None) -> dict:
    result: dict[str, Any] = {"type": "token", "prompt_token_ids": prompt_token_ids}
    if prompt is not None:
        result["prompt"] = prompt
    if cache_salt is not None:
        result["cache_salt"] = cache_salt
    return result


class FakeTensor:
    def __init__(self, values: np.ndarray) -> None:
        self._values = values

    def detach(self) -> FakeTensor:
        return self

    def float(self) -> FakeTensor:
        return FakeTensor(self._values.astype(np.float32))

    def cpu(self) -> FakeTensor:
        return self

    def numpy(self) -> np.ndarray:
        return self._values


class MultimodalPayload(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class MultimodalCompletionOutput:
    index: int = 0
    multimodal_output: MultimodalPayload | None = None


@dataclass
class RequestOutput:
    request_id: str
    outputs: list[MultimodalCompletionOutput] = field(default_factory=list)
    finished: bool = False


@dataclass
class OmniRequestOutput:
    request_id: str
    finished: bool
    stage_id: int = 1
    final_output_type: str = "audio"
    request_output: RequestOutput | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def multimodal_output(self) -> MultimodalPayload | None:
        if self.request_output is not None:
            for completion in self.request_output.outputs:
                if completion.multimodal_output is not None:
                    return completion.multimodal_output
        return None


def windows(frames: int, initial: int = 1, chunk: int = 25, ramp: list[int] | None = None) -> list[int]:
    """code2wav's window sizes for a request of `frames` frames: a first window then `chunk` each, or under a
    `codec_chunk_ramp` the ramp's sizes then `chunk` each (the ramp replaces the first-window size)."""
    schedule = list(ramp) if ramp else [initial]
    sizes: list[int] = []
    rest = frames
    while rest > 0:
        sizes.append(min(schedule[len(sizes)] if len(sizes) < len(schedule) else chunk, rest))
        rest -= sizes[-1]
    return sizes


def connector_extra(deploy_config: object) -> dict[str, Any]:
    """The shared-memory connector's `extra` of a deploy profile file (empty for vllm-omni's own by name)."""
    if not isinstance(deploy_config, str) or not os.path.exists(deploy_config):
        return {}
    with open(deploy_config, encoding="utf-8") as f:
        connectors = (yaml.safe_load(f) or {}).get("connectors") or {}
    return dict(next(iter(connectors.values()), {}).get("extra") or {}) if connectors else {}


class EngineDeadError(RuntimeError):
    """Mirrors vllm.v1.engine.exceptions.EngineDeadError (the engine matches the class name)."""


class OmniEngineDeadError(EngineDeadError):
    """Mirrors vllm_omni.entrypoints.omni_base.OmniEngineDeadError: a request routed through a dead stage."""


class FakeAsyncOmni:
    def __init__(self, *, mode: str = "delta", **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.mode = mode  # delta | cumulative_list | cumulative_tensor
        self.default_sampling_params_list = [
            SamplingParams(
                temperature=0.9,
                top_k=50,
                max_tokens=4096,
                min_tokens=2,
                repetition_penalty=1.05,
                stop_token_ids=[2150],
                detokenize=False,
            ),
            SamplingParams(temperature=0.0, top_k=-1, max_tokens=65536, detokenize=True),
        ]
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []
        self.profiles: list[tuple[str, str | None, list[int] | None]] = []  # start_profile / stop_profile calls
        self.finished: list[str] = []
        self.errored = False
        self.dead_stage: int | None = None  # a stage whose last process died (kill_stage)
        self.health_checks = 0
        self.health_check_error: Exception | None = None  # a check that fails for another reason than a death
        self.die_on_request = False
        self.shut_down = False
        self.step_delay_s = 0.0
        self.in_flight = 0
        self.orchestrator_busy_ms = 0.0
        self.orchestrator_period_ms = 20.0
        self._orchestrator: threading.Thread | None = None

    def _orchestrate(self) -> None:
        """Pure-Python work, as the orchestrator's output processing is: it holds the GIL in the same way."""
        while not self.shut_down:
            if self.in_flight:
                deadline = time.perf_counter() + self.orchestrator_busy_ms / 1000
                while time.perf_counter() < deadline:
                    sum(i * i for i in range(200))
            time.sleep(max(0.0, self.orchestrator_period_ms - self.orchestrator_busy_ms) / 1000)

    def frames_for(self, params: list[SamplingParams], prompt: dict[str, Any]) -> int:
        talker = params[0]
        tokens = talker.max_tokens if talker.min_tokens >= (talker.max_tokens or 0) else min(talker.max_tokens, 40)
        return max(0, tokens - 1)

    async def generate(
        self,
        prompt: dict[str, Any],
        sampling_params: Any = None,
        request_id: str = "",
        *,
        sampling_params_list: list[SamplingParams] | None = None,
        output_modalities: list[str] | None = None,
        **_: Any,
    ) -> AsyncIterator[OmniRequestOutput]:
        if len(sampling_params_list or []) != 2:
            raise ValueError("sampling_params_list must have one entry per stage (2)")
        self.requests.append(
            {
                "prompt": prompt,
                "request_id": request_id,
                "params": sampling_params_list,
                "output_modalities": output_modalities,
            }
        )
        if self.die_on_request:
            self.errored = True
            raise EngineDeadError("EngineCore encountered an issue")
        if self.dead_stage is not None:  # dispatched to a stage with no live process
            raise OmniEngineDeadError(f"Stage-{self.dead_stage} has no live replica")
        if self.orchestrator_busy_ms and self._orchestrator is None:
            self._orchestrator = threading.Thread(target=self._orchestrate, name="orchestrator", daemon=True)
            self._orchestrator.start()
        frames = self.frames_for(sampling_params_list, prompt)
        # stage 0's connector takes a request's first-chunk size from its additional_information, else the profile's;
        # a profile's codec_chunk_ramp replaces both, and codec_chunk_adaptive sizes the first window by load (1 frame
        # on an idle engine) and the next ones by the listener's buffer (here: the ramp, or 25 each)
        extra = connector_extra(self.kwargs.get("deploy_config"))
        initial = (prompt.get("additional_information") or {}).get("initial_codec_chunk_frames", [1])[0]
        if extra.get("codec_chunk_adaptive"):
            initial = 1
        sizes = windows(frames, initial=initial, ramp=extra.get("codec_chunk_ramp"))
        rng = np.random.default_rng(len(self.requests))
        waveform = rng.uniform(-0.5, 0.5, frames * SAMPLES_PER_FRAME).astype(np.float32)
        emitted: list[np.ndarray] = []
        start = 0
        self.in_flight += 1
        try:
            for index, size in enumerate(sizes):
                last = index == len(sizes) - 1
                emitted.append(waveform[start * SAMPLES_PER_FRAME : (start + size) * SAMPLES_PER_FRAME])
                start += size
                try:
                    if self.step_delay_s:
                        await asyncio.sleep(self.step_delay_s)
                    if self.errored:  # the orchestrator died: every request in flight fails, as vLLM's do
                        raise EngineDeadError("EngineCore encountered an issue")
                    if self.dead_stage is not None:  # in flight on the process that died: its own error
                        raise OmniEngineDeadError("EngineCore encountered an issue")
                    yield self._output(request_id, emitted, last)
                except GeneratorExit:
                    self.aborted.append(request_id)
                    raise
                except asyncio.CancelledError:
                    self.aborted.append(request_id)
                    raise
        finally:
            self.in_flight -= 1
        self.finished.append(request_id)
        self.last_waveform = waveform

    def _output(self, request_id: str, emitted: list[np.ndarray], finished: bool) -> OmniRequestOutput:
        sr = FakeTensor(np.array(24000, dtype=np.int32))
        if self.mode == "delta":
            audio: Any = FakeTensor(emitted[-1])
            rates: Any = [sr] * len(emitted)  # DELTA drains audio but not "sr": a growing list
        elif self.mode == "cumulative_list":
            audio = [FakeTensor(part) for part in emitted]
            rates = sr
        else:
            audio = FakeTensor(np.concatenate(emitted))
            rates = sr
        payload = MultimodalPayload({"audio": audio, "sr": rates})
        completion = MultimodalCompletionOutput(multimodal_output=payload)
        return OmniRequestOutput(request_id, finished, request_output=RequestOutput(request_id, [completion], finished))

    def kill_stage(self, stage_id: int = 1) -> None:
        """A stage's only process died (code2wav's, by default): evicted, as 0.30's orchestrator does."""
        self.dead_stage = stage_id

    async def check_health(self) -> None:
        """AsyncOmni's: the orchestrator thread alive, and every stage with a live process."""
        self.health_checks += 1
        if self.health_check_error is not None:
            raise self.health_check_error
        if self.errored:
            raise EngineDeadError("Orchestrator process is not alive")
        if self.dead_stage is not None:
            raise EngineDeadError(f"Stage-{self.dead_stage} has no live replica")

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def start_profile(self, profile_prefix: str | None = None, stages: list[int] | None = None) -> list[Any]:
        self.profiles.append(("start", profile_prefix, stages))
        return []

    async def stop_profile(self, stages: list[int] | None = None) -> list[Any]:
        self.profiles.append(("stop", None, stages))
        return []

    def shutdown(self) -> None:
        self.shut_down = True


def estimate_prompt_len(
    *,
    additional_information: dict[str, list[Any]],
    task_type: str,
    tokenize_prompt: Any,
    codec_language_id: Any,
    spk_is_dialect: Any,
) -> int:
    """A stand-in for Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information (same keywords):
    the real formula runs in the GPU tests; here a length that depends on the text is enough."""
    return 9 + len(tokenize_prompt(additional_information["text"][0]))


class WordTokenizer:
    """Enough of a Hugging Face tokenizer for the estimator: __call__(text, padding=False)["input_ids"]."""

    def __call__(self, text: str, padding: bool = False) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}
