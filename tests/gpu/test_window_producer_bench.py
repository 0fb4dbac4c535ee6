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
