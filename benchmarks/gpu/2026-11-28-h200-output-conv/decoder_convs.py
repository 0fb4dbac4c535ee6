"""Every convolution of the Qwen3-TTS codec decoder (vllm-omni 0.30's Qwen3TTSTokenizerV2Decoder, 12 Hz: pre-conv,
two upsampling stages with a ConvNeXt block each, the input conv, four decoder blocks, the output conv) alone on a
GPU, at one code2wav step of 8 windows of 25 new frames plus 12 of context: the kernels cuDNN runs for each, and the
time a call (CUDA events, median of 5 runs of 20 calls after 5 warm-up calls), bf16, random weights.

    python3 benchmarks/gpu/2026-11-28-h200-output-conv/decoder_convs.py [--cudnn-benchmark] [--batch N]

--cudnn-benchmark: torch.backends.cudnn.benchmark on (cuDNN times its algorithms for each shape on first use);
--batch N: N windows instead of 8.
"""

from __future__ import annotations

import sys

import torch
from cuda_timing import micros_a_call, start
from torch import nn
from torch.profiler import ProfilerActivity, profile

BATCH = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 8
FRAMES = 25 + 12
LATENT, DECODER, RATES, RATIOS = 1024, 1536, (8, 5, 4, 3), (2, 2)


def convs() -> list[tuple[str, nn.Module, int, int]]:
    """(name, module, input channels, input length)."""
    found = [("pre_conv Conv1d(512, 1024, 3)", nn.Conv1d(512, LATENT, 3), 512, FRAMES + 2)]
    length = FRAMES
    for stage, factor in enumerate(RATIOS):
        found.append(
            (
                f"upsample[{stage}] ConvTranspose1d(1024, 1024, {factor}, {factor})",
                nn.ConvTranspose1d(LATENT, LATENT, factor, factor),
                LATENT,
                length,
            )
        )
        length *= factor
        found.append(
            (
                f"upsample[{stage}] ConvNeXt dwconv Conv1d(1024, 1024, 7, groups=1024)",
                nn.Conv1d(LATENT, LATENT, 7, groups=LATENT),
                LATENT,
                length + 6,
            )
        )
    found.append(("decoder[0] Conv1d(1024, 1536, 7)", nn.Conv1d(LATENT, DECODER, 7), LATENT, length + 6))
    channels = DECODER
    for block, rate in enumerate(RATES):
        out = channels // 2
        found.append(
            (
                f"block[{block}] ConvTranspose1d({channels}, {out}, {2 * rate}, {rate})",
                nn.ConvTranspose1d(channels, out, 2 * rate, rate),
                channels,
                length,
            )
        )
        length *= rate
        for dilation in (1, 3, 9):
            found.append(
                (
                    f"block[{block}] Conv1d({out}, {out}, 7, dilation={dilation})",
                    nn.Conv1d(out, out, 7, dilation=dilation),
                    out,
                    length + 6 * dilation,
                )
            )
        found.append((f"block[{block}] Conv1d({out}, {out}, 1) ×3", nn.Conv1d(out, out, 1), out, length))
        channels = out
    found.append(("output Conv1d(96, 1, 7)", nn.Conv1d(channels, 1, 7), channels, length + 6))
    return found


def main() -> None:
    start()
    print("| conv | input | µs a call | kernels |")
    print("| --- | --- | --- | --- |")
    with torch.inference_mode():
        for name, module, channels, length in convs():
            module = module.to("cuda", torch.bfloat16)
            samples = torch.randn(BATCH, channels, length, device="cuda", dtype=torch.bfloat16)
            micros = micros_a_call(module, samples, warmup=5, calls=20)
            with profile(activities=[ProfilerActivity.CUDA]) as trace:
                module(samples)
                torch.cuda.synchronize()
            names = [e.key[:48] for e in trace.key_averages() if e.device_type.name == "CUDA" and "Memset" not in e.key]
            print(f"| {name} | {BATCH}×{channels}×{length} | {micros:.0f} | {'; '.join(names)} |")


if __name__ == "__main__":
    main()
