"""The code predictor's layer, one position per stream over a key/value cache, in five Triton launches, and its final
norm in one: what `SPEECH_OMNI__TALKER_MODEL=fused` runs in the talker's process (`talker_model.FusedCodePredictor`).

At one stream the talker's frame is launch-bound: a profile on an H200 counted 11 kernels per layer and position in
vllm-omni's predictor (5 cuBLAS GEMMs, a split-K reduction, flash attention, 4 Triton kernels) and the GPU busy 44%
of the frame (`benchmarks/gpu/2026-11-28-h200x2-profiles/`). Each launch here streams one projection's weight once and
does the elementwise work around it where the data already is:
- `norm_project`: the input norm and the q/k/v projection; a program per 32 outputs, or 64 where `normed_tiles`
  says (up to 16 streams in bfloat16 on a GPU with room for its loads). (The head norms in the same
  kernel, a program per head, 32 for 132 SMs, took 12.3-13.0 µs at one stream on an H200 with its weights read from
  memory, where the gate/up projection, half again as many weights in 96 programs, took 10.4.)
- `norm_rope_attend`: the q and k head norms, the rotary embedding, the key and value written into the cache's slot,
  and a stream's queries against its slots up to its position; a program per stream and key/value head.
- `linear_add` (twice, through `project`): the output and down projections with the residual added; a program per
  block of outputs (`projection_tiles`: how many, measured per kernel on an H200; also the lm head's, without the
  residual).
- `norm_gate_up_silu`: the post-attention norm, the gate and up projections and silu(gate) * up.
- `rms_norm`: the final norm, a program per stream.

Numerics follow vllm-omni's modules (`common/qwen3_code_predictor.py`): every product is accumulated in float32 and
rounded to the model's dtype where its module's output is, elementwise work in float32. Two roundings differ: a norm's
row scale is applied to the accumulated product rather than to the input before the projection (the same product, one
rounding), and the rotary embedding is one float32 expression rather than three rounded ops. In float32 (projections
in IEEE precision) that is the same arithmetic within float32 rounding.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
import triton.language as tl

from app.engines.omni.stage_plugins import fused_launch
from app.engines.omni.stage_plugins.fused_launch import FusedLaunch

AS_TUNED = FusedLaunch("as-tuned", dependent=False)  # the kernels as tuned one at a time, not dependent launches

try:  # programmatic dependent launch (Hopper and later): a kernel starts while the one before it finishes
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_DEPENDENT_LAUNCH = True
except ImportError:  # a Triton without it: never launched with it (`dependent_launch`), so these are never called
    HAS_DEPENDENT_LAUNCH = False

    @triton.jit
    def gdc_wait():  # type: ignore[no-redef]
        pass

    @triton.jit
    def gdc_launch_dependents():  # type: ignore[no-redef]
        pass


BLOCK_K = 64  # the reduction's step: divides the hidden size, the attention width and the MLP width
BLOCK_N = 32  # outputs a program of the gate/up projection computes (and of the others at more than 32 rows)
MIN_BLOCK_N = 16  # the fewest outputs a program computes (a tensor-core product's least width)


@dataclass(frozen=True)
class Tiles:
    """How a projection (`linear_add`, or a normed one: `norm_project`, `norm_gate_up_silu`) is cut: outputs a
    program computes, the reduction's step, and how many steps its loads run ahead (Triton's software pipeline)."""

    block_n: int
    block_k: int
    stages: int
    # programs a block of outputs is cut into along the reduction, each over its own 1/split of it, the last to finish
    # summing their float32 partials in order: more programs reading the weights at once (a one-stream projection
    # is bound by how many loads are in flight, not by the memory's rate)
    split: int = 1
    # each program's whole share of the weights loaded before anything the launch before wrote is read, so that
    # with a dependent launch the loads run while that launch finishes (its share must fit in registers)
    prefetch: bool = False


def projection_tiles(block_m: int, k: int) -> Tiles:
    """A projection's tiles for a row block of `block_m` over a reduction of `k`. Up to 32 rows, 16 outputs a program
    and steps of 256, four ahead: twice the programs (32 outputs a program left 100 of an H200's 132 SMs idle for the
    output and down projections, 4 and 6 MB of bfloat16 weights) each with more of its weights in flight. Alone on an
    H200, with the weights read from memory as the predictor's are, the output projection took 5.2 µs against 12.4 at
    one stream, the down projection 7.8 against 17.9, the lm head 4.1 against 6.9; at 32 rows these tiles were
    faster too, measured with the weights in the L2 (deploy/gpu/predictor_kernels_tune.py;
    benchmarks/gpu/2026-11-29-h200x2-omni-fused/). Larger row blocks keep the tiles they were checked with (steps of
    256 four deep would pass the shared memory at 128 rows)."""
    if block_m <= 32 and k % 256 == 0:
        return Tiles(block_n=16, block_k=256, stages=4)
    return Tiles(block_n=BLOCK_N, block_k=BLOCK_K, stages=3)


# The normed kernels' tiles (`norm_project`, `norm_gate_up_silu`: the input's RMS norm folded into a projection) up to
# 16 rows in a two-byte dtype: the fastest of the 24 and 36 tried alone on an H200 at one and at eight rows, 10.0 µs
# against 11.2 for the q/k/v projection (64 programs of two 32-wide products, steps of 256) and 10.5 against 11.2 for
# gate/up (four loads ahead instead of three), 0.15 ms of a one-stream frame (deploy/gpu/predictor_kernels_tune.py,
# benchmarks/gpu/2026-11-29-h200x2-omni-fused-tiles/kernels-cold.md). Elsewhere (more rows; float32, whose 256-wide
# steps would pass the shared memory; a GPU with less shared memory a block than the H200's 227 KiB: the q/k/v tiles'
# three steps of loads take about 120 KiB) the tiles the kernels were first checked with.
QKV_TILES = Tiles(block_n=64, block_k=256, stages=3)
GATE_UP_TILES = Tiles(block_n=32, block_k=64, stages=4)
NORMED_TILES = Tiles(block_n=BLOCK_N, block_k=BLOCK_K, stages=3)
# bytes a block can have where the normed tiles were measured: the GPUs of the H100's and H200's kind (227 KiB), not
# an A100 (163 KiB)
MEASURED_SHARED_MEMORY = 200 * 1024


def normed_tiles(fastest: Tiles, block_m: int, k: int, n: int, dtype: torch.dtype, shared_memory: int) -> Tiles:
    """A normed kernel's tiles for a row block of `block_m` over a reduction of `k` into `n` outputs on a GPU whose
    blocks can have `shared_memory` bytes: `fastest` (its measured tiles) where they were measured and divide the
    shapes, `NORMED_TILES` otherwise."""
    measured = block_m <= 16 and dtype.itemsize == 2 and shared_memory >= MEASURED_SHARED_MEMORY
    if measured and k % fastest.block_k == 0 and n % fastest.block_n == 0:
        return fastest
    return NORMED_TILES


# `SPEECH_OMNI__FUSED_KERNELS=split`: each reduction split so that a projection's programs about fill an H200's 132
# SMs (q/k/v 64 blocks in 2, gate/up 96 in 4, the output and down projections 64 in 2 and 3), as sglang-omni's
# predictor cuts its own; `prefetch`: split so that each program's share of the weights (16-32 KiB) is loaded whole
# before its input. Up to 16 streams in a two-byte dtype (their registers), the tuned tiles elsewhere.
SPLIT_TILES = {"q/k/v": Tiles(64, 256, 3, split=2), "gate/up": Tiles(32, 128, 3, split=4)}
PREFETCH_TILES = {
    "q/k/v": Tiles(32, 256, 1, split=4, prefetch=True),
    "gate/up": Tiles(32, 256, 1, split=4, prefetch=True),
}
SPLIT_PROJECTIONS = {2048: 2, 3072: 3}  # reduction width: splits (the output and down projections)
PREFETCH_WIDTH = 1024  # each program's share of a projection's reduction, with prefetch


def divides(tiles: Tiles, k: int, n: int) -> bool:
    """Whether `tiles` cut a reduction of `k` into `n` outputs whole: each split's share a whole number of steps (with
    prefetch, one step: a power of two), the outputs a whole number of blocks."""
    share, rest = divmod(k, tiles.split)
    steps_whole = share == tiles.block_k and pow2(share) if tiles.prefetch else share % tiles.block_k == 0
    return rest == 0 and share > 0 and steps_whole and n % tiles.block_n == 0


def tuned_only(launch: FusedLaunch, block_m: int, dtype: torch.dtype) -> bool:
    """Whether the tuned tiles serve whatever `launch` asks: asked for, or past the split and prefetch tiles' reach
    (more than `LAUNCHED_MAX_ROWS` rows, or a dtype of other than two bytes: their registers)."""
    return launch.kernels == "as-tuned" or block_m > fused_launch.LAUNCHED_MAX_ROWS or dtype.itemsize != 2


def launched_tiles(
    launch: FusedLaunch, block_m: int, dtype: torch.dtype, hidden: int, qkv_width: int, intermediate: int
) -> tuple[Tiles | None, Tiles | None]:
    """The q/k/v and gate/up kernels' tiles that `launch` asks for at this row block and dtype, for a model of these
    widths; None for the tuned ones (asked for, or where the asked-for ones do not divide the widths)."""
    if tuned_only(launch, block_m, dtype):
        return None, None
    chosen = SPLIT_TILES if launch.kernels == "split" else PREFETCH_TILES
    qkv, gate_up = chosen["q/k/v"], chosen["gate/up"]
    return (
        qkv if divides(qkv, hidden, qkv_width) else None,
        gate_up if divides(gate_up, hidden, intermediate) else None,
    )


def launched_projection(launch: FusedLaunch, block_m: int, k: int, n: int, dtype: torch.dtype, split: bool) -> Tiles:
    """A projection's (`linear_add`'s) tiles for a reduction of `k` into `n` outputs as `launch` asks, where it may be
    `split`; the tuned ones where those do not divide the shape."""
    tuned = projection_tiles(block_m, k)  # never split
    if tuned_only(launch, block_m, dtype):
        return tuned
    if launch.kernels == "split":
        asked = replace(tuned, split=SPLIT_PROJECTIONS.get(k, 1) if split else 1)
    else:
        parts = k // PREFETCH_WIDTH if split else 1
        asked = Tiles(block_n=16, block_k=PREFETCH_WIDTH, stages=1, split=max(parts, 1), prefetch=True)
    return asked if divides(asked, k, n) else tuned


@functools.cache
def shared_memory_of(device: torch.device) -> int:
    """The shared memory a block can opt in to on `device` (bytes); 0 for anything but a CUDA device."""
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", 0))


@triton.jit
def product(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a b^T on the tensor cores; with UPCAST (Triton's interpreter, whose dot misreads bfloat16) in float32."""
    if UPCAST:
        out = tl.dot(a.to(tl.float32), tl.trans(b).to(tl.float32), acc, input_precision="ieee")
    else:
        out = tl.dot(a, tl.trans(b), acc, input_precision=PRECISION)
    return out


