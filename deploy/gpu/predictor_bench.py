#!/usr/bin/env python3
"""vllm-omni 0.30's Qwen3-TTS code predictor, the same compiled once (`SPEECH_OMNI__TALKER_MODEL=compiled-once`),
the service's (`SPEECH_OMNI__TALKER_MODEL=service`) and the service's in its own Triton kernels (`fused`), alone on
one GPU, as the talker's model runner runs them:
each compiled and warmed up at its batch buckets, then captured in a CUDA graph per batch size with sampling
uniforms it owns, and replayed. Per batch size and predictor: the GPU's time per frame (CUDA events around many
replays back to back, and one replay alone: launched with the GPU idle, as a server at one stream launches a frame's
predictor), the host's time to launch one replay, the kernels one replay runs (from a PyTorch profiler trace) and the
set-up's time (compile and warm-up at every bucket). A server's start and load add noise that a predictor's own
difference can hide; this measures the predictor without them.

    python3 deploy/gpu/predictor_bench.py [--batches 1,8,32] [--dtype bfloat16] [--replays 200]
        [--predictors vllm-omni,compiled-once,service,fused] [--talker-hidden 1024] > predictor.md

The 0.6B CustomVoice predictor's shape (5 layers, hidden 1024, 16 query and 8 key/value heads of 128, 2048 codes,
16 codebooks; with `--talker-hidden 2048` the 1.7B checkpoints', whose talker is 2048 wide: the same layers, its
codebook embeddings 2048 wide and every input projected to the predictor's 1024 first) with random weights, its
batch buckets those the talker's runner captures up to `--max-num-seqs` (64, as shipped: 11 buckets); each set-up
timed cold, as a host's first start (Inductor's caches off, Triton's empty).
Needs a CUDA device and vllm-omni 0.30 importable, the service's source tree on the path (run from the repository
root).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

GROUPS = 16
VOCAB = 2048
HIDDEN = 1024  # the predictor's width, and the 0.6B talker's
SETTINGS = ("vllm-omni", "compiled-once", "service", "fused")  # the SPEECH_OMNI__TALKER_MODEL values it times
# `fused` with its kernels launched as SPEECH_OMNI__FUSED_KERNELS and SPEECH_OMNI__FUSED_DEPENDENT_LAUNCH say: the
# setting's value after the plus (fused_launch.py)
FUSED_VARIANTS = (
    "fused+as-tuned+dependent", "fused+split", "fused+split+dependent", "fused+prefetch", "fused+prefetch+dependent",
)  # fmt: skip


def predictors(
    torch: Any, dtype: Any, max_num_seqs: int, settings: Collection[str] = SETTINGS, talker_hidden: int = HIDDEN
) -> dict[str, Any]:
    """The code predictor of each SPEECH_OMNI__TALKER_MODEL setting in `settings`, by the setting: vllm-omni's
    (`vllm-omni`), the same compiled once (`compiled-once`), the service's (`service`) and the service's in fused
    kernels (`fused`), on the GPU in `dtype`, with the same random weights (norms at one, the heads scaled so that
    top-k cuts into real probability mass; vllm-omni's is built in any case, the others take its weights);
    `max_num_seqs` sets their batch buckets. A `talker_hidden` other than the predictor's width (2048: the 1.7B
    checkpoints') gives them codebook embeddings that wide and the projection of their inputs that vllm-omni builds
    for it (`small_to_mtp_projection`)."""
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
        Qwen3TTSTalkerCodePredictorConfig,
        Qwen3TTSTalkerConfig,
    )
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
        Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM,
    )

    from app.engines.omni.stage_plugins.talker_model import (
        CompiledOnceCodePredictor,
        FusedCodePredictor,
        SpeechCodePredictor,
    )

    config = Qwen3TTSTalkerCodePredictorConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, num_code_groups=GROUPS, rope_theta=1_000_000, rms_norm_eps=1e-6,
    )  # fmt: skip
    talker = Qwen3TTSTalkerConfig(
        hidden_size=talker_hidden, num_code_groups=GROUPS, code_predictor_config=config.to_dict()
    )
    # what the wrapper reads of vLLM's config: the talker's batch limit, and no stage connector settings
    scheduler = types.SimpleNamespace(max_num_seqs=max_num_seqs)
    vllm_config = types.SimpleNamespace(scheduler_config=scheduler, model_config=None)
    torch.manual_seed(0)
    upstream = Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM(
        vllm_config=vllm_config, config=config, talker_config=talker
    )
    with torch.no_grad():
        for parameter in upstream.parameters():
            parameter.normal_(0, 0.05)
        for layer in upstream.model.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.fill_(1.0)
            layer.self_attn.q_norm.weight.fill_(1.0)
            layer.self_attn.k_norm.weight.fill_(1.0)
        upstream.model.norm.weight.fill_(1.0)
        for head in upstream.lm_head:
            head.weight.mul_(20)
    built = {"vllm-omni": upstream}
    ours = (
        ("compiled-once", CompiledOnceCodePredictor),
        ("service", SpeechCodePredictor),
        ("fused", FusedCodePredictor),
    )
    ours += tuple((variant, FusedCodePredictor) for variant in FUSED_VARIANTS)
    for setting, cls in ours:
        if setting in settings:
            built[setting] = cls(vllm_config=vllm_config, config=config, talker_config=talker)
            built[setting].load_state_dict(upstream.state_dict())
    wanted = {setting: predictor for setting, predictor in built.items() if setting in settings}
    for predictor in wanted.values():  # as the talker declares them: the sizes its runner captures
        predictor.configure_mtp_execution_buckets(capture_sizes(max_num_seqs))
    return {setting: predictor.to("cuda", dtype).eval() for setting, predictor in wanted.items()}


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The batch sizes vLLM 0.30 captures by default up to the talker's batch limit (vllm/config/vllm.py: 1, 2, 4,
    then steps of 8), and the limit: what the talker's runner captures, and the predictor's buckets."""
    return sorted({size for size in (1, 2, 4, *range(8, max_num_seqs + 1, 8)) if size <= max_num_seqs} | {max_num_seqs})


def frame(torch: Any, dtype: Any, batch: int, seed: int, width: int = HIDDEN) -> dict[str, Any]:
    """One talker step's inputs to the predictor (the talker's, `width` wide), and the uniforms its sampling draws
    Gumbel noise from."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return {
        "layer0_code": torch.randint(0, VOCAB, (batch, 1), device="cuda", generator=generator),
        "layer0_embed": torch.randn(batch, 1, width, device="cuda", generator=generator).to(dtype),
        "last_talker_hidden": torch.randn(batch, 1, width, device="cuda", generator=generator).to(dtype),
        "sample_uniforms": torch.empty(batch, GROUPS - 1, VOCAB, device="cuda").uniform_(
            1e-20, 1 - 1e-20, generator=generator
        ),
    }


def talker_width(predictor: Any) -> int:
    """How wide the talker's inputs to `predictor` are (vllm-omni's predictor keeps the talker's config)."""
    return int(predictor.talker_config.hidden_size)


def capture(torch: Any, predictor: Any, dtype: Any, batches: list[int]) -> dict[int, tuple[Any, dict[str, Any], Any]]:
    """`predictor` in a CUDA graph per batch size, as vllm-omni's MRv2 runner captures the talker's step
    (`capture_mtp_graphs`, inside vLLM's `graph_capture`): largest first, on one side stream into one memory pool,
    each warmed up there without uniforms, then captured with uniforms it owns. By batch: the graph, its static
    inputs (uniforms included: copy new ones in before a replay) and its output."""
    stream, pool, graphs = torch.cuda.Stream(), torch.cuda.graph_pool_handle(), {}
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for batch in sorted(batches, reverse=True):
            static = frame(torch, dtype, batch, seed=batch, width=talker_width(predictor))
            uniforms = static.pop("sample_uniforms")
            predictor(**static, temperature=0.9, top_k=50)
            uniforms.fill_(0.5)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                output = predictor(**static, sample_uniforms=uniforms, temperature=0.9, top_k=50)
            graphs[batch] = graph, {**static, "sample_uniforms": uniforms}, output
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graphs


def kernels_per_replay(torch: Any, graph: Any, replays: int) -> float:
    """The kernels a replay runs, from a profiler trace of `replays` of them, read as trace_summary.py reads one."""
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # trace_summary.py, beside this script
    import trace_summary

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        trace.export_chrome_trace(str(path))
        summary = trace_summary.summarize(path, trace_summary.read_trace(path))
    return sum(totals.count for totals in summary.kernels.values()) / replays


def measure(torch: Any, graph: Any, replays: int) -> tuple[float, float, float]:
    """The GPU's milliseconds per replay (events around `replays` back to back), the host's median milliseconds to
    launch one and the GPU's median milliseconds for one replay alone (each launched after the one before finished,
    as a server at one stream launches a frame's predictor after the talker's step, not after another predictor)."""
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    back_to_back = start.elapsed_time(end) / replays
    launches, alone = [], []
    for _ in range(min(replays, 50)):
        start.record()
        began = time.perf_counter()
        graph.replay()
        launches.append((time.perf_counter() - began) * 1e3)
        end.record()
        torch.cuda.synchronize()
        alone.append(start.elapsed_time(end))
    return back_to_back, statistics.median(launches), statistics.median(alone)


@contextlib.contextmanager
def launched_as(name: str) -> Iterator[None]:
    """The fused kernels launched as the variant `name` says (its SPEECH_OMNI__FUSED_KERNELS value, as the server
    hands it to the talker's process) while its predictor is set up and captured: a replay launches what was
    captured."""
    from app.engines.omni.stage_plugins import fused_launch

    value = name.partition("+")[2]
    if value:
        os.environ[fused_launch.VARIABLE] = value
    try:
        yield
    finally:
        os.environ.pop(fused_launch.VARIABLE, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,32", help="batch sizes, comma-separated")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--max-num-seqs", type=int, default=64, help="the talker's batch limit (the shipped profile's)")
    parser.add_argument(
        "--talker-hidden",
        type=int,
        default=HIDDEN,
        help="the talker's width: 1024 (0.6B) or 2048 (1.7B: the predictor's inputs projected to its 1024)",
    )
    parser.add_argument(
        "--predictors",
        default=",".join(SETTINGS),
        help="which SPEECH_OMNI__TALKER_MODEL settings' predictors to time, comma-separated; also "
        + ", ".join(FUSED_VARIANTS),
    )
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.predictors.split(",") if name.strip()]
    unknown = set(wanted) - set(SETTINGS) - set(FUSED_VARIANTS)
    if unknown or not wanted:
        parser.error(f"--predictors: {', '.join(sorted(unknown)) or 'none given'}: not a predictor this times")
    batches = sorted({int(b) for b in args.batches.split(",")})
    if batches[-1] > args.max_num_seqs:
        parser.error(f"--batches go past --max-num-seqs {args.max_num_seqs}")

    # each set-up timed as a first start on a host: nothing from Inductor's caches (on disk too), Triton's (the
    # fused kernels' builds) or another's graphs
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    import torch

    torch._inductor.config.force_disable_caches = True
    dtype = getattr(torch, args.dtype)
    rows = []
    built = predictors(torch, dtype, args.max_num_seqs, settings=wanted, talker_hidden=args.talker_hidden)
    for name, predictor in built.items():
        torch._dynamo.reset()
        with launched_as(name):  # what a capture records: a replay launches it as recorded
            began = time.perf_counter()
            with torch.inference_mode():
                predictor._setup_compile()
            torch.cuda.synchronize()
            set_up = time.perf_counter() - began
            with torch.inference_mode():
                graphs = capture(torch, predictor, dtype, batches)
        for batch in batches:
            graph = graphs[batch][0]
            gpu_ms, launch_ms, alone_ms = measure(torch, graph, args.replays)
            kernels = kernels_per_replay(torch, graph, min(args.replays, 20))
            rows.append((batch, name, gpu_ms, alone_ms, launch_ms, kernels, set_up, len(predictor._bucket_sizes)))
        print(f"{name}: set up in {set_up:.1f} s", file=sys.stderr)
    shape = f"the talker {args.talker_hidden} wide, " if args.talker_hidden != HIDDEN else ""
    print(f"# The code predictor alone ({shape}{args.dtype}, {torch.cuda.get_device_name()}, {args.replays} replays)\n")
    print(
        "| batch | SPEECH_OMNI__TALKER_MODEL | GPU ms a frame | one replay alone, GPU ms | host ms to launch "
        "| kernels a frame | set-up s "
        "| its buckets |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch, name, gpu_ms, alone_ms, launch_ms, kernels, set_up, buckets in sorted(rows):
        print(
            f"| {batch} | {name} | {gpu_ms:.3f} | {alone_ms:.3f} | {launch_ms:.3f} | {kernels:.0f} | {set_up:.1f} "
            f"| {buckets} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
