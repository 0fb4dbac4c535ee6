"""The codec decoder's dilated convs four ways, each alone on a GPU: as cuDNN's heuristics run them; folded into an
undilated conv1d over the input's phases as a batch (`app/engines/omni/stage_plugins/dilated_convs.py`, heuristics
again); folded as dilated_convs.py here does it (a conv2d over the (L / d, d) view, no copies; heuristics); and with
cuDNN timing its algorithms (`cudnn.benchmark`), with what that timing costs the first call of a shape. Also how far
the batch-folded result is from the direct one, in float32 without TF32 (the summation order only) and in bf16.

    PYTHONPATH=. python3 benchmarks/gpu/2026-11-28-h200-output-conv/dilated_fold.py [--batch N]

The shapes are decoder_convs.py's (one code2wav step of N windows of 25 new frames plus 12 of context; 8 unless
--batch). bf16, random weights; µs a call as cuda_timing.py times it. Each way runs in a process of its own: PyTorch
keeps the plan cuDNN ran first for a shape, whichever way it was chosen, and a later timing would not replace it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from cuda_timing import micros_a_call, start
from decoder_convs import BATCH, convs
from dilated_convs import folded as folded_2d
from torch.profiler import ProfilerActivity, profile

from app.engines.omni.stage_plugins.dilated_convs import can_fold, folded_conv1d

WAYS = ("heuristics", "folded", "folded_2d", "timed")


def kernels(call: Callable[[torch.Tensor], object], x: torch.Tensor) -> str:
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        call(x)
        torch.cuda.synchronize()
    return "; ".join(e.key[:40] for e in trace.key_averages() if e.device_type.name == "CUDA" and "Memset" not in e.key)


def relative_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


def measure(way: str) -> list[dict[str, Any]]:
    """One way over every dilated conv of the decoder, in this process."""
    start()
    torch.backends.cudnn.benchmark = way == "timed"
    rows = []
    with torch.inference_mode():
        # cuDNN's handle and lazily loaded kernels on a shape of no interest, so that the first row's first call is
        # the shape's own cost
        warm = torch.nn.Conv1d(64, 64, 3, dilation=2).to("cuda", torch.bfloat16)
        folded_conv1d(torch.randn(1, 64, 100, device="cuda", dtype=torch.bfloat16), warm)
        torch.cuda.synchronize()
        for name, module, channels, length in convs():
            if not can_fold(module):
                continue
            conv = module.to("cuda", torch.bfloat16)
            x = torch.randn(BATCH, channels, length, device="cuda", dtype=torch.bfloat16)
            call = {
                "folded": lambda t, c=conv: folded_conv1d(t, c),
                "folded_2d": lambda t, c=conv: folded_2d(t, c),
            }.get(way, conv)
            torch.cuda.synchronize()
            began = time.perf_counter()
            call(x)  # the shape's first call: with the timing on, cuDNN times its algorithms here
            torch.cuda.synchronize()
            first_ms = (time.perf_counter() - began) * 1000
            row = {"conv": name, "input": "×".join(str(n) for n in x.shape), "first_ms": first_ms}
            row["micros"] = micros_a_call(call, x, warmup=5, calls=20)
            row["kernels"] = kernels(call, x)
            if way == "folded":
                row["bf16"] = relative_diff(folded_conv1d(x, conv), conv(x))
                strict, torch.backends.cudnn.allow_tf32 = conv.float(), False
                row["float32"] = relative_diff(folded_conv1d(x.float(), strict), strict(x.float()))
                torch.backends.cudnn.allow_tf32 = True
                conv.to(torch.bfloat16)
            rows.append(row)
    return rows


def main() -> None:
    if "--way" in sys.argv:
        print(json.dumps(measure(sys.argv[sys.argv.index("--way") + 1])))
        return
    results, header = {}, ""
    for way in WAYS:
        command = [sys.executable, __file__, *sys.argv[1:], "--way", way]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode:
            sys.exit(f"{way} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
        results[way] = json.loads(run.stdout.strip().splitlines()[-1])
        header = run.stdout.splitlines()[0]
    print(header.replace("cudnn.benchmark=False", f"batch {BATCH}") + "\n")
    print(
        "| conv | input | heuristics µs | folded µs | folded 2d µs | timed µs | first call ms: heuristics · folded"
        " · folded 2d · timed | folded − direct, of the largest output: float32 · bf16 | folded's kernels |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for heuristic, folded, flat, timed in zip(*(results[way] for way in WAYS), strict=True):
        firsts = " · ".join(f"{row['first_ms']:.1f}" for row in (heuristic, folded, flat, timed))
        print(f"| {heuristic['conv']} | {heuristic['input']} | {heuristic['micros']:.0f} | {folded['micros']:.0f} |"
              f" {flat['micros']:.0f} | {timed['micros']:.0f} | {firsts} | {folded['float32']:.1e} ·"
              f" {folded['bf16']:.1e} | {folded['kernels']} |")  # fmt: skip


if __name__ == "__main__":
    main()
