"""SPEECH_OMNI__TALKER_MODEL=service's code predictor (app/engines/omni/stage_plugins/talker_model.py) against vllm-omni
0.30's own, on a GPU: both built with the 0.6B CustomVoice predictor's shape (5 layers, hidden 1024, 16 query and 8
key/value heads of 128, 2048 codes, 16 codebooks) and the same random weights, each compiled and warmed up as it
would be in the talker's process, then given the same frames and the same sampling uniforms.

- float32 (TF32 off): the same codes, sampled and greedy, at every batch size up to the largest bucket, but for a
  rare flip: the cache holds what vllm-omni's recomputation produces for earlier positions and the top-k threshold
  found by selection is the one its sort finds, but on a GPU a GEMM's and an attention kernel's rounding depend on
  their shapes (17 rows a stream there, 1 here), so two scores within that rounding of each other may swap (on the
  CPU every code was equal).
- bfloat16: a GEMM's rounding depends on its shape, so a frame's codes may part after the first one that rounds
  differently; the first residual codebook, drawn before anything could part, agrees in nearly every row.
- `compiled-once` (vllm-omni's predictor compiled for a batch of 1 and any larger batch): two graphs where vllm-omni's
  compiles one per bucket, and vllm-omni's float32 codes.
- Inside CUDA graphs (vLLM's model runner captures the talker's whole `talker_mtp` step, the predictor in it, at each
  batch size), in both dtypes: the service's predictor captures, and a replay on new inputs gives what the same
  kernels give outside a graph; it compiled two graphs for all its buckets and compiles nothing while it serves.
- `fused` (the service's predictor with its layers in Triton kernels of its own, `predictor_kernels.py`): the same
  float32 codes, the same bfloat16 first residual codebook, and the same CUDA-graph checks, with nothing compiled by
  torch.
- The 1.7B checkpoints' shape too (the talker 2048 wide: the same predictor layers, its codebook embeddings 2048 wide
  and its inputs projected to 1024 by vllm-omni's `small_to_mtp_projection`), for the service's predictors (the fused
  one is the default talker's): the same codes, and the fused one's CUDA graphs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gpu.support import torch_with_vllm_omni_030
from tests.support.scripts import gpu_script

BENCH = gpu_script("predictor_bench")  # the predictors built, and a frame's inputs, as the benchmark does
GROUPS, VOCAB = BENCH.GROUPS, BENCH.VOCAB
BUCKETS = 8  # the talker's max_num_seqs here: buckets 1, 2, 4, 8 (those its runner captures)
TALKER_WIDTHS = {"0.6B": BENCH.HIDDEN, "1.7B": 2048}  # the talker's width by checkpoint size


@pytest.fixture(scope="module")
def torch() -> Any:
    return torch_with_vllm_omni_030("code predictor")


def predictors(torch: Any, dtype: Any, setting: str = "service", size: str = "0.6B") -> tuple[Any, Any]:
    """vllm-omni's predictor and the service's of `setting` (SPEECH_OMNI__TALKER_MODEL), built as
    deploy/gpu/predictor_bench.py builds them (the same random weights), with buckets 1, 2, 4, 8, for the talker of
    the checkpoint `size`."""
    built = BENCH.predictors(
        torch, dtype, max_num_seqs=BUCKETS, settings=("vllm-omni", setting), talker_hidden=TALKER_WIDTHS[size]
    )
    return built["vllm-omni"], built[setting]


OURS = ["service", "fused"]  # the service's predictors: over a key/value cache, and the same in its Triton kernels


def frame(torch: Any, dtype: Any, batch: int, seed: int, size: str = "0.6B") -> dict[str, Any]:
    return BENCH.frame(torch, dtype, batch, seed, width=TALKER_WIDTHS[size])


@contextlib.contextmanager
def without_tf32(torch: Any) -> Iterator[None]:
    """float32 matmuls and convolutions in float32, not TF32: codes compared with vllm-omni's exactly."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def graphs_compiled(torch: Any, predictor: Any) -> int:
    """The graphs torch compiles while `predictor` sets itself up (dynamo's count goes on over the process)."""
    before = unique_graphs(torch)
    with torch.inference_mode():
        predictor._setup_compile()
    return unique_graphs(torch) - before


