"""deploy/gpu/window_producer_bench.py on the GPU host's vllm-omni 0.30: its window producer fed a few staggered
streams through the shipped profile's ramp, each step timed, and the stacked build of a window's codes equal to
vllm-omni's own, frames on the host and on the GPU."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gpu.support import torch_with_vllm_omni_030
from tests.support.scripts import gpu_script

BENCH = gpu_script("window_producer_bench")


@pytest.fixture(scope="module")
def torch() -> Any:
    return torch_with_vllm_omni_030("talker's window producer")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_producer_makes_the_ramps_windows_and_the_stacked_codes_are_vllm_omnis(torch: Any, device: str) -> None:
    from vllm_omni.model_executor.stage_input_processors.qwen3_tts import talker2code2wav_async_chunk_batch

    extra = BENCH.connector_extra(BENCH.PROFILE)
    measured = BENCH.run(torch, talker2code2wav_async_chunk_batch, extra, 4, 120, 40, device)
    assert len(measured["step_ms"]) == 120 and all(ms > 0 for ms in measured["step_ms"])
    windows = measured["windows"]
    assert len(windows) >= 8 and all(len(window) == 25 for window in windows)  # each ended stream's last 25 frames
    theirs, ours = BENCH.window_build_ms(torch, [[frame.cpu() for frame in window] for window in windows])
    assert theirs > 0 and ours > 0  # each window checked equal inside, or it exits
    frames = [torch.randint(0, 2048, (16,), dtype=torch.long) for _ in range(7)]
    stacked = BENCH.window_codes_stacked(torch, frames)
    assert torch.equal(stacked, BENCH.window_codes_as_vllm_omni(torch, frames))
    assert stacked.tolist()[:7] == [frame[0].item() for frame in frames]  # code by code, each code's frames in order


def same(torch: Any, a: Any, b: Any) -> bool:
    """Equal payloads: tensors of the same dtype, shape and values, the rest field by field."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(torch, a[k], b[k]) for k in a)
    fields = getattr(type(a), "__struct_fields__", None)
    if fields is not None:
        return type(a) is type(b) and all(same(torch, getattr(a, f), getattr(b, f)) for f in fields)
    if hasattr(a, "__dict__"):
        return type(a) is type(b) and same(torch, vars(a), vars(b))
    return bool(a == b)


def steps_same(torch: Any, theirs: list[list[Any]], ours: list[list[Any]]) -> bool:
    return len(theirs) == len(ours) and all(
        len(a) == len(b) and all(same(torch, x, y) for x, y in zip(a, b, strict=True))
        for a, b in zip(theirs, ours, strict=True)
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_frames_kept_as_lists_give_vllm_omnis_payloads_window_for_window(torch: Any, device: str) -> None:
    """SPEECH_OMNI__FRAMES_AS_LISTS (app/engines/omni/stage_plugins/talker_windows.py): every step's payloads those
    of vllm-omni's batch builder, on the same frames through the shipped ramp, streams starting, in steady windows
    and ending; and with reference codes joining a stream's first window (2-D and flat), a frame flagged invalid left
    out; the frames kept as lists indeed (as tensors by vllm-omni's)."""
    from vllm_omni.model_executor.stage_input_processors import qwen3_tts

    extra = BENCH.connector_extra(BENCH.PROFILE)
    steps = []
    for producer in BENCH.producers(qwen3_tts).values():
        torch.manual_seed(0)
        steps.append(BENCH.run(torch, producer, extra, 8, 300, 60, device, keep_payloads=True)["payloads"])
    windows = [payload for step in steps[0] for payload in step if payload is not None]
    assert len(windows) > 150
    assert steps_same(torch, *steps)

    def reference(index: int) -> Any:
        codes = torch.randint(0, 2048, (30, 16), device=device)
        return codes.reshape(-1) if index == 2 else codes  # vllm-omni takes flat reference codes too

    made, kept = [], []
    for producer in BENCH.producers(qwen3_tts).values():
        torch.manual_seed(1)
        manager = BENCH.transfer_manager(extra)
        streams = [BENCH.Stream(index, 0) for index in range(3)]
        payloads = []
        for step in range(40):
            outputs = [
                {
                    "codes": {
                        "audio": torch.randint(0, 2048, (1, 16), device=device),
                        **({"ref": reference(index)} if step == 0 else {}),
                    },
                    "meta": {
                        "codec_frame_valid": torch.tensor([not (index == 1 and step == 5)], device=device),
                    },
                }
                for index in range(len(streams))
            ]
            requests = [stream.request(step == 39) for stream in streams]
            made_now = producer(manager, outputs, requests, [step == 39] * len(streams))
            for stream, payload in zip(streams, made_now, strict=True):
                if payload is not None:
                    manager.put_req_chunk[stream.request_id] += 1
                    manager.ramp_chunk_count[stream.request_id] += 1
            payloads.append(made_now)
        made.append(payloads)
        kept.append(manager.code_prompt_token_ids[streams[0].request_id])
    first = [payload for payload in made[0][0] if payload is not None]
    assert len(first) == 3 and all(int(payload.meta.ref_context_size) == 30 for payload in first)
    assert isinstance(kept[0][0], torch.Tensor) and type(kept[1][0]) is list and kept[1][0] == kept[0][0].tolist()
    assert steps_same(torch, *made)
