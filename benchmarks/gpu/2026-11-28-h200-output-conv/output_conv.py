"""The codec decoder's output conv (vllm-omni 0.30's `Conv1d(96, 1, 7)` over every output sample) against the same
conv widened to 8 output channels (the first the trained filter, the others zero; channel 0 kept), alone on a GPU:
the kernel cuDNN picks for each, and its time a call, at the shapes code2wav decodes (a window of N new frames plus
12 frames of context, 1920 samples a frame, batches of 1 to 8 windows).

    python3 benchmarks/gpu/2026-11-28-h200-output-conv/output_conv.py

Times: CUDA events around 50 calls after 10 warm-up calls (eager, one stream), the median of 5 such runs, in µs a call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from cuda_timing import micros_a_call, start
from torch.profiler import ProfilerActivity, profile

SAMPLES_PER_FRAME = 1920
CONTEXT_FRAMES = 12  # vllm-omni 0.30's _DOWNSTREAM_CONTEXT_FRAME
KERNEL = 7


class WidenedOutputConv1d(torch.nn.Conv1d):
    """`conv` computed with zero filters up to 8 output channels, its own channels returned."""

    @classmethod
    def of(cls, conv: torch.nn.Conv1d) -> WidenedOutputConv1d:
        widened = cls(conv.in_channels, conv.out_channels, conv.kernel_size, device="meta")
        widened.weight, widened.bias = conv.weight, conv.bias
        return widened

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        added = -self.out_channels % 8
        weight = F.pad(self.weight, (0, 0, 0, 0, 0, added))
        return self._conv_forward(hidden, weight, F.pad(self.bias, (0, added)))[:, : self.out_channels]


def kernels(module: torch.nn.Module, samples: torch.Tensor) -> str:
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        module(samples)
        torch.cuda.synchronize()
    names = [event.key for event in trace.key_averages() if event.device_type.name == "CUDA"]
    return ", ".join(f"`{name[:60]}`" for name in names)


def main() -> None:
    start()
    print("| dtype | windows × frames | samples a window | Conv1d(96, 1, 7) µs | widened µs | ratio | max diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    seen: dict[str, str] = {}
    for dtype in (torch.bfloat16,):
        conv = torch.nn.Conv1d(96, 1, KERNEL, device="cuda", dtype=dtype)
        widened = WidenedOutputConv1d.of(conv)
        for batch in (1, 4, 8):
            for frames in (1, 8, 25):
                length = (frames + CONTEXT_FRAMES) * SAMPLES_PER_FRAME + KERNEL - 1
                samples = torch.randn(batch, 96, length, device="cuda", dtype=dtype)
                with torch.inference_mode():
                    diff = (conv(samples).float() - widened(samples).float()).abs().max().item()
                    one = micros_a_call(conv, samples, warmup=10, calls=50)
                    eight = micros_a_call(widened, samples, warmup=10, calls=50)
                    if batch == 8 and frames == 25:
                        seen["Conv1d(96, 1, 7)"] = kernels(conv, samples)
                        seen["widened"] = kernels(widened, samples)
                name = str(dtype).removeprefix("torch.")
                print(
                    f"| {name} | {batch} × ({frames} + {CONTEXT_FRAMES}) | {length} | {one:.1f} | {eight:.1f} | "
                    f"{eight / one:.2f} | {diff:.2g} |"
                )
    print("\nKernels of one call, 8 windows of 25 + 12 frames:")
    for which, names in seen.items():
        print(f"- {which}: {names}")


if __name__ == "__main__":
    main()
