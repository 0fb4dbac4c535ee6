"""What each of code2wav's decoder CUDA graphs costs in GPU memory, and what it saves in time, shape by shape.

vllm-omni 0.26.0's code2wav captures one CUDA graph of the Qwen3-TTS codec decoder per (batch, frames) shape that a
deploy profile lists (`decode_cudagraph_capture_sizes` x `decode_cudagraph_batch_sizes`, plus
`decode_cudagraph_extra_capture_shapes`), in float32, when it loads its weights. Each graph keeps its activations
in a memory pool for as long as the server runs, so the list must fit beside the stage's share of the GPU. This
builds the decoder as code2wav does (float32, SnakeBeta caches), and for every shape asked for measures:

- `eager_ms`: one decoder call without a graph (what a window of a shape with no graph costs), median of `--reps`;
- `graph_ms`: one replay of the shape's graph, median of `--reps`;
- `pool_mib`: the memory the graph's own pool holds (captured alone, in a private pool).

It then captures the shapes all together into one shared pool, in ascending order, and reports the pool they hold.
That is not what code2wav holds: its own warm-up of ten shapes reserved about the sum of their own pools (14.0 GiB
against 3.0 shared, loadtest/results/gpu/2026-11-25-h100-faithful), so set the sum of `pool_mib` against the
stage's share of the GPU. Random weights (as vLLM's dummy loader draws them): timing and memory depend on the shapes
only.

    python3 -m app.tools.qwen3_tts_model_dir /tmp/model --variant custom_voice
    python3 deploy/gpu/decoder_graph_bench.py /tmp/model --shapes 1x25,1x97,4x97,16x97 --out bench.json

Needs a GPU host where torch, vllm and vllm-omni 0.26.0 import.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

MIB = 2**20


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'1x25,16x97' -> [(1, 25), (16, 97)]: batch x frames."""
    shapes = []
    for item in text.split(","):
        batch, _, frames = item.strip().partition("x")
        if not (batch.isdigit() and frames.isdigit() and int(batch) > 0 and int(frames) > 0):
            raise argparse.ArgumentTypeError(f"shape {item.strip()!r}: want BATCHxFRAMES, both positive integers")
        shapes.append((int(batch), int(frames)))
    return shapes


def build_decoder(model_dir: Path) -> Any:
    """The decoder as code2wav sets it up after loading its weights: float32 on the GPU, SnakeBeta caches."""
    import torch
    from codec_weights import random_decoder  # this script's neighbour (scripts run with their folder on sys.path)

    decoder = random_decoder(model_dir)
    decoder.to(device="cuda", dtype=torch.float32)
    decoder.precompute_snake_caches()
    return decoder.eval()


def _median_ms(run: Any, reps: int) -> float:
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000.0)
    return round(statistics.median(times), 3)


def measure_shape(decoder: Any, batch: int, frames: int, reps: int) -> dict[str, Any]:
    import torch

    codes = torch.randint(
        0, decoder.config.codebook_size, (batch, decoder.config.num_quantizers, frames), device="cuda"
    )
    with torch.no_grad():
        decoder(codes)  # warm-up: cuDNN picks its algorithms
        eager_ms = _median_ms(lambda: decoder(codes), reps)
        torch.cuda.empty_cache()
        reserved_before = torch.cuda.memory_reserved()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # a private pool: this graph's memory alone
            decoder(codes)
        pool_mib = (torch.cuda.memory_reserved() - reserved_before) / MIB
        graph.replay()
        graph_ms = _median_ms(graph.replay, reps)
    del graph
    torch.cuda.empty_cache()
    return {
        "batch": batch,
        "frames": frames,
        "eager_ms": eager_ms,
        "graph_ms": graph_ms,
        "graph_ms_per_window": round(graph_ms / batch, 3),
        "eager_ms_per_window": round(eager_ms / batch, 3),
        "pool_mib": round(pool_mib, 1),
    }


def measure_shared_pool(decoder: Any, shapes: list[tuple[int, int]]) -> dict[str, Any]:
    """The shapes captured into one shared pool in ascending order, as vllm-omni 0.26.0's wrapper captures them
    (which in code2wav itself held about their sum instead)."""
    import torch

    torch.cuda.empty_cache()
    reserved_before = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    with torch.no_grad():
        for batch, frames in sorted(shapes):
            codes = torch.zeros(batch, decoder.config.num_quantizers, frames, dtype=torch.long, device="cuda")
            decoder(codes)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                decoder(codes)
            graphs.append((graph, codes))
    pool_mib = (torch.cuda.memory_reserved() - reserved_before) / MIB
    del graphs
    torch.cuda.empty_cache()
    return {"shapes": [list(s) for s in sorted(shapes)], "shared_pool_mib": round(pool_mib, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a directory written by app.tools.qwen3_tts_model_dir")
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=parse_shapes("1x25,1x97,2x97,4x97,8x97,16x97"),
        help="BATCHxFRAMES,... measured one by one",
    )
    parser.add_argument(
        "--shared",
        type=parse_shapes,
        default=None,
        help="BATCHxFRAMES,... captured together into one pool (default: --shapes)",
    )
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tf32", action="store_true", help="TF32 for matmuls and convolutions (decode_enable_tf32)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON too")
    args = parser.parse_args(argv)
    if not (args.model_dir / "speech_tokenizer" / "config.json").is_file():
        parser.error(f"{args.model_dir}: no speech_tokenizer/config.json (make it with app.tools.qwen3_tts_model_dir)")

    import torch

    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    decoder = build_decoder(args.model_dir)
    params = sum(p.numel() for p in decoder.parameters())
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "tf32": args.tf32,
        "decoder_params": params,
        "shapes": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "shapes"}), flush=True)
    for batch, frames in args.shapes:
        row = measure_shape(decoder, batch, frames, args.reps)
        report["shapes"].append(row)
        print(json.dumps(row), flush=True)
    report["shared"] = measure_shared_pool(decoder, args.shared or args.shapes)
    print(json.dumps(report["shared"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
