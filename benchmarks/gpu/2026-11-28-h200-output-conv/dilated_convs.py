"""The codec decoder's dilated convs (Conv1d(C, C, 7, dilation=3 or 9) in each decoder block), as vllm-omni runs them
and folded: the input viewed as (B, C, L / d, d), where the dilated conv is an undilated conv2d with a (7, 1) kernel
along L / d, one column per phase (exact: every output sample is the same sum). Kernels and time a call, bf16.

    python3 benchmarks/gpu/2026-11-28-h200-output-conv/dilated_convs.py [--cudnn-benchmark]

--cudnn-benchmark: torch.backends.cudnn.benchmark on (cuDNN times its algorithms for each shape on first use).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from cuda_timing import micros_a_call, start
from torch.profiler import ProfilerActivity, profile

FRAMES = 25 + 12
BLOCKS = ((768, 32), (384, 160), (192, 640), (96, 1920))  # channels, samples a codec frame in each block


def folded(x: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
    d = conv.dilation[0]
    batch, channels, length = x.shape
    pad = -length % d
    x = F.pad(x, (0, pad)).view(batch, channels, (length + pad) // d, d)
    out = F.conv2d(x, conv.weight.unsqueeze(3), conv.bias)
    return out.reshape(batch, out.shape[1], -1)[..., : length - (conv.kernel_size[0] - 1) * d]


def main() -> None:
    start()
    print("| conv | input | dilated µs | folded µs | max diff | dilated kernel | folded kernel |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with torch.inference_mode():
        for batch in (8, 1):
            for channels, per_frame in BLOCKS:
                for d in (3, 9):
                    conv = torch.nn.Conv1d(channels, channels, 7, dilation=d).to("cuda", torch.bfloat16)
                    length = FRAMES * per_frame + 6 * d
                    x = torch.randn(batch, channels, length, device="cuda", dtype=torch.bfloat16)
                    diff = (conv(x).float() - folded(x, conv).float()).abs().max().item()
                    names = []
                    for call in (conv, lambda v, c=conv: folded(v, c)):
                        with profile(activities=[ProfilerActivity.CUDA]) as trace:
                            call(x)
                            torch.cuda.synchronize()
                        heavy = max(
                            (e for e in trace.key_averages() if e.device_type.name == "CUDA"),
                            key=lambda e: e.device_time_total,
                        )
                        names.append(heavy.key[:40])
                    a = micros_a_call(conv, x, warmup=3, calls=10)
                    b = micros_a_call(lambda v, c=conv: folded(v, c), x, warmup=3, calls=10)
                    print(
                        f"| Conv1d({channels}, {channels}, 7, dilation={d}) | {batch}×{channels}×{length} | "
                        f"{a:.0f} | {b:.0f} | {diff:.2g} | `{names[0]}` | `{names[1]}` |"
                    )


if __name__ == "__main__":
    main()