@triton.jit
def normed_pair(
    X, LN_W, W, first, second, rows, k_lo,
    HIDDEN: tl.constexpr, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SHARE: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """The rows' input ([rows, HIDDEN]) times LN_W against W's rows `first` and `second` (N each) over the reduction's
    SHARE columns from `k_lo`: both products and the rows' sums of squares over those columns, in float32 ([BLOCK_M,
    N] twice, [BLOCK_M]), the norm's row scale not yet applied (it needs every column's squares). With PREFETCH, W's
    rows are loaded first, whole, then (with PDL) the launch before is waited for; otherwise it is waited for first."""
    dtype = W.dtype.element_ty
    rm = tl.arange(0, BLOCK_M)
    live = rm < rows
    if PREFETCH:
        rk = tl.arange(0, SHARE)
        w_first = tl.load(W + first[:, None] * HIDDEN + k_lo + rk[None, :])
        w_second = tl.load(W + second[:, None] * HIDDEN + k_lo + rk[None, :])
        if PDL:
            gdc_wait()
        x = tl.load(X + rm[:, None] * HIDDEN + k_lo + rk[None, :], mask=live[:, None], other=0.0).to(tl.float32)
        squares = tl.sum(x * x, 1)
        weighted = (x * tl.load(LN_W + k_lo + rk).to(tl.float32)[None, :]).to(dtype)
        acc_first = product(weighted, w_first, tl.zeros([BLOCK_M, N], dtype=tl.float32), PRECISION, UPCAST)
        acc_second = product(weighted, w_second, tl.zeros([BLOCK_M, N], dtype=tl.float32), PRECISION, UPCAST)
    else:
        if PDL:
            gdc_wait()
        rk = tl.arange(0, BLOCK_K)
        squares = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc_first = tl.zeros([BLOCK_M, N], dtype=tl.float32)
        acc_second = tl.zeros([BLOCK_M, N], dtype=tl.float32)
        for k0 in range(k_lo, k_lo + SHARE, BLOCK_K):
            x = tl.load(X + rm[:, None] * HIDDEN + k0 + rk[None, :], mask=live[:, None], other=0.0).to(tl.float32)
            squares += tl.sum(x * x, 1)
            weighted = (x * tl.load(LN_W + k0 + rk).to(tl.float32)[None, :]).to(dtype)
            w_first = tl.load(W + first[:, None] * HIDDEN + k0 + rk[None, :])
            w_second = tl.load(W + second[:, None] * HIDDEN + k0 + rk[None, :])
            acc_first = product(weighted, w_first, acc_first, PRECISION, UPCAST)
            acc_second = product(weighted, w_second, acc_second, PRECISION, UPCAST)
    if PDL:
        gdc_launch_dependents()
    return acc_first, acc_second, squares


@triton.jit
def arrived_last(PARTIALS, COUNTERS, tile, split, acc, rm, cols, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    """A split program's float32 partial `acc` ([BLOCK_M, len(cols)]) stored at its split's rows of PARTIALS
    ([splits * BLOCK_M, WIDTH]), then its arrival counted on the tile's counter: whether it came last (every other
    split's partial stored and visible to it)."""
    tl.store(PARTIALS + (split * BLOCK_M + rm)[:, None] * WIDTH + cols[None, :], acc)
    tl.debug_barrier()  # every thread's partial stored before the program says it has arrived
    return tl.atomic_add(COUNTERS + tile, 1, sem="acq_rel", scope="gpu") == tl.num_programs(1) - 1


@triton.jit
def summed(PARTIALS, rm, cols, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, SPLIT: tl.constexpr):
    """The splits' partials of `cols` summed in split order (the same sum whichever program comes last)."""
    total = tl.load(PARTIALS + rm[:, None] * WIDTH + cols[None, :], cache_modifier=".cg")
    for split in tl.static_range(1, SPLIT):
        total += tl.load(PARTIALS + (split * BLOCK_M + rm)[:, None] * WIDTH + cols[None, :], cache_modifier=".cg")
    return total


@triton.jit
def normed_arrived_last(
    PARTIALS, COUNTERS, block, split, first, second, squares, rm, first_cols, second_cols, squares_col,
    BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """`arrived_last` for a normed kernel's split program (its two products at `first_cols` and `second_cols` of
    PARTIALS, its rows' sums of squares at column `squares_col`): whether it came last and, if so, the splits' sums of
    the two products and of the squares (else its own, unread); the last sets the block's counter back to 0."""
    tl.store(PARTIALS + (split * BLOCK_M + rm) * WIDTH + squares_col, squares)
    tl.store(PARTIALS + (split * BLOCK_M + rm)[:, None] * WIDTH + second_cols[None, :], second)
    last = arrived_last(PARTIALS, COUNTERS, block, split, first, rm, first_cols, BLOCK_M, WIDTH)
    if last:
        first = summed(PARTIALS, rm, first_cols, BLOCK_M, WIDTH, SPLIT)
        second = summed(PARTIALS, rm, second_cols, BLOCK_M, WIDTH, SPLIT)
        squares = tl.sum(summed(PARTIALS, rm, squares_col + tl.arange(0, 1), BLOCK_M, WIDTH, SPLIT), 1)
        tl.atomic_xchg(COUNTERS + block, 0)
    return last, first, second, squares


@triton.jit(do_not_specialize=["rows"])
def norm_project(
    X, LN_W, W, OUT, PARTIALS, COUNTERS, rows, eps,
    HIDDEN: tl.constexpr, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, SPLIT: tl.constexpr = 1, PREFETCH: tl.constexpr = False,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """Program (block, split): the rows' input RMS-normed with LN_W against W's BLOCK_N rows from block * BLOCK_N (two
    halves, one product each), rounded to OUT's dtype ([rows, N]), as vllm-omni's q/k/v projection's output is. With
    SPLIT > 1 each of a block's programs reduces 1/SPLIT of the input's columns into PARTIALS (float32 [SPLIT *
    BLOCK_M, N + N // BLOCK_N]: the products at columns [0, N), each block's sums of squares at column N + block),
    and the last to arrive on COUNTERS[block] finishes the block and sets the counter back to 0."""
    block = tl.program_id(0)
    split = tl.program_id(1)
    HALF: tl.constexpr = BLOCK_N // 2
    SHARE: tl.constexpr = HIDDEN // SPLIT
    dtype = OUT.dtype.element_ty
    rm = tl.arange(0, BLOCK_M)
    live = rm < rows
    first = block * BLOCK_N + tl.arange(0, HALF)
    lo, hi, squares = normed_pair(
        X, LN_W, W, first, first + HALF, rows, split * SHARE, HIDDEN, HALF, BLOCK_M, BLOCK_K, SHARE, PRECISION,
        UPCAST, PREFETCH, PDL,
    )  # fmt: skip
    last = True
    if SPLIT > 1:  # the products at columns [0, N), each block's squares at column N + block
        last, lo, hi, squares = normed_arrived_last(
            PARTIALS, COUNTERS, block, split, lo, hi, squares, rm, first, first + HALF, N + block, BLOCK_M,
            N + N // BLOCK_N, SPLIT,
        )  # fmt: skip
    if last:
        scale = 1.0 / tl.sqrt(squares / HIDDEN + eps)
        out = OUT + rm[:, None] * N + first[None, :]
        tl.store(out, (lo * scale[:, None]).to(dtype), mask=live[:, None])
        tl.store(out + HALF, (hi * scale[:, None]).to(dtype), mask=live[:, None])


@triton.jit
def normed_rotated(lo, hi, NORM_W, cos_lo, cos_hi, sin_lo, sin_hi, eps, HEAD_DIM: tl.constexpr, dtype: tl.constexpr):
    """Heads' halves ([heads, HEAD_DIM // 2] each, float32 of the projection rounded to `dtype`) normed per head with
    NORM_W, each step rounded as vllm-omni's RMSNorm rounds, then rotated by the position's cos and sin halves
    ([1, HEAD_DIM // 2]): both halves in `dtype`."""
    HALF: tl.constexpr = HEAD_DIM // 2
    rh = tl.arange(0, HALF)
    weight_lo = tl.load(NORM_W + rh)[None, :].to(tl.float32)
    weight_hi = tl.load(NORM_W + HALF + rh)[None, :].to(tl.float32)
    scale = 1.0 / tl.sqrt((tl.sum(lo * lo, 1) + tl.sum(hi * hi, 1)) / HEAD_DIM + eps)
    lo = ((lo * scale[:, None]).to(dtype).to(tl.float32) * weight_lo).to(dtype).to(tl.float32)
    hi = ((hi * scale[:, None]).to(dtype).to(tl.float32) * weight_hi).to(dtype).to(tl.float32)
    return (lo * cos_lo - hi * sin_lo).to(dtype), (hi * cos_hi + lo * sin_hi).to(dtype)


@triton.jit
def attend_position(
    QKV, QN_W, KN_W, COS, SIN, K_CACHE, V_CACHE, OUT, eps, scale, row, stream, kv_head, at,
    HEAD_DIM: tl.constexpr, Q_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, SLOTS: tl.constexpr,
):  # fmt: skip
    """`norm_rope_attend` for projected row `row`, stream `stream`'s position `at`, key/value head `kv_head`."""
    GROUP: tl.constexpr = Q_HEADS // KV_HEADS
    HALF: tl.constexpr = HEAD_DIM // 2
    dtype = OUT.dtype.element_ty
    rg = tl.arange(0, GROUP)
    rh = tl.arange(0, HALF)
    rs = tl.arange(0, SLOTS)
    projected = QKV + row * ((Q_HEADS + 2 * KV_HEADS) * HEAD_DIM)
    angle = at * HEAD_DIM + rh
    cos_lo, cos_hi = tl.load(COS + angle).to(tl.float32), tl.load(COS + angle + HALF).to(tl.float32)
    sin_lo, sin_hi = tl.load(SIN + angle).to(tl.float32), tl.load(SIN + angle + HALF).to(tl.float32)
    q = projected + (kv_head * GROUP + rg)[:, None] * HEAD_DIM + rh[None, :]
    q_lo, q_hi = normed_rotated(
        tl.load(q).to(tl.float32), tl.load(q + HALF).to(tl.float32), QN_W, cos_lo[None, :], cos_hi[None, :],
        sin_lo[None, :], sin_hi[None, :], eps, HEAD_DIM, dtype,
    )  # fmt: skip
    one = rh[None, :]  # the key's and value's halves as one row ([1, HALF]), as the queries' are rows
    k = projected + (Q_HEADS + kv_head) * HEAD_DIM + one
    k_lo, k_hi = normed_rotated(
        tl.load(k).to(tl.float32), tl.load(k + HALF).to(tl.float32), KN_W, cos_lo[None, :], cos_hi[None, :],
        sin_lo[None, :], sin_hi[None, :], eps, HEAD_DIM, dtype,
    )  # fmt: skip
    v = projected + (Q_HEADS + KV_HEADS + kv_head) * HEAD_DIM + one
    v_lo, v_hi = tl.load(v), tl.load(v + HALF)
    cache = stream * (KV_HEADS * SLOTS * HEAD_DIM) + kv_head * (SLOTS * HEAD_DIM)
    tl.store(K_CACHE + cache + at * HEAD_DIM + one, k_lo)
    tl.store(K_CACHE + cache + at * HEAD_DIM + HALF + one, k_hi)
    tl.store(V_CACHE + cache + at * HEAD_DIM + one, v_lo)
    tl.store(V_CACHE + cache + at * HEAD_DIM + HALF + one, v_hi)
    # every slot before the position from the cache, the position's own from here (not read back)
    slots = cache + rs[:, None] * HEAD_DIM + one
    earlier = (rs < at)[:, None]
    here = (rs == at)[:, None]
    keys_lo = tl.where(here, k_lo, tl.load(K_CACHE + slots, mask=earlier, other=0.0)).to(tl.float32)
    keys_hi = tl.where(here, k_hi, tl.load(K_CACHE + slots + HALF, mask=earlier, other=0.0)).to(tl.float32)
    values_lo = tl.where(here, v_lo, tl.load(V_CACHE + slots, mask=earlier, other=0.0)).to(tl.float32)
    values_hi = tl.where(here, v_hi, tl.load(V_CACHE + slots + HALF, mask=earlier, other=0.0)).to(tl.float32)
    q_lo, q_hi = q_lo.to(tl.float32), q_hi.to(tl.float32)
    scores = tl.sum(q_lo[:, None, :] * keys_lo[None, :, :], 2) + tl.sum(q_hi[:, None, :] * keys_hi[None, :, :], 2)
    scores = tl.where(rs[None, :] <= at, scores * scale, float("-inf"))
    weights = tl.exp(scores - tl.max(scores, 1)[:, None])
    weights = weights / tl.sum(weights, 1)[:, None]
    out = OUT + row * (Q_HEADS * HEAD_DIM) + (kv_head * GROUP + rg)[:, None] * HEAD_DIM + rh[None, :]
    tl.store(out, tl.sum(weights[:, :, None] * values_lo[None, :, :], 1).to(dtype))
    tl.store(out + HALF, tl.sum(weights[:, :, None] * values_hi[None, :, :], 1).to(dtype))


@triton.jit(do_not_specialize=["stream_rows"])
def norm_rope_attend(
    QKV, QN_W, KN_W, COS, SIN, AT, K_CACHE, V_CACHE, OUT, eps, scale, stream_rows,
    HEAD_DIM: tl.constexpr, Q_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, SLOTS: tl.constexpr,
    POSITIONS: tl.constexpr = 1, PDL: tl.constexpr = False,
):  # fmt: skip
    """Program (stream, key/value head), for each of the stream's POSITIONS positions from AT[stream] on (its rows
    `stream`, `stream + stream_rows`, ... of the q/k/v projection ([rows, heads * HEAD_DIM])): the query heads that
    share the key/value head and its key normed per head and rotated at the position, the key and value written
    into the stream's cache slot, then the queries against slots 0 to the position (the new slot's key and value
    as computed here, the earlier ones from the cache), softmax in float32, the values' weighted sum to OUT (heads
    side by side, as the output projection reads them). A later position reads the earlier one's slot, which this
    program wrote: its threads meet at a barrier first."""
    stream = tl.program_id(0)
    kv_head = tl.program_id(1)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    first = tl.load(AT + stream)
    for position in tl.static_range(POSITIONS):
        if position > 0:
            tl.debug_barrier()  # the slot the position before wrote, visible to every thread of the program
        attend_position(
            QKV, QN_W, KN_W, COS, SIN, K_CACHE, V_CACHE, OUT, eps, scale, position * stream_rows + stream, stream,
            kv_head, first + position, HEAD_DIM, Q_HEADS, KV_HEADS, SLOTS,
        )  # fmt: skip


@triton.jit(do_not_specialize=["rows"])
def linear_add(
    X, W, RES, OUT, PARTIALS, COUNTERS, rows,
    K: tl.constexpr, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, ADD: tl.constexpr = True, SPLIT: tl.constexpr = 1,
    PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False,
):  # fmt: skip
    """Program (block, split): OUT = RES + X W^T for its BLOCK_N outputs, the product rounded first, as a projection's
    output is before the residual adds it (without ADD, OUT = X W^T; RES unread). OUT may be RES: a block's outputs
    are read and written by one program. With SPLIT > 1 each of a block's programs reduces 1/SPLIT of K into PARTIALS
    (float32 [SPLIT * BLOCK_M, N]) and the last to arrive on COUNTERS[block] finishes the block (and sets it back to
    0); with PREFETCH its share of W is loaded before X (after the launch before, with PDL, is waited for)."""
    block = tl.program_id(0)
    split = tl.program_id(1)
    SHARE: tl.constexpr = K // SPLIT
    k_lo = split * SHARE
    dtype = OUT.dtype.element_ty
    rm = tl.arange(0, BLOCK_M)
    live = rm < rows
    rn = block * BLOCK_N + tl.arange(0, BLOCK_N)
    if PREFETCH:
        rk = tl.arange(0, SHARE)
        w = tl.load(W + rn[:, None] * K + k_lo + rk[None, :])
        if PDL:
            gdc_wait()
        x = tl.load(X + rm[:, None] * K + k_lo + rk[None, :], mask=live[:, None], other=0.0)
        acc = product(x, w, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), PRECISION, UPCAST)
    else:
        if PDL:
            gdc_wait()
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(k_lo, k_lo + SHARE, BLOCK_K):
            x = tl.load(X + rm[:, None] * K + k0 + rk[None, :], mask=live[:, None], other=0.0)
            w = tl.load(W + rn[:, None] * K + k0 + rk[None, :])
            acc = product(x, w, acc, PRECISION, UPCAST)
    if PDL:
        gdc_launch_dependents()
    last = True
    if SPLIT > 1:
        last = arrived_last(PARTIALS, COUNTERS, block, split, acc, rm, rn, BLOCK_M, N)
        if last:
            acc = summed(PARTIALS, rm, rn, BLOCK_M, N, SPLIT)
            tl.atomic_xchg(COUNTERS + block, 0)
    if last:
        outputs = rm[:, None] * N + rn[None, :]
        if ADD:
            residual = tl.load(RES + outputs, mask=live[:, None], other=0.0).to(tl.float32)
            tl.store(OUT + outputs, (acc.to(dtype).to(tl.float32) + residual).to(dtype), mask=live[:, None])
        else:
            tl.store(OUT + outputs, acc.to(dtype), mask=live[:, None])


@triton.jit(do_not_specialize=["rows"])
def norm_gate_up_silu(
    X, LN_W, W, OUT, PARTIALS, COUNTERS, rows, eps,
    HIDDEN: tl.constexpr, INTERMEDIATE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, SPLIT: tl.constexpr = 1,
    PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False,
):  # fmt: skip
    """Program (block, split): the rows' normed input against its BLOCK_N gate rows and the matching up rows (gate_up's
    weight holds the gate's rows, then the up's), then silu(gate) * up, each rounded where vllm-omni's MLP rounds.
    SPLIT, PARTIALS (float32 [SPLIT * BLOCK_M, 2 * INTERMEDIATE + INTERMEDIATE // BLOCK_N]: the gate's and up's
    products, then each block's sums of squares), COUNTERS and PREFETCH as `norm_project` takes them."""
    block = tl.program_id(0)
    split = tl.program_id(1)
    SHARE: tl.constexpr = HIDDEN // SPLIT
    dtype = OUT.dtype.element_ty
    rm = tl.arange(0, BLOCK_M)
    live = rm < rows
    rn = block * BLOCK_N + tl.arange(0, BLOCK_N)
    gate, up, squares = normed_pair(
        X, LN_W, W, rn, INTERMEDIATE + rn, rows, split * SHARE, HIDDEN, BLOCK_N, BLOCK_M, BLOCK_K, SHARE, PRECISION,
        UPCAST, PREFETCH, PDL,
    )  # fmt: skip
    last = True
    if SPLIT > 1:  # the gate's products, the up's, then each block's squares
        last, gate, up, squares = normed_arrived_last(
            PARTIALS, COUNTERS, block, split, gate, up, squares, rm, rn, INTERMEDIATE + rn, 2 * INTERMEDIATE + block,
            BLOCK_M, 2 * INTERMEDIATE + INTERMEDIATE // BLOCK_N, SPLIT,
        )  # fmt: skip
    if last:
        scale = 1.0 / tl.sqrt(squares / HIDDEN + eps)
        gate = (gate * scale[:, None]).to(dtype).to(tl.float32)
        up = (up * scale[:, None]).to(dtype).to(tl.float32)
        activated = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        tl.store(OUT + rm[:, None] * INTERMEDIATE + rn[None, :], (activated * up).to(dtype), mask=live[:, None])


@triton.jit
def rms_norm(X, W, OUT, eps, HIDDEN: tl.constexpr, PDL: tl.constexpr = False):
    """Program `row`: vllm-omni's RMSNorm (float32 scale, rounded, then the weight)."""
    row = tl.program_id(0)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    dtype = OUT.dtype.element_ty
    rk = tl.arange(0, HIDDEN)
    x = tl.load(X + row * HIDDEN + rk).to(tl.float32)
    normed = (x / tl.sqrt(tl.sum(x * x, 0) / HIDDEN + eps)).to(dtype).to(tl.float32)
    tl.store(OUT + row * HIDDEN + rk, (normed * tl.load(W + rk).to(tl.float32)).to(dtype))


@triton.jit(do_not_specialize=["u_stride", "codes_stride", "step", "top_k"])
def sample_embed(
    LOGITS, U, u_stride, CODES, codes_stride, step, EMBED, X, inverse_temperature, top_k,
    VOCAB: tl.constexpr, HIDDEN: tl.constexpr, EMBED_NEXT: tl.constexpr, GREEDY: tl.constexpr,
    PDL: tl.constexpr = False, KEY_ROUNDS: tl.constexpr = 16,
):  # fmt: skip
    """Program `row`: the row's code for codebook `step` from its logits, as vllm-omni's per-call sampling draws it
    (scores = logits times the inverse temperature, rounded to the logits' dtype; those under the k-th largest
    dropped; the largest score less log(-log(u)), the first of equals), or their first largest where GREEDY; the
    code to CODES[row, step] and, with EMBED_NEXT, its embedding row to X[row], the next position's input.
    The k-th largest score is found by bisecting the bits of an order-preserving integer key of each float32 score
    two at a time (a sum over the row a round, each counting three candidates), what `top_k_threshold` selects:
    KEY_ROUNDS rounds: 16 for the whole key, 8 where the scores are bfloat16's, whose float32 bits end in 16 zeros, so
    that their keys differ in the upper half only (the lower half is the same for every score of one sign). Integers
    that change from call to call are not specialized on their values, so the variants the warm-up builds are all a
    CUDA graph's capture launches."""
    row = tl.program_id(0)
    rv = tl.arange(0, VOCAB)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    logits = tl.load(LOGITS + row * VOCAB + rv)
    if GREEDY:
        code = tl.argmax(logits.to(tl.float32), 0)
    else:
        scores = (logits.to(tl.float32) * inverse_temperature).to(logits.dtype).to(tl.float32)
        if (top_k > 0) & (top_k < VOCAB):
            zeroed = tl.where(scores == 0.0, 0.0, scores)  # -0.0 keyed as 0.0: equal, as a comparison has them
            bits = zeroed.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
            key = tl.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits + 0x80000000)
            # two bits a round: the three candidates' counts in one sum, 16 bits apart (a count is at most VOCAB),
            # and the largest candidate that keeps top_k: what two rounds of one bit each would choose
            tl.static_assert(VOCAB < 1 << 16)
            kth = tl.full([], 0, tl.int64)
            for pair in tl.static_range(KEY_ROUNDS):
                # in int64 (a constant past int32's range would be taken as a negative int32 and widened so)
                unit = tl.full([], 1, tl.int64) << (30 - 2 * pair)
                one, two, three = kth | unit, kth | (unit * 2), kth | (unit * 3)
                packed = (key >= one).to(tl.int64) + ((key >= two).to(tl.int64) << 16)
                counts = tl.sum(packed + ((key >= three).to(tl.int64) << 32), 0)
                kth = tl.where((counts & 0xFFFF) >= top_k, one, kth)
                kth = tl.where(((counts >> 16) & 0xFFFF) >= top_k, two, kth)
                kth = tl.where(((counts >> 32) & 0xFFFF) >= top_k, three, kth)
            scores = tl.where(key >= kth, scores, float("-inf"))
        u = tl.load(U + row * u_stride + rv).to(tl.float32)
        code = tl.argmax(scores - tl.log(-tl.log(u)), 0)
    tl.store(CODES + row * codes_stride + step, code.to(tl.int64))
    if EMBED_NEXT:
        rh = tl.arange(0, HIDDEN)
        tl.store(X + row * HIDDEN + rh, tl.load(EMBED + code.to(tl.int64) * HIDDEN + rh))


@dataclass(frozen=True)
class Layer:
    """One decoder layer's weights as the kernels read them (each contiguous, rows = outputs)."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    output: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class Predictor:
    """The code predictor's body (vllm-omni's `CodePredictorBaseModel`) as the kernels run it."""

    layers: tuple[Layer, ...]
    final_norm: torch.Tensor
    cos: torch.Tensor  # [positions, head dim], in the model's dtype as vllm-omni's rotary embedding gives it
    sin: torch.Tensor
    eps: float
    hidden: int
    intermediate: int
    head_dim: int
    q_heads: int
    kv_heads: int
    scale: float
    # each split launch's counters ([layers, 3 launches, blocks]: q/k/v, output + down, gate/up), zero between
    # launches: a block's last program sets its own back
    counters: torch.Tensor
    launch: FusedLaunch  # how its kernels are launched (SPEECH_OMNI__FUSED_KERNELS, read in the talker's process)

    @staticmethod
    def of(model: Any) -> Predictor | None:
        """`model`'s weights and shapes, or None where the kernels do not cover it: projections with a bias, norms
        with other epsilons, a width the blocks do not divide, a dtype other than bfloat16 or float32, not CUDA
        (or Triton's interpreter)."""
        attention, mlp = model.layers[0].self_attn, model.layers[0].mlp
        parameter = next(model.parameters())
        hidden, intermediate = int(attention.hidden_size), int(mlp._intermediate_size)
        heads, kv_heads, head_dim = int(attention.num_heads), int(attention.num_kv_heads), int(attention.head_dim)
        eps = float(model.norm.variance_epsilon)
        norms = [n for layer in model.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        norms += [n for layer in model.layers for n in (layer.self_attn.q_norm, layer.self_attn.k_norm)]
        linears = [m for layer in model.layers for m in (layer.self_attn.qkv_proj, layer.self_attn.o_proj)]
        linears += [m for layer in model.layers for m in (layer.mlp.gate_up_proj, layer.mlp.down_proj)]
        fits = (
            parameter.dtype in (torch.bfloat16, torch.float32)
            and (parameter.device.type == "cuda" or triton_interpreted())
            and all(linear.bias is None for linear in linears)
            and all(float(norm.variance_epsilon) == eps for norm in norms)
            and hidden % BLOCK_K == 0 and hidden % BLOCK_N == 0 and intermediate % BLOCK_K == 0
            and intermediate % BLOCK_N == 0 and (heads * head_dim) % BLOCK_K == 0
            and ((heads + 2 * kv_heads) * head_dim) % BLOCK_N == 0
            and pow2(head_dim) and pow2(heads // kv_heads) and heads % kv_heads == 0 and pow2(hidden)
        )  # fmt: skip
        if not fits:
            return None
        layers = tuple(
            Layer(
                input_norm=layer.input_layernorm.weight.detach(),
                qkv=layer.self_attn.qkv_proj.weight.detach().contiguous(),
                q_norm=layer.self_attn.q_norm.weight.detach(),
                k_norm=layer.self_attn.k_norm.weight.detach(),
                output=layer.self_attn.o_proj.weight.detach().contiguous(),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=layer.mlp.gate_up_proj.weight.detach().contiguous(),
                down=layer.mlp.down_proj.weight.detach().contiguous(),
            )
            for layer in model.layers
        )
        rotary = model.rotary_emb
        blocks = max((heads + 2 * kv_heads) * head_dim, intermediate, hidden) // MIN_BLOCK_N
        return Predictor(
            layers=layers, final_norm=model.norm.weight.detach(), cos=rotary.cos_cached.to(parameter.dtype),
            sin=rotary.sin_cached.to(parameter.dtype), eps=eps, hidden=hidden, intermediate=intermediate,
            head_dim=head_dim, q_heads=heads, kv_heads=kv_heads, scale=float(attention.scaling),
            counters=torch.zeros(len(layers), 3, blocks, dtype=torch.int32, device=parameter.device),
            launch=fused_launch.from_environment(os.environ),
        )  # fmt: skip

    def position(
        self, x: torch.Tensor, at: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: int = 1
    ) -> torch.Tensor:
        """One position per stream (`x` [batch, 1, hidden] at `at` [batch, 1]) through every layer and the final
        norm, each layer's key and value written into the cache ([layers, batch, kv heads, slots, head dim]) at the
        row's slot, attending to the slots up to it: what `SpeechCodePredictor._position` computes. With `positions`
        > 1, that many positions of each stream in one pass, `at` the first: `x` [positions * batch, 1, hidden] holds
        each position's rows after the one before's, and so does what it returns."""
        rows = int(x.shape[0])
        streams = rows // positions
        slots = int(keys.shape[3])
        block_m, precision, upcast = launch_options(rows, x.dtype)
        warps = 4 if block_m <= 32 else 8  # 64 rows and more: 4 warps' registers spill (the normed products, sm_90)
        x = x.reshape(rows, self.hidden)
        at = at.reshape(streams)
        hidden = torch.empty_like(x)
        projected_width = (self.q_heads + 2 * self.kv_heads) * self.head_dim
        projected = torch.empty(rows, projected_width, dtype=x.dtype, device=x.device)
        attended = torch.empty(rows, self.q_heads * self.head_dim, dtype=x.dtype, device=x.device)
        activated = torch.empty(rows, self.intermediate, dtype=x.dtype, device=x.device)
        shared_memory = shared_memory_of(x.device)
        qkv_tiles = normed_tiles(QKV_TILES, block_m, self.hidden, projected_width, x.dtype, shared_memory)
        gate_up_tiles = normed_tiles(GATE_UP_TILES, block_m, self.hidden, self.intermediate, x.dtype, shared_memory)
        launched_qkv, launched_gate_up = launched_tiles(
            self.launch, block_m, x.dtype, self.hidden, projected_width, self.intermediate
        )
        qkv_tiles, gate_up_tiles = launched_qkv or qkv_tiles, launched_gate_up or gate_up_tiles
        pdl = dependent_at(self.launch, block_m, x.device)
        launch = dependent_kwargs(pdl)
        # the split launches' float32 partials (a row block's products, then each block's sums of squares)
        qkv_partials = partials(qkv_tiles, block_m, projected_width + projected_width // qkv_tiles.block_n, x)
        gate_up_width = 2 * self.intermediate + self.intermediate // gate_up_tiles.block_n
        gate_up_partials = partials(gate_up_tiles, block_m, gate_up_width, x)
        for index, layer in enumerate(self.layers):
            source = x if index == 0 else hidden  # the input stays as given; every later sum is in place
            counters = self.counters[index]
            norm_project[(projected_width // qkv_tiles.block_n, qkv_tiles.split)](
                source, layer.input_norm, layer.qkv, projected, qkv_partials, counters[0], rows, self.eps,
                HIDDEN=self.hidden, N=projected_width, BLOCK_M=block_m, BLOCK_N=qkv_tiles.block_n,
                BLOCK_K=qkv_tiles.block_k, PRECISION=precision, UPCAST=upcast, SPLIT=qkv_tiles.split,
                PREFETCH=qkv_tiles.prefetch, PDL=pdl, num_warps=warps, num_stages=qkv_tiles.stages, **launch,
            )  # fmt: skip
            norm_rope_attend[(streams, self.kv_heads)](
                projected, layer.q_norm, layer.k_norm, self.cos, self.sin, at, keys[index], values[index], attended,
                self.eps, self.scale, streams, HEAD_DIM=self.head_dim, Q_HEADS=self.q_heads, KV_HEADS=self.kv_heads,
                SLOTS=slots, POSITIONS=positions, PDL=pdl, **launch,
            )  # fmt: skip
            project(attended, layer.output, source, hidden, rows, counters[1], pdl, self.launch)
            norm_gate_up_silu[(self.intermediate // gate_up_tiles.block_n, gate_up_tiles.split)](
                hidden, layer.post_norm, layer.gate_up, activated, gate_up_partials, counters[2], rows, self.eps,
                HIDDEN=self.hidden, INTERMEDIATE=self.intermediate, BLOCK_M=block_m, BLOCK_N=gate_up_tiles.block_n,
                BLOCK_K=gate_up_tiles.block_k, PRECISION=precision, UPCAST=upcast, SPLIT=gate_up_tiles.split,
                PREFETCH=gate_up_tiles.prefetch, PDL=pdl, num_warps=warps, num_stages=gate_up_tiles.stages,
                **launch,
            )  # fmt: skip
            # the output projection's last programs have set its counters back before the down projection's start
            project(activated, layer.down, hidden, hidden, rows, counters[1], pdl, self.launch)
        normed = torch.empty_like(hidden)
        rms_norm[(rows,)](hidden, self.final_norm, normed, self.eps, HIDDEN=self.hidden, PDL=pdl, **launch)
        return normed.reshape(rows, 1, self.hidden)


def next_code(
    hidden: torch.Tensor,
    head: torch.Tensor,
    codes: torch.Tensor,
    step: int,
    embedding: torch.Tensor | None,
    x: torch.Tensor,
    inverse_temperature: float,
    top_k: int,
    uniforms: torch.Tensor | None,
    launch: FusedLaunch = AS_TUNED,
) -> None:
    """Codebook `step`'s code for each of `codes`' rows ([batch, groups]) from `hidden` ([rows >= batch, 1, hidden]):
    the logits through `head` ([vocab, hidden], the step's lm head) in one launch, then the draw (`uniforms`
    [batch, vocab], or the first largest logit without them) into `codes[:, step]`, and, given the `embedding`
    table of that codebook, the code's embedding into `x[:batch]`, the next position's input, in another."""
    rows, vocab = int(codes.shape[0]), int(head.shape[0])
    logits = torch.empty(rows, vocab, dtype=hidden.dtype, device=hidden.device)
    pdl = dependent_at(launch, launch_options(rows, hidden.dtype)[0], hidden.device)
    project(hidden, head, None, logits, rows, None, pdl, launch)
    draw(logits, codes, step, embedding, x, inverse_temperature, top_k, uniforms, pdl)


def draw(
    logits: torch.Tensor,
    codes: torch.Tensor,
    step: int,
    embedding: torch.Tensor | None,
    x: torch.Tensor,
    inverse_temperature: float,
    top_k: int,
    uniforms: torch.Tensor | None,
    pdl: bool = False,
) -> None:
    """`sample_embed` over `logits` ([rows, vocab]): each row's code into `codes[:, step]` and, given `embedding`,
    its embedding into `x` ([rows, width])."""
    rows, vocab = int(logits.shape[0]), int(logits.shape[1])
    greedy = uniforms is None
    key_rounds = 8 if logits.dtype == torch.bfloat16 else 16  # bfloat16's keys differ in their upper 16 bits only
    sample_embed[(rows,)](
        logits, logits if greedy else uniforms, 0 if greedy else uniforms.stride(0), codes, codes.stride(0), step,
        x if embedding is None else embedding, x, inverse_temperature, top_k, VOCAB=vocab, HIDDEN=int(x.shape[-1]),
        EMBED_NEXT=embedding is not None, GREEDY=greedy, PDL=pdl, KEY_ROUNDS=key_rounds, **dependent_kwargs(pdl),
    )  # fmt: skip


def project(
    x: torch.Tensor,
    weight: torch.Tensor,
    residual: torch.Tensor | None,
    out: torch.Tensor,
    rows: int,
    counters: torch.Tensor | None = None,
    pdl: bool = False,
    launch: FusedLaunch = AS_TUNED,
) -> None:
    """`out` = `residual` + `x` `weight`^T for `rows` streams (`weight` [outputs, inputs]; without a residual, the
    product alone), in `linear_add` launches cut as `launch` asks for the row block (`launched_projection`; not split
    without `counters`, zeros, one a block), dependent launches with `pdl`."""
    outputs, inputs = int(weight.shape[0]), int(weight.shape[1])
    block_m, precision, upcast = launch_options(rows, x.dtype)
    tiles = launched_projection(launch, block_m, inputs, outputs, x.dtype, split=counters is not None)
    linear_add[(outputs // tiles.block_n, tiles.split)](
        x, weight, out if residual is None else residual, out, partials(tiles, block_m, outputs, x),
        out if counters is None else counters, rows, K=inputs, N=outputs, BLOCK_M=block_m, BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k, PRECISION=precision, UPCAST=upcast, ADD=residual is not None, SPLIT=tiles.split,
        PREFETCH=tiles.prefetch, PDL=pdl, num_stages=tiles.stages, **dependent_kwargs(pdl),
    )  # fmt: skip


def partials(tiles: Tiles, block_m: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """A split launch's float32 scratch ([split * block_m, width]); unsplit, a stand-in that is never read."""
    if tiles.split == 1:
        return like
    return torch.empty(tiles.split * block_m, width, dtype=torch.float32, device=like.device)


def dependent_kwargs(pdl: bool) -> dict[str, bool]:
    """A launch's keyword for Triton to launch it as a programmatic dependent launch, where `pdl`; none otherwise."""
    return {"launch_pdl": True} if pdl else {}


def dependent_at(launch: FusedLaunch, block_m: int, device: torch.device) -> bool:
    """Whether a launch over a row block of `block_m` is a dependent one: `launch` asks for it at that block
    (`FusedLaunch.dependent_at`) and `device` has them (`dependent_launch`)."""
    return launch.dependent_at(block_m) and dependent_launch(device)


def dependent_launch(device: torch.device) -> bool:
    """Whether the kernels can be launched as programmatic dependent launches on `device`: a Triton that has them, a
    CUDA GPU from the Hopper generation on, not Triton's interpreter. Each then waits for the launch before it only
    where it first reads what that one wrote, and lets the launch after it start once its own loads are issued."""
    return (
        HAS_DEPENDENT_LAUNCH and device.type == "cuda" and not triton_interpreted()
        and torch.cuda.get_device_capability(device)[0] >= 9
    )  # fmt: skip


def launch_options(rows: int, dtype: torch.dtype) -> tuple[int, str, bool]:
    """A projection's row block for `rows` streams (a power of two, at least the 16 a tensor-core product takes), its
    products' precision (IEEE in float32, as vllm-omni's float32 GEMMs without TF32; bfloat16's own otherwise) and
    whether they run upcast (Triton's interpreter)."""
    return max(16, triton.next_power_of_2(rows)), "ieee" if dtype == torch.float32 else "tf32", triton_interpreted()


def head_fits(head: torch.Tensor) -> bool:
    """Whether `next_code` covers an lm head ([vocab, hidden]): a vocabulary the draw holds in one block of a power of
    two under 2^16 (its counts are packed 16 bits apart) that the projection's blocks divide, contiguous rows."""
    vocab, width = int(head.shape[0]), int(head.shape[1])
    return (
        pow2(vocab)
        and vocab < 1 << 16
        and vocab % BLOCK_N == 0
        and width % BLOCK_K == 0
        and pow2(width)
        and head.is_contiguous()
    )


def pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def triton_interpreted() -> bool:
    """Whether Triton runs its kernels on the CPU (TRITON_INTERPRET=1): how the kernels are checked without a GPU."""
    return os.environ.get("TRITON_INTERPRET") == "1"
