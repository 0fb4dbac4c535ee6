"""The talker's window producer for vllm-omni 0.30.0 (stage 0 of its Qwen3-TTS pipeline, `async_chunk`): vllm-omni's
own `talker2code2wav_async_chunk`, loaded by the talker process by dotted path, with one change a deploy profile can
ask for.

vllm-omni's adaptive windows (`codec_chunk_adaptive: true` in the connector's `extra`) size every window after the
first from the stream's lead over its listener: the audio sent less the time since its first audio, against the
talker's measured time per frame. A window only as large as the lead allows, growing once the stream is ahead, up to
`codec_chunk_frames`: windows sized by each stream's deadline rather than a fixed ramp. Its first window, though,
vllm-omni sizes by load (2 up to 16 frames as the talker fills, whatever `initial_codec_chunk_frames` says), which made
first audio 2-9x later under load when measured against the shipped ramp's one-frame first window.

With `codec_adaptive_first_frames: N` beside `codec_chunk_adaptive: true`, every stream's first window is N frames (a
request's own `initial_codec_chunk_frames` wins), and vllm-omni sizes the rest. It only fills vllm-omni's per-stream
cache of first-window sizes (`_cached_ic`, which vllm-omni fills itself for a stream without an entry and empties when
the stream ends) before vllm-omni reads it; the windows themselves, their emission and their payloads are vllm-omni's.
While a request timeline records (`timeline.py`), it also records each window it hands on. The service registers it as
stage 0's producer by default, for SPEECH_OMNI__FRAMES_AS_LISTS; with that off, only where the profile sets both,
or where the server has a profiler directory (`engine.py`, `pipeline_with_stage_plugins`), and elsewhere vllm-omni's
own runs. vllm-omni's native data plane builds a talker step's payloads with the producer module's `<name>_batch`
peer (one copy of the step's frames for all streams): this module has one too, which hands the step to vllm-omni's.

With SPEECH_OMNI__FRAMES_AS_LISTS (VARIABLE in the stage processes), the batch peer keeps each stream's frames as
lists of their codes, as vllm-omni's connector runtime declares them (`code_prompt_token_ids: dict[str,
list[list[int]]]`), where vllm-omni's batch builder keeps each frame as a tensor: its per-stream producer builds a
window's codes element by element (`torch.tensor([frames[f][q] for q ... for f ...])`, written for lists: its reference
codes join a window as lists), which over tensors reads each of a steady window's 400 codes as a tensor of its own, on
the data plane's thread, holding the GIL the talker's step loop waits for. The windows' codes are the same tensors.
Otherwise the step is vllm-omni's, line for line (`batch_with_frames_as_lists`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from app.engines.omni.stage_plugins import lever_switch, timeline

VARIABLE = "SPEECH_OMNI_FRAMES_AS_LISTS"  # set by the engine for the stage processes

FIRST_FRAMES = "codec_adaptive_first_frames"


def connector_extra(transfer_manager: Any) -> dict[str, Any]:
    """The connector's `extra` settings, as vllm-omni's producer reads them (a config with `extra`, or that itself)."""
    config = getattr(getattr(transfer_manager, "connector", None), "config", None) or {}
    extra = config.get("extra", config) if isinstance(config, dict) else {}
    return extra if isinstance(extra, dict) else {}


def requested_first_frames(request: Any) -> int | None:
    """The request's own `initial_codec_chunk_frames`, where it carries one (vllm-omni's additional information)."""
    entries = getattr(getattr(request, "additional_information", None), "entries", None)
    if not entries or "initial_codec_chunk_frames" not in entries:
        return None
    data = getattr(entries["initial_codec_chunk_frames"], "list_data", None)
    return int(data[0]) if data is not None and len(data) == 1 and int(data[0]) > 0 else None


def first_window_frames(extra: Mapping[str, Any], request: Any) -> int | None:
    """The first window to give this stream (`request` None: any stream that does not ask for its own): None where
    vllm-omni decides alone."""
    configured = int(extra.get(FIRST_FRAMES) or 0)
    if not extra.get("codec_chunk_adaptive") or configured <= 0:
        return None
    return requested_first_frames(request) or configured


def set_first_window(transfer_manager: Any, request: Any) -> None:
    """Fill vllm-omni's first-window cache for this stream where the profile fixes it and no size is chosen yet."""
    first = first_window_frames(connector_extra(transfer_manager), request)
    if first is not None:
        cache = getattr(transfer_manager, "_cached_ic", None)
        if cache is None:
            cache = transfer_manager._cached_ic = {}
        cache.setdefault(request.external_req_id, first)


