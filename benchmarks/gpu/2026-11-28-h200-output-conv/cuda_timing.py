"""What these scripts share: how they start (seeded, cuDNN's timing switch from --cudnn-benchmark, a line naming torch,
cuDNN and the GPU) and how they time a CUDA call (CUDA events around `calls` calls after `warmup` calls on one
stream, the median of 5 such runs, in µs a call)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import torch


def micros_a_call(call: Callable[[torch.Tensor], object], x: torch.Tensor, warmup: int, calls: int) -> float:
    runs = []
    for _ in range(5):
        for _ in range(warmup):
            call(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call(x)
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(runs)


def start() -> None:
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = "--cudnn-benchmark" in sys.argv
    print(
        f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}, "
        f"cudnn.benchmark={torch.backends.cudnn.benchmark}\n"
    )
