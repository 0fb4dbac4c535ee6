"""The vllm-omni deploy profiles: valid YAML, consistent with the service's settings, every knob explained."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from app.engines.codec_windows import CodecWindows
from app.engines.qwen3_tts import codec_windows

PROFILES = sorted(Path(__file__).resolve().parents[2].joinpath("deploy/vllm-omni").glob("*.yaml"))
STAGE_FIX = Path(__file__).resolve().parents[2] / "app/engines/omni_stage_fix.py"


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
    else:
        assert codec_windows(str(profile)) == CodecWindows((first,), steady) == CodecWindows((1,), 25)
    talker, code2wav = config["stages"]
    assert (talker["stage_id"], code2wav["stage_id"]) == (0, 1)
    assert talker["output_connectors"]["to_stage_1"] == code2wav["input_connectors"]["from_stage_0"]
    assert talker["async_scheduling"]  # the talker's runner really overlaps steps
    if profile.name == "customvoice.yaml":
        # code2wav's runner does not overlap: a queued second step only delays each window's audio (measured)
        assert code2wav["async_scheduling"] is False
        # every batch a step can form in the two streaming buckets has its graph
        shapes = {tuple(shape) for shape in extra["decode_cudagraph_extra_capture_shapes"]}
        for bucket in extra["decode_batch_bucket_frames"]:
            assert bucket in extra["decode_cudagraph_capture_sizes"]
            assert {(batch, bucket) for batch in range(2, extra["decode_batch_max_size"] + 1)} <= shapes
        assert extra["decode_batch_max_size"] == max(batch for batch, _ in shapes)
        assert extra["first_audio_first_margin_s"] > 0
    assert code2wav["max_num_batched_tokens"] % 16 == 0  # 16 codebooks per frame
    assert code2wav["max_num_seqs"] >= talker["max_num_seqs"]
    # larger talker graphs are never used and each recompiles the code predictor at start-up
    assert talker["compilation_config"]["max_cudagraph_capture_size"] == talker["max_num_seqs"]
    module, function = talker["custom_process_next_stage_input_func"].rsplit(".", 1)
    assert module == "app.engines.omni_stage_fix"
    defined = {node.name for node in ast.parse(STAGE_FIX.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert function in defined


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