@pytest.mark.parametrize("size", list(TALKER_WIDTHS))
@pytest.mark.parametrize("setting", OURS)
def test_float32_codes_are_vllm_omnis(torch: Any, setting: str, size: str) -> None:
    differ = total = 0
    with without_tf32(torch):
        upstream, ours = predictors(torch, torch.float32, setting, size)
        with torch.inference_mode():
            for batch in (1, 2, 3, 5, 8):
                inputs = frame(torch, torch.float32, batch, seed=batch, size=size)
                sampled = upstream(**inputs, temperature=0.9, top_k=50), ours(**inputs, temperature=0.9, top_k=50)
                inputs.pop("sample_uniforms")
                greedy = upstream(**inputs, do_sample=False), ours(**inputs, do_sample=False)
                for theirs, mine in (sampled, greedy):
                    assert mine.shape == theirs.shape == (batch, GROUPS) and mine.dtype == theirs.dtype
                    differ, total = differ + int((mine != theirs).sum()), total + mine.numel()
    print(f"\n{setting}, {size}, float32: {differ} of {total} codes differ")
    assert differ <= total // 100, f"{differ} of {total} codes differ"


def test_compiled_once_is_vllm_omnis_predictor_in_two_graphs(torch: Any) -> None:
    """`compiled-once`: vllm-omni's predictor, compiled with automatic dynamic shapes instead of `dynamic=False`,
    compiles two graphs for the buckets 1, 2, 4, 8, 16, 24, 32 where vllm-omni's compiles seven, nothing more while it
    serves (torch's thread count changed, as vLLM changes it), and its float32 codes are vllm-omni's."""
    differ = total = 0
    with without_tf32(torch):
        built = BENCH.predictors(torch, torch.float32, max_num_seqs=32)  # buckets 1, 2, 4, 8, 16, 24, 32
        upstream, once = built["vllm-omni"], built["compiled-once"]
        torch._dynamo.reset()  # these predictors' graphs only
        # Both compile vllm-omni's one `forward`, and dynamo's limit (8 by default) counts a code object's graphs:
        # 2 + 7 would leave vllm-omni's last bucket eager, where each alone fits.
        with torch._dynamo.config.patch(cache_size_limit=16):
            compiled = [graphs_compiled(torch, predictor) for predictor in (once, upstream)]
        assert compiled == [2, 7], f"graphs compiled (compiled once, vllm-omni's): {compiled}"
        cases = []  # (inputs, sampling keywords, vllm-omni's codes), its threads as they were at its set-up
        with torch.inference_mode():
            for batch in (1, 2, 3, 5, 8, 17, 32):
                inputs = frame(torch, torch.float32, batch, seed=batch)
                greedy = {key: value for key, value in inputs.items() if key != "sample_uniforms"}
                for given, sampling in ((inputs, {"temperature": 0.9, "top_k": 50}), (greedy, {"do_sample": False})):
                    cases.append((given, sampling, upstream(**given, **sampling)))
        with other_thread_count(torch), torch._dynamo.config.patch(error_on_recompile=True), torch.inference_mode():
            for given, sampling, theirs in cases:
                mine = once(**given, **sampling)
                assert mine.shape == theirs.shape
                differ, total = differ + int((mine != theirs).sum()), total + mine.numel()
    print(f"\ncompiled once, float32: {differ} of {total} codes differ from vllm-omni's")
    assert differ <= total // 100, f"{differ} of {total} codes differ"


