"""The fused code predictor's projection kernels (app/engines/omni/stage_plugins/predictor_kernels.py) cut along the
reduction (split), with each program's weights loaded before its input (prefetch) and as programmatic dependent
launches, on a GPU: each variant gives what the unsplit kernel gives (the splits' float32 partials summed in order, so
within float32 rounding of one sum), leaves its counters at zero for the next launch, and does so inside a CUDA graph
replayed again and again, as the talker's runner replays the predictor. The 0.6B predictor's shapes, one stream and
eight."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.gpu.support import torch_with_vllm_omni_030

HIDDEN, QKV, INTERMEDIATE = 1024, 4096, 3072
SPLITS = (1, 2, 4)


@pytest.fixture(scope="module")
def kernels() -> Any:
    torch_with_vllm_omni_030("the fused predictor's kernels")
    from app.engines.omni.stage_plugins import predictor_kernels

    return predictor_kernels


def launch(pk: Any, name: str, rows: int, dtype: Any, split: int, prefetch: bool, pdl: bool, t: dict) -> Any:
    """One launch of kernel `name` on the tensors `t`, returning its output."""
    import torch

    block_m, precision, upcast = pk.launch_options(rows, dtype)
    extra = {"launch_pdl": True} if pdl else {}
    common = dict(BLOCK_M=block_m, PRECISION=precision, UPCAST=upcast, SPLIT=split, PREFETCH=prefetch, PDL=pdl)
    if name == "linear_add":
        bn = 16
        partials = torch.empty(split * block_m, HIDDEN, dtype=torch.float32, device="cuda")
        pk.linear_add[(HIDDEN // bn, split)](
            t["attended"], t["o"], t["res"], t["out"], partials, t["counters"], rows, K=2048, N=HIDDEN, BLOCK_N=bn,
            BLOCK_K=256, num_stages=3, **common, **extra,
        )  # fmt: skip
        return t["out"]
    if name == "norm_project":
        bn = 32
        partials = torch.empty(split * block_m, QKV + QKV // bn, dtype=torch.float32, device="cuda")
        pk.norm_project[(QKV // bn, split)](
            t["x"], t["ln"], t["qkv"], t["projected"], partials, t["counters"], rows, 1e-6, HIDDEN=HIDDEN, N=QKV,
            BLOCK_N=bn, BLOCK_K=128, num_stages=3, **common, **extra,
        )  # fmt: skip
        return t["projected"]
    bn = 32
    partials = torch.empty(split * block_m, 2 * INTERMEDIATE + INTERMEDIATE // bn, dtype=torch.float32, device="cuda")
    pk.norm_gate_up_silu[(INTERMEDIATE // bn, split)](
        t["x"], t["ln"], t["gate_up"], t["activated"], partials, t["counters"], rows, 1e-6, HIDDEN=HIDDEN,
        INTERMEDIATE=INTERMEDIATE, BLOCK_N=bn, BLOCK_K=128, num_stages=3, **common, **extra,
    )  # fmt: skip
    return t["activated"]


def tensors(rows: int, dtype: Any) -> dict:
    import torch

    def r(*shape: int, scale: float = 0.05) -> Any:
        return (torch.randn(*shape, device="cuda") * scale).to(dtype)

    return {
        "x": r(rows, HIDDEN, scale=1.0), "ln": (torch.rand(HIDDEN, device="cuda") + 0.5).to(dtype),
        "qkv": r(QKV, HIDDEN), "o": r(HIDDEN, 2048), "gate_up": r(2 * INTERMEDIATE, HIDDEN),
        "attended": r(rows, 2048, scale=1.0), "res": r(rows, HIDDEN, scale=1.0),
        "out": torch.empty(rows, HIDDEN, dtype=dtype, device="cuda"),
        "projected": torch.empty(rows, QKV, dtype=dtype, device="cuda"),
        "activated": torch.empty(rows, INTERMEDIATE, dtype=dtype, device="cuda"),
        "counters": torch.zeros(QKV // 16, dtype=torch.int32, device="cuda"),
    }  # fmt: skip


@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("name", ["linear_add", "norm_project", "norm_gate_up_silu"])
def test_every_split_prefetch_and_dependent_launch_gives_the_unsplit_kernels_output(
    kernels: Any, name: str, rows: int
) -> None:
    import torch

    torch.manual_seed(0)
    pdl_here = kernels.HAS_DEPENDENT_LAUNCH and torch.cuda.get_device_capability()[0] >= 9
    for dtype in (torch.float32, torch.bfloat16):
        t = tensors(rows, dtype)
        expected = launch(kernels, name, rows, dtype, 1, False, False, t).clone()
        for split, prefetch, pdl in itertools.product(SPLITS, (False, True), (False, True)):
            if (pdl and not pdl_here) or (prefetch and split == 1 and dtype == torch.float32):
                continue  # no dependent launch here; a float32 program's whole share would not fit its registers
            got = launch(kernels, name, rows, dtype, split, prefetch, pdl, t).clone()
            torch.cuda.synchronize()
            # float32: one float32 sum against split sums; bfloat16: those rounded, a unit or two apart
            tolerance = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-3, rtol=2**-6)
            torch.testing.assert_close(got, expected, **tolerance, msg=f"{name} {dtype} {split=} {prefetch=} {pdl=}")
            assert int(t["counters"].count_nonzero()) == 0, "a block's counter was left set"


def test_split_dependent_launches_replay_in_a_cuda_graph(kernels: Any) -> None:
    import torch

    torch.manual_seed(1)
    rows, dtype = 4, torch.bfloat16
    pdl = kernels.HAS_DEPENDENT_LAUNCH and torch.cuda.get_device_capability()[0] >= 9
    t = tensors(rows, dtype)
    names = ("norm_project", "norm_gate_up_silu", "linear_add")
    expected = {n: launch(kernels, n, rows, dtype, 1, False, False, t).clone() for n in names}
    for n in names:  # built before the capture
        launch(kernels, n, rows, dtype, 4, True, pdl, t)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for n in names:
            launch(kernels, n, rows, dtype, 4, True, pdl, t)
    for _ in range(20):
        for key in ("projected", "activated", "out"):
            t[key].zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert int(t["counters"].count_nonzero()) == 0
        for n, key in zip(names, ("projected", "activated", "out"), strict=True):
            torch.testing.assert_close(t[key], expected[n], atol=2e-3, rtol=2**-6)


def predictor(pk: Any, launch: Any, dtype: Any) -> Any:
    """A `Predictor` at the 0.6B predictor's shape (5 layers, 16 query and 8 key/value heads of 128) with random
    weights (the same for every launch and dtype, drawn in float32), its kernels launched as `launch` says."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(7)

    def r(*shape: int, scale: float = 0.05) -> Any:
        return (torch.randn(*shape, device="cuda", generator=generator) * scale).to(dtype)

    def ones(n: int) -> Any:
        return (torch.rand(n, device="cuda", generator=generator) + 0.5).to(dtype)

    heads, kv_heads, head_dim, layers = 16, 8, 128, 5
    return pk.Predictor(
        layers=tuple(
            pk.Layer(
                input_norm=ones(HIDDEN), qkv=r(QKV, HIDDEN), q_norm=ones(head_dim), k_norm=ones(head_dim),
                output=r(HIDDEN, heads * head_dim), post_norm=ones(HIDDEN), gate_up=r(2 * INTERMEDIATE, HIDDEN),
                down=r(HIDDEN, INTERMEDIATE),
            )
            for _ in range(layers)
        ),
        final_norm=ones(HIDDEN), cos=r(64, head_dim, scale=1.0), sin=r(64, head_dim, scale=1.0), eps=1e-6,
        hidden=HIDDEN, intermediate=INTERMEDIATE, head_dim=head_dim, q_heads=heads, kv_heads=kv_heads,
        scale=head_dim**-0.5, counters=torch.zeros(layers, 3, QKV // 16, dtype=torch.int32, device="cuda"),
        launch=launch,
    )  # fmt: skip


def frame_start(pk: Any, launch: Any, streams: int, graphed: bool, dtype: Any) -> tuple[Any, Any, Any]:
    """Positions 0 and 1 of `streams` streams in one pass, then position 2 alone (eagerly, or captured in a CUDA graph
    and replayed): the hidden state at position 2 and the keys and values, in float32."""
    import torch

    model = predictor(pk, launch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(11)
    first = torch.randn(2 * streams, 1, HIDDEN, device="cuda", generator=generator).to(dtype)
    then = torch.randn(streams, 1, HIDDEN, device="cuda", generator=generator).to(dtype)
    keys = torch.zeros(5, streams, 8, 16, 128, dtype=dtype, device="cuda")
    values = torch.zeros_like(keys)
    at = torch.zeros(streams, 1, dtype=torch.long, device="cuda")

    def run() -> Any:
        at.zero_()
        model.position(first, at, keys, values, positions=2)
        at.fill_(2)
        return model.position(then, at, keys, values)

    if not graphed:
        out = run()
    else:
        run()  # builds every kernel before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
        for _ in range(5):
            keys.zero_()
            values.zero_()
            graph.replay()
        torch.cuda.synchronize()
        assert int(model.counters.count_nonzero()) == 0
    return out.float(), keys.float(), values.float()


@pytest.mark.parametrize("streams", [1, 8])
def test_the_predictor_is_as_accurate_launched_every_way(kernels: Any, streams: int) -> None:
    """Every SPEECH_OMNI__FUSED_KERNELS and dependent-launch setting, in bfloat16 through the five layers, positions 0
    and 1 in one pass and 2 after them, eagerly and replayed from a CUDA graph: as close to the same predictor in
    float32 as the as-tuned launch is (bfloat16's roundings, which the splits' sums move, grow through the layers, so
    the launches are not compared with each other element by element)."""
    import torch

    from app.engines.omni.stage_plugins.fused_launch import KERNELS, FusedLaunch

    truth = frame_start(kernels, kernels.AS_TUNED, streams, False, torch.float32)
    tuned = frame_start(kernels, kernels.AS_TUNED, streams, False, torch.bfloat16)
    bound = [float((a - b).abs().max()) for a, b in zip(tuned, truth, strict=True)]
    assert all(0 < error < 0.5 for error in bound), bound  # bfloat16 computed, not float32, and not far off it
    for kinds, dependent, graphed in itertools.product(KERNELS, (False, True), (False, True)):
        got = frame_start(kernels, FusedLaunch(kinds, dependent), streams, graphed, torch.bfloat16)
        errors = [float((a - b).abs().max()) for a, b in zip(got, truth, strict=True)]
        assert all(e <= 1.5 * b + 1e-3 for e, b in zip(errors, bound, strict=True)), (
            kinds,
            dependent,
            graphed,
            errors,
            bound,
        )


def test_past_one_row_block_every_launch_setting_runs_the_tuned_kernels_bit_for_bit(kernels: Any) -> None:
    """At 32 streams (64 rows in the two-position pass, 32 after it) split, prefetch and dependent launches all stand
    down (`LAUNCHED_MAX_ROWS`): the same launches as the tuned kernels', so the same bits, where below it they differ
    in their sums' order."""
    import torch

    from app.engines.omni.stage_plugins.fused_launch import KERNELS, LAUNCHED_MAX_ROWS, FusedLaunch

    streams = 2 * LAUNCHED_MAX_ROWS
    tuned = frame_start(kernels, kernels.AS_TUNED, streams, False, torch.bfloat16)
    for kinds, dependent in itertools.product(KERNELS, (False, True)):
        got = frame_start(kernels, FusedLaunch(kinds, dependent), streams, False, torch.bfloat16)
        for a, b in zip(got, tuned, strict=True):
            assert torch.equal(a, b), (kinds, dependent)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
def test_the_draw_keeps_the_top_k_scores_and_picks_what_the_reference_picks(kernels: Any, dtype_name: str) -> None:
    """`draw` (`sample_embed`; bfloat16 logits get 8 rounds of its threshold's bisection, their keys differing in the
    upper 16 bits only) against the draw it mirrors, written out in torch: scores rounded to the logits' dtype, those
    under the k-th largest dropped (ties kept), the Gumbel-max of what is left, the first of equals, and the code's
    embedding written; rows of spread, clustered, tied and signed logits, top-k from 1 to nearly the vocabulary."""
    import torch

    from app.engines.omni.stage_plugins.talker_model import top_k_threshold

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(7)
    rows, vocab, width = 8, 2048, 1024
    logits = torch.randn(rows, vocab, device="cuda", generator=generator) * 3
    logits[1] *= 1e-3  # close together, both signs
    logits[2] = torch.randint(-4, 4, (vocab,), device="cuda", generator=generator).float()  # many ties
    logits[3, :1500] = 0.0  # ties at zero, one of them negative
    logits[3, 5] = -0.0
    logits[4] = -logits[4].abs() - 1  # every score negative
    logits = logits.to(dtype)
    embedding = torch.randn(vocab, width, device="cuda", generator=generator).to(dtype)
    scores = (logits.float() * (1 / 0.9)).to(dtype).float()
    for top_k in (1, 2, 3, 50, 1000, 2047):
        uniforms = torch.rand(rows, vocab, device="cuda", generator=generator).clamp(1e-6, 1 - 1e-6)
        codes = torch.zeros(rows, 16, dtype=torch.long, device="cuda")
        x = torch.zeros(rows, 1, width, device="cuda", dtype=dtype)
        kernels.draw(logits, codes, 3, embedding, x, 1 / 0.9, top_k, uniforms)
        kept = scores.masked_fill(scores < top_k_threshold(scores, top_k), float("-inf"))
        expected = torch.argmax(kept - torch.log(-torch.log(uniforms)), dim=-1)
        assert torch.equal(codes[:, 3], expected), (top_k, codes[:, 3].tolist(), expected.tolist())
        assert torch.equal(x[:, 0], embedding[expected])