def talker2code2wav_async_chunk(
    transfer_manager: Any, multimodal_output: Any, request: Any, is_finished: bool = False
) -> Any:
    # imported here: the stage process has vllm-omni; the service and its tests import this module without it
    from vllm_omni.model_executor.stage_input_processors import qwen3_tts

    # only where vllm-omni goes on to its cache (it returns at once on a call with no output before the end): a late
    # call can then never leave an entry behind after vllm-omni's clean-up
    if isinstance(multimodal_output, Mapping) or is_finished or request.is_finished():
        set_first_window(transfer_manager, request)
    payload = qwen3_tts.talker2code2wav_async_chunk(transfer_manager, multimodal_output, request, is_finished)
    record_sent([request], [payload])
    return payload


def talker2code2wav_async_chunk_batch(
    transfer_manager: Any, pooling_outputs: list[Any], requests: list[Any], is_finished: list[bool]
) -> list[Any]:
    """One talker step's payloads, as vllm-omni's batch builder makes them (it calls its own per-stream producer for
    every stream of the step), with each stream's first window set first."""
    from vllm_omni.model_executor.stage_input_processors import qwen3_tts

    for request in requests:
        set_first_window(transfer_manager, request)
    if frames_as_lists():
        payloads = batch_with_frames_as_lists(qwen3_tts, transfer_manager, pooling_outputs, requests, is_finished)
    else:
        payloads = qwen3_tts.talker2code2wav_async_chunk_batch(transfer_manager, pooling_outputs, requests, is_finished)
    record_sent(requests, payloads)
    return payloads


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(VARIABLE) == "1"


def frames_as_lists() -> bool:
    """On by its setting, and, where a benchmark switches levers in one start, while its file names it."""
    return enabled(os.environ) and lever_switch.for_process(os.environ).on("frames_as_lists")


def batch_with_frames_as_lists(
    upstream: Any, transfer_manager: Any, pooling_outputs: list[Any], requests: list[Any], is_finished: list[bool]
) -> list[Any]:
    """vllm-omni 0.30's `talker2code2wav_async_chunk_batch` (`upstream`: its module), step for step, but each stream's
    new frame appended as a list of its codes, not a tensor: the step's frames and new reference codes copied to the
    host together, then vllm-omni's per-stream producer for every stream (it builds and sizes the windows)."""
    if not (len(pooling_outputs) == len(requests) == len(is_finished)):
        raise ValueError("batch codec inputs must have identical lengths")
    request_payload = getattr(transfer_manager, "request_payload", None)
    if request_payload is None:
        request_payload = transfer_manager.request_payload = {}
    tensor = upstream.torch.Tensor
    selected: list[Any] = []
    destinations: list[tuple[str, str, tuple[int, ...]]] = []
    for pooling_output, request in zip(pooling_outputs, requests, strict=True):
        if not isinstance(pooling_output, Mapping):
            continue
        request_id = request.external_req_id
        frame = upstream._extract_last_frame(pooling_output)
        if frame is not None and upstream._should_append_async_frame(pooling_output, frame):
            selected.append(frame)
            destinations.append(("frame", request_id, tuple(frame.shape)))
        ref_code = pooling_output.get("codes", {}).get("ref")
        if isinstance(ref_code, tensor) and ref_code.numel() > 0 and request_payload.get(request_id) is None:
            selected.append(ref_code)
            destinations.append(("ref", request_id, tuple(ref_code.shape)))
    copied = upstream._copy_async_chunk_tensors_to_cpu(selected)
    for value, (kind, request_id, shape) in zip(copied, destinations, strict=True):
        if kind == "frame":
            transfer_manager.code_prompt_token_ids[request_id].append(value.reshape(-1).tolist())
        else:
            request_payload[request_id] = value.reshape(shape).contiguous()
    return [
        upstream.talker2code2wav_async_chunk(
            transfer_manager=transfer_manager, multimodal_output={}, request=request, is_finished=finished
        )
        for request, finished in zip(requests, is_finished, strict=True)
    ]


def record_sent(requests: list[Any], payloads: Any) -> None:
    """While a timeline records: each window the talker hands on (a payload; None where the step made no window)."""
    recorder = timeline.recorder("talker")
    if not recorder.on() or not isinstance(payloads, list):
        return
    for request, payload in zip(requests, payloads, strict=False):
        if payload is not None:
            request_id = getattr(request, "external_req_id", None) or getattr(request, "request_id", "")
            recorder.record("window_sent", str(request_id))
