"""The vllm-omni deploy profiles: valid YAML, consistent with the service's settings, every knob explained."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from app.engines.codec_windows import CodecWindows
from app.engines.qwen3_tts import codec_windows

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(ROOT.joinpath("deploy/vllm-omni").glob("*.yaml"))
STAGE_FIX = ROOT / "app/engines/omni_stage_fix.py"
# code2wav's decoder measured shape by shape on an H100 (deploy/gpu/decoder_graph_bench.py)
DECODER_BENCH = ROOT / "loadtest/results/gpu/2026-11-25-h100-decoder-graphs/bench-fp32.json"
H100_MIB = 79.18 * 1024  # the memory torch reports for an 80 GB H100
NON_STREAMING_CHUNK = 325  # the decoder's own chunk (300 + 25 frames of context), one request at a time


def test_the_three_profiles_exist() -> None:
    assert [p.name for p in PROFILES] == ["customvoice.yaml", "two-gpu.yaml", "voice-clone.yaml"]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_profile_is_consistent(profile: Path) -> None:
    config = yaml.safe_load(profile.read_text())
    assert config["async_chunk"] is True
    extra = config["connectors"]["connector_of_shared_memory"]["extra"]
    assert config["connectors"]["connector_of_shared_memory"]["name"] == "SharedMemoryConnector"
    first, steady = extra["initial_codec_chunk_frames"], extra["codec_chunk_frames"]
    if "codec_chunk_ramp" in extra:
        ramp = extra["codec_chunk_ramp"]
        assert codec_windows(str(profile)) == CodecWindows(tuple(ramp), steady, ramp=True) and ramp[-1] == steady
        # every window of the ramp, with its left context, pads into a streaming bucket that has CUDA graphs
        buckets, graphs = extra["decode_batch_bucket_frames"], extra["decode_cudagraph_capture_sizes"]
        sent = 0
        for size in ramp:
            window = min(sent, extra["codec_left_context_frames"]) + size
            assert window <= max(buckets) and min(b for b in buckets if b >= window) in graphs
            sent += size
        # and so does every steady window after it, at full context
        assert extra["codec_left_context_frames"] + steady == max(buckets) and max(buckets) in graphs
    else:
        assert codec_windows(str(profile)) == CodecWindows((first,), steady) == CodecWindows((1,), 25)
    talker, code2wav = config["stages"]
    assert (talker["stage_id"], code2wav["stage_id"]) == (0, 1)
    assert talker["output_connectors"]["to_stage_1"] == code2wav["input_connectors"]["from_stage_0"]
    assert talker["async_scheduling"]  # the talker's runner really overlaps steps
    if profile.name == "customvoice.yaml":
        # code2wav's runner does not overlap: a queued second step only delays each window's audio (measured)
        assert code2wav["async_scheduling"] is False
        # batches of 1 to 4 in the ramp's buckets have graphs (where a graph saves most, measured), batch 1 in the
        # steady windows' (the three more there would hold about 9 GiB); larger ones, up to the batch cap, run eagerly
        shapes = decoder_graph_shapes(extra)
        *ramp_buckets, steady_bucket = extra["decode_batch_bucket_frames"]
        for bucket in ramp_buckets:
            assert {(batch, bucket) for batch in range(1, 5)} <= shapes
        assert (1, steady_bucket) in shapes
        assert extra["decode_batch_max_size"] == extra["code2wav_max_windows_per_step"] == 16
        assert extra["first_audio_first_margin_s"] > 0
    assert code2wav["max_num_batched_tokens"] % 16 == 0  # 16 codebooks per frame
    assert code2wav["max_num_seqs"] >= talker["max_num_seqs"]
    # larger talker graphs are never used and each recompiles the code predictor at start-up
    assert talker["compilation_config"]["max_cudagraph_capture_size"] == talker["max_num_seqs"]
    module, function = talker["custom_process_next_stage_input_func"].rsplit(".", 1)
    assert module == "app.engines.omni_stage_fix"
    defined = {node.name for node in ast.parse(STAGE_FIX.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert function in defined


def decoder_graph_shapes(extra: dict) -> set[tuple[int, int]]:
    """The (batch, frames) shapes whose CUDA graphs vllm-omni 0.26.0's code2wav captures for a profile."""
    sizes, batches = extra["decode_cudagraph_capture_sizes"], extra.get("decode_cudagraph_batch_sizes", [1])
    shapes = {(batch, size) for batch in batches for size in sizes}
    return shapes | {(batch, size) for batch, size in extra.get("decode_cudagraph_extra_capture_shapes", [])}


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_code2wav_decoder_fits_its_share_of_an_h100(profile: Path) -> None:
    """Code2wav's decoder graphs, its largest eager call and its weights fit the stage's share of an 80 GB H100.

    Each graph keeps its activations for as long as the server runs, and in the server they add up: captured into
    one pool by themselves the ten graphs of a profile held 3.0 GiB (decoder_graph_bench.py), but code2wav's own
    warm-up of the same ten reserved 14.0 GiB (0.72 -> 14.75 GiB in every start log of
    loadtest/results/gpu/2026-11-25-h100-faithful, each graph's own pool summed: 13.9 GiB), and a code2wav that ran
    out of memory under load had 14.1 GiB in graph pools. So a graph counts as its own pool, as measured alone, or at
    the most memory per window-frame measured for any graph where its shape was not measured. The largest eager call
    is the batch cap times the longest streaming window, at what a graph of that shape holds. Once, every batch up
    to 16 had a graph: code2wav took 70 GiB, ran out of memory and did not start."""
    config = yaml.safe_load(profile.read_text())
    extra = config["connectors"]["connector_of_shared_memory"]["extra"]
    code2wav = config["stages"][1]
    bench = json.loads(DECODER_BENCH.read_text())
    measured = {(row["batch"], row["frames"]): row["pool_mib"] for row in bench["shapes"]}
    per_window_frame = max(pool / (batch * frames) for (batch, frames), pool in measured.items())

    def held(batch: int, frames: int) -> float:
        return measured.get((batch, frames), per_window_frame * batch * frames)

    graphs = sum(held(batch, frames) for batch, frames in decoder_graph_shapes(extra))
    batch_cap = extra.get("decode_batch_max_size", 0)
    assert batch_cap > 0, "without decode_batch_max_size a step's windows of one length form one eager call"
    # the longest window a step streams: the largest bucket where windows are bucketed (CustomVoice windows end at
    # 72 + the steady window), else the longest captured length short of the non-streaming chunk (Base: reference
    # context)
    buckets = extra.get("decode_batch_bucket_frames")
    sizes = extra["decode_cudagraph_capture_sizes"]
    longest = max(buckets) if buckets else max(size for size in sizes if size < NON_STREAMING_CHUNK)
    eager = held(batch_cap, longest)
    weights = bench["decoder_params"] * 4 / 2**20  # float32
    share = code2wav["gpu_memory_utilization"] * H100_MIB
    assert graphs + eager + weights <= share, (
        f"decoder graphs {graphs:.0f} MiB + eager call {eager:.0f} + weights {weights:.0f} > share {share:.0f} MiB"
    )


TRIVIAL = (
    "stage_id",
    "trust_remote_code",
    "devices",
    "to_stage_1",
    "from_stage_0",
    "name",
    "temperature",
    "top_k",
    "top_p",
    "do_sample",
    "max_tokens",
    "repetition_penalty",
)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_knob_is_commented(profile: Path) -> None:
    """Every setting carries a comment on its line or directly above it (sampling values excepted: their block's
    comment explains them)."""
    lines = profile.read_text().splitlines()
    bare = []
    for index, line in enumerate(lines):
        match = re.match(r"\s*-?\s*([a-z_0-9]+):\s*\S", line)
        if not match or "#" in line or match.group(1) in TRIVIAL:
            continue
        if index == 0 or not lines[index - 1].strip().startswith("#"):
            bare.append(line.strip())
    assert bare == []
