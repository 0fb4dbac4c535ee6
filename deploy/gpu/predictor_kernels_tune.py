"""Which tiles each of the fused code predictor's kernels (app/engines/omni/stage_plugins/predictor_kernels.py) runs
fastest with on this GPU: every kernel of one layer, and the lm head, at the 0.6B CustomVoice predictor's shape
(hidden 1024, 16 query and 8 key/value heads of 128, MLP 3072, 2048 codes), bfloat16, for each row block, timed alone
inside a CUDA graph (Triton's do_bench_cudagraph: what a replay of the talker's graph pays, no launch cost), each
launch on its own copy of the weights (as many as fill four L2s) so that they are read from memory, as in the predictor.

    python3 deploy/gpu/predictor_kernels_tune.py [--rows 1,32] [--budget-s 300] > tune.md

Prints one table per kernel and row count: the six fastest tile choices' microseconds and their ratio to the shipped
choice's (`projection_tiles` for the projections, `normed_tiles` for the normed ones), then the shipped one; stops
trying new choices when the budget is spent (each is a Triton build) and says so. Then the kernels without tiles (the
head norms with attention, the final norm, the draw), as shipped.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import triton
from triton.testing import do_bench_cudagraph

from app.engines.omni.stage_plugins import predictor_kernels as pk

DEVICE = "cuda"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB, SLOTS = 1024, 16, 8, 128, 3072, 2048, 16
QKV_WIDTH = (HEADS + 2 * KV_HEADS) * HEAD_DIM


Tile = tuple[int, int, int, int, int, bool]  # block_n, block_k, warps, stages, split, prefetch

COLD_BYTES = 256 << 20  # each kernel's weights copied until the copies pass this, four times an H200's L2


def tensors(rows: int) -> dict[str, Any]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16) * 0.05

    def cold(*shape: int) -> list[torch.Tensor]:
        """Copies of a weight, launched in turn: each launch reads its weights from memory, as the predictor does
        (its five layers' weights are three times an L2), not from the L2 the launch before filled."""
        one = r(*shape)
        return [one, *(one.clone() for _ in range(max(1, COLD_BYTES // (one.numel() * one.element_size())) - 1))]

    return {
        "x": r(rows, HIDDEN), "ln": torch.ones(HIDDEN, device=DEVICE, dtype=torch.bfloat16),
        "qkv": cold(QKV_WIDTH, HIDDEN),
        "qn": torch.ones(HEAD_DIM, device=DEVICE, dtype=torch.bfloat16),
        "cos": r(64, HEAD_DIM), "sin": r(64, HEAD_DIM), "at": torch.full((rows,), 3, device=DEVICE, dtype=torch.int64),
        "projected": r(rows, QKV_WIDTH), "q": r(rows, HEADS * HEAD_DIM),
        "keys": r(rows, KV_HEADS, SLOTS, HEAD_DIM),
        "values": r(rows, KV_HEADS, SLOTS, HEAD_DIM), "o": cold(HIDDEN, HEADS * HEAD_DIM), "out": r(rows, HIDDEN),
        "gate_up": cold(2 * INTERMEDIATE, HIDDEN), "act": r(rows, INTERMEDIATE), "down": cold(HIDDEN, INTERMEDIATE),
        "head": cold(VOCAB, HIDDEN), "logits": r(rows, VOCAB),
        # the split launches' scratch (the largest: gate/up's four splits) and counters, which they leave at zero
        "partials": torch.empty(4 * 64, 2 * INTERMEDIATE + INTERMEDIATE // 16, device=DEVICE, dtype=torch.float32),
        "counters": torch.zeros(QKV_WIDTH // 16, device=DEVICE, dtype=torch.int32),
    }  # fmt: skip


def launchers(t: dict[str, Any], rows: int, block_m: int) -> dict[str, tuple[Callable[..., Any], int, list]]:
    """Each kernel: a launch taking (block_n, block_k, warps, stages, split, prefetch, weight copy), its weight copies,
    and the choices to try (shipped first)."""
    common = {"BLOCK_M": block_m, "PRECISION": "tf32", "UPCAST": False}
    shipped_warps = 4 if block_m <= 32 else 8

    def qkv(block_n: int, block_k: int, warps: int, stages: int, split: int, prefetch: bool, copy: int) -> None:
        pk.norm_project[(QKV_WIDTH // block_n, split)](
            t["x"], t["ln"], t["qkv"][copy], t["projected"], t["partials"], t["counters"], rows, 1e-6, HIDDEN=HIDDEN,
            N=QKV_WIDTH, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split, PREFETCH=prefetch, num_warps=warps,
            num_stages=stages, **common,
        )  # fmt: skip

    def linear(x: str, w: str, out: str, k: int, n: int, add: bool) -> Callable[..., None]:
        def launch(block_n: int, block_k: int, warps: int, stages: int, split: int, prefetch: bool, copy: int) -> None:
            pk.linear_add[(n // block_n, split)](
                t[x], t[w][copy], t[out], t[out], t["partials"], t["counters"], rows, K=k, N=n, BLOCK_N=block_n,
                BLOCK_K=block_k, ADD=add, SPLIT=split, PREFETCH=prefetch, num_warps=warps, num_stages=stages, **common,
            )  # fmt: skip

        return launch

    def gate_up(block_n: int, block_k: int, warps: int, stages: int, split: int, prefetch: bool, copy: int) -> None:
        pk.norm_gate_up_silu[(INTERMEDIATE // block_n, split)](
            t["out"], t["ln"], t["gate_up"][copy], t["act"], t["partials"], t["counters"], rows, 1e-6, HIDDEN=HIDDEN,
            INTERMEDIATE=INTERMEDIATE, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split, PREFETCH=prefetch,
            num_warps=warps, num_stages=stages, **common,
        )  # fmt: skip

    def tiles(k: int, rows_of_weights: int = 1) -> list[Tile]:
        """The choices for a reduction of `k`, with programs that read `rows_of_weights` weight rows an output (two
        for the normed kernels' pairs): the reduction split in 2 and 4 (more programs reading at once: a one-stream
        projection is bound by the loads in flight), each program's whole share loaded first where it fits 32 KiB
        (prefetch, one stage), or in steps of 128 and 256 three ahead; then the unsplit steps of 64 to 256 three or
        four ahead that the last runs tried (the steps of 512 and 1 024 gained nothing)."""
        split = []
        for n, parts in itertools.product((16, 32, 64), (2, 4)):
            share = k // parts
            if n * share * 2 * rows_of_weights <= 32 * 1024:
                split += [(n, share, w, 1, parts, True) for w in (4, 8)]
            split += [(n, b, 4, 3, parts, False) for b in (128, 256) if share % b == 0]
        whole = [(n, k, w, 1, 1, True) for n in (16, 32) for w in (4, 8) if n * k * 2 * rows_of_weights <= 32 * 1024]
        short = [
            (n, b, w, s, 1, False) for n, b, w, s in itertools.product((16, 32, 64), (64, 128, 256), (4, 8), (3, 4))
        ]
        return [tile for tile in (*split, *whole, *short) if k % tile[1] == 0]

    def normed_shipped(fastest: pk.Tiles, n: int) -> Tile:
        chosen = pk.normed_tiles(fastest, block_m, HIDDEN, n, torch.bfloat16, pk.shared_memory_of(torch.device(DEVICE)))
        return (chosen.block_n, chosen.block_k, shipped_warps, chosen.stages, chosen.split, chosen.prefetch)

    def linear_shipped(k: int) -> Tile:
        chosen = pk.projection_tiles(block_m, k)
        return (chosen.block_n, chosen.block_k, 4, chosen.stages, chosen.split, chosen.prefetch)

    order = lambda first, choices: [first, *[c for c in choices if c != first]]  # noqa: E731
    # norm_project's and norm_gate_up_silu's programs take two products of half their outputs each: at least 32
    normed_choices = [tile for tile in tiles(HIDDEN, 2) if tile[0] >= 32]
    o_proj = linear("q", "o", "out", HEADS * HEAD_DIM, HIDDEN, True)
    down = linear("act", "down", "out", INTERMEDIATE, HIDDEN, True)
    head = linear("out", "head", "logits", HIDDEN, VOCAB, False)
    return {
        "norm_project (q/k/v)": (qkv, len(t["qkv"]), order(normed_shipped(pk.QKV_TILES, QKV_WIDTH), normed_choices)),
        "o_proj (linear_add K 2048)": (
            o_proj,
            len(t["o"]),
            order(linear_shipped(HEADS * HEAD_DIM), tiles(HEADS * HEAD_DIM)),
        ),
        # its products are BLOCK_N wide
        "norm_gate_up_silu": (
            gate_up,
            len(t["gate_up"]),
            order(normed_shipped(pk.GATE_UP_TILES, INTERMEDIATE), tiles(HIDDEN, 2)),
        ),
        "down (linear_add K 3072)": (down, len(t["down"]), order(linear_shipped(INTERMEDIATE), tiles(INTERMEDIATE))),
        "lm head (linear_add, no add)": (head, len(t["head"]), order(linear_shipped(HIDDEN), tiles(HIDDEN))),
    }


def untiled(t: dict[str, Any], rows: int) -> dict[str, Callable[[], None]]:
    """One layer's head norms, rotary embedding, cache write and attention, the final norm and the draw (greedy;
    top-k 50 sampled), launched as the predictor does."""
    codes = torch.zeros(rows, 16, device=DEVICE, dtype=torch.int64)
    uniforms = torch.rand(rows, VOCAB, device=DEVICE, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    embedding = t["head"][0]  # [2048, 1024]: an embedding table's shape

    def attend() -> None:
        pk.norm_rope_attend[(rows, KV_HEADS)](
            t["projected"], t["qn"], t["qn"], t["cos"], t["sin"], t["at"], t["keys"], t["values"], t["q"], 1e-6,
            0.088, rows, HEAD_DIM=HEAD_DIM, Q_HEADS=HEADS, KV_HEADS=KV_HEADS, SLOTS=SLOTS,
        )  # fmt: skip

    def norm() -> None:
        pk.rms_norm[(rows,)](t["x"], t["ln"], t["out"], 1e-6, HIDDEN=HIDDEN)

    def draw(greedy: bool) -> Callable[[], None]:
        def launch() -> None:
            pk.sample_embed[(rows,)](
                t["logits"], t["logits"] if greedy else uniforms, 0 if greedy else VOCAB, codes, 16, 3, embedding,
                t["x"], 1.0 / 0.9, 50, VOCAB=VOCAB, HIDDEN=HIDDEN, EMBED_NEXT=True, GREEDY=greedy,
            )  # fmt: skip

        return launch

    return {
        "norm_rope_attend": attend,
        "rms_norm": norm,
        "sample_embed greedy": draw(True),
        "sample_embed top-k 50": draw(False),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,32", help="streams in the batch, comma-separated")
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    print(
        f"# The fused predictor's kernels alone ({torch.cuda.get_device_name()}, bfloat16, triton {triton.__version__})"
    )
    # each row count's tensors made once, for the tiled kernels and then the others
    made = {rows: tensors(rows) for rows in (int(r) for r in args.rows.split(","))}
    for rows, t in made.items():
        block_m = pk.launch_options(rows, torch.bfloat16)[0]
        for name, (launch, copies, choices) in launchers(t, rows, block_m).items():
            timed: list[tuple[float, Tile]] = []
            for tile in choices:
                if time.monotonic() > deadline:
                    break
                try:
                    launch(*tile, 0)  # builds it
                    torch.cuda.synchronize()

                    def each_copy(
                        launch: Callable[..., Any] = launch, tile: tuple = tile, copies: int = copies
                    ) -> None:
                        for copy in range(copies):
                            launch(*tile, copy)

                    us = do_bench_cudagraph(each_copy, rep=20) * 1e3 / copies
                    timed.append((us, tile))
                except Exception as error:  # a tile this kernel cannot take (registers, shared memory)
                    print(f"<!-- {name} {tile}: {type(error).__name__}: {str(error)[:120]} -->", file=sys.stderr)
            if not timed or timed[0][1] != choices[0]:  # nothing timed, or not the shipped tile to compare with
                print(f"\n## {name}, {rows} rows: the shipped tile {choices[0]} was not timed (stderr)")
                continue
            base = timed[0][0]
            print(f"\n## {name}, {rows} rows (BLOCK_M {block_m}); {len(timed)} of {len(choices)} tiles tried\n")
            print("| BLOCK_N | BLOCK_K | warps | stages | split | prefetch | µs | × shipped |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for us, (n, k, w, s, parts, prefetch) in sorted(timed)[:8]:
                print(f"| {n} | {k} | {w} | {s} | {parts} | {'yes' if prefetch else ''} | {us:.2f} | {us / base:.2f} |")
            print(f"| shipped {timed[0][1]} | | | | | | {base:.2f} | 1.00 |", flush=True)
    if time.monotonic() > deadline:
        print("\n(budget spent: later kernels or tiles not tried)")
    print("\n## The kernels without tiles, as shipped\n\n| kernel | rows | µs |\n| --- | --- | --- |")
    for rows, t in made.items():
        for name, launch in untiled(t, rows).items():
            launch()
            torch.cuda.synchronize()
            print(f"| {name} | {rows} | {do_bench_cudagraph(launch, rep=20) * 1e3:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