@pytest.mark.parametrize("size", list(TALKER_WIDTHS))
@pytest.mark.parametrize("setting", OURS)
def test_bfloat16_codes_part_only_after_rounding_does(torch: Any, setting: str, size: str) -> None:
    upstream, ours = predictors(torch, torch.bfloat16, setting, size)
    first = rows = agree = total = 0
    with torch.inference_mode():
        for seed in range(8):
            inputs = frame(torch, torch.bfloat16, 8, seed=100 + seed, size=size)
            theirs, mine = upstream(**inputs, temperature=0.9, top_k=50), ours(**inputs, temperature=0.9, top_k=50)
            assert bool(((mine >= 0) & (mine < VOCAB)).all())
            first += int((mine[:, 1] == theirs[:, 1]).sum())
            rows += mine.shape[0]
            agree, total = agree + int((mine == theirs).sum()), total + mine.numel()
    print(f"\n{setting}, {size}, bfloat16: first residual codebook equal in {first}/{rows} rows, all {agree}/{total}")
    assert first >= 0.9 * rows


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
@pytest.mark.parametrize(
    ("setting", "graphs_expected", "size"), [("service", 2, "0.6B"), ("fused", 0, "0.6B"), ("fused", 0, "1.7B")]
)
def test_it_captures_in_cuda_graphs_as_the_talkers_runner_does_and_replays_what_it_computes_outside_a_graph(
    torch: Any, dtype_name: str, setting: str, graphs_expected: int, size: str
) -> None:
    """As vllm-omni 0.30's model runner captures the talker's `talker_mtp` step (worker_v2/model_states/
    omni_model_state.py, capture_mtp_graphs; deploy/gpu/predictor_bench.py's `capture`): every size from the largest
    down, each warmed up eagerly without sampling uniforms, then captured with uniforms it owns; a replay on new
    inputs, after torch's thread count changed as vLLM changes it once the talker has started, gives what the same
    kernels compute from them outside a graph (Inductor's for the service's predictor, the fused one's Triton ones).
    The service's set-up compiles two graphs for the four buckets (a batch of 1, any larger batch), the fused one's
    none (its kernels are Triton's own), and nothing compiles after the thread count changed: a call outside a graph
    then (as a batch above the captured sizes would be in serving), which the compiled code's guards refuse, runs
    eagerly through the predictor's `eager_on_recompile` wrapper instead."""
    dtype = getattr(torch, dtype_name)
    _, ours = predictors(torch, dtype, setting, size)
    torch._dynamo.reset()  # this predictor's graphs only: none an earlier test left for it to reuse
    compiled = graphs_compiled(torch, ours)
    assert compiled == graphs_expected, f"{compiled} graphs compiled for the buckets 1, 2, 4, 8"
    assert setting != "fused" or "fused kernels" in ours.serving  # not the compiled position it falls back to
    assert setting == "fused" or hasattr(ours._compiled_position, "__wrapped__")  # compiled_only has work to do
    with torch._dynamo.config.patch(error_on_recompile=True), torch.inference_mode():
        graphs = BENCH.capture(torch, ours, dtype, [1, 2, 4, 8])
        replay_and_compare(torch, dtype, ours, graphs)
        with other_thread_count(torch):
            before = unique_graphs(torch)
            late = [
                ours(**frame(torch, dtype, batch, seed=7, size=size), temperature=0.9, top_k=50) for batch in (1, 8)
            ]
            assert unique_graphs(torch) == before, "a call outside a graph compiled again once the threads changed"
        assert all(bool(((codes >= 0) & (codes < VOCAB)).all()) for codes in late)


def replay_and_compare(torch: Any, dtype: Any, ours: Any, graphs: dict[int, tuple[Any, dict[str, Any], Any]]) -> None:
    """Each graph replayed on new inputs gives the codes `ours` computes from them outside it, in the kernels the
    graph captured (`compiled_only`): at the thread count the graphs were captured at, since compiled code guards on
    it, and with a guard that fails raising rather than running eager PyTorch, which rounds bfloat16 differently from
    Inductor's kernels. The replays run after the change, as the talker's do: a replay passes no guard."""
    with torch.inference_mode():
        for batch, (graph, static, captured) in graphs.items():
            for seed in (2, 3):
                fresh = BENCH.frame(torch, dtype, batch, seed=100 * batch + seed, width=BENCH.talker_width(ours))
                with compiled_only(torch, ours):
                    outside = ours(**fresh, temperature=0.9, top_k=50)
                for name, tensor in fresh.items():
                    static[name].copy_(tensor)
                with other_thread_count(torch):
                    graph.replay()
                    torch.cuda.synchronize()
                differ = int((captured != outside).sum())
                assert differ == 0, f"batch {batch}, seed {seed}: {differ} codes differ"


@contextlib.contextmanager
def compiled_only(torch: Any, predictor: Any) -> Iterator[None]:
    """The service's compiled predictor without its `eager_on_recompile` wrapper, dynamo failing on a guard it
    misses: a call runs the compiled code or raises, never falls back to eager PyTorch unseen. The fused predictor,
    which torch does not compile, as it is."""
    wrapper = predictor._compiled_position
    compiled = getattr(wrapper, "__wrapped__", None)
    if compiled is None:
        yield
        return
    predictor._compiled_position = compiled
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            yield
    finally:
        predictor._compiled_position = wrapper


def unique_graphs(torch: Any) -> int:
    """The graphs dynamo has compiled in this process so far."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


@contextlib.contextmanager
def other_thread_count(torch: Any) -> Iterator[None]:
    """torch's thread count changed, as vLLM changes it after the talker's start (vllm/v1/worker/gpu_worker.py,
    `set_torch_threads_for_runtime`): compiled code guards on it, so a set-up that would compile again after it
    fails a test under `error_on_recompile`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
