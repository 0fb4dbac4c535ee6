"""The vllm-omni deploy profiles: valid YAML, consistent with the service's settings, every knob explained."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from app.engines.omni.codec_windows import CodecWindows
from app.engines.omni.requests import codec_windows

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(ROOT.joinpath("deploy/vllm-omni").glob("*.yaml"))
SCHEDULER = ROOT / "app/engines/omni/stage_plugins/code2wav_scheduler.py"


def test_the_four_profiles_exist() -> None:
    assert [p.name for p in PROFILES] == ["customvoice.yaml", "throughput.yaml", "two-gpu.yaml", "voice-clone.yaml"]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_profile_is_consistent(profile: Path) -> None:
    config = yaml.safe_load(profile.read_text())
    assert config["async_chunk"] is True
    assert config["model_runner"] == "v2"  # vllm-omni 0.30's default runner for Qwen3-TTS on CUDA
    assert config["connectors"]["connector_of_shared_memory"]["name"] == "SharedMemoryConnector"
    extra = config["connectors"]["connector_of_shared_memory"]["extra"]
    ramp, steady = extra["codec_chunk_ramp"], extra["codec_chunk_frames"]
    assert codec_windows(str(profile)) == CodecWindows(tuple(ramp), steady, ramp=True)
    # the first audio leaves after one frame, and each next window at most doubles the audio in hand, so that it is
    # in time for any talker faster than twice real time; the last ramp size is the steady one (no cliff after it)
    assert ramp[0] == 1 and all(later <= 2 * sum(ramp[:i]) for i, later in enumerate(ramp) if i) and ramp[-1] == steady
    assert not extra.get("codec_chunk_adaptive")  # vllm-omni would let it win over the ramp
    talker, code2wav = config["stages"]
    assert (talker["stage_id"], code2wav["stage_id"]) == (0, 1)
    assert talker["output_connectors"]["to_stage_1"] == code2wav["input_connectors"]["from_stage_0"]
    assert talker["async_scheduling"]  # the talker's runner really overlaps steps
    # vllm-omni 0.30 sends every frame once: no stage-0 hook of the service's any more
    assert "custom_process_next_stage_input_func" not in talker
    assert code2wav["max_num_batched_tokens"] % 16 == 0  # 16 codebooks per frame
    assert code2wav["dtype"] == "bfloat16" and code2wav["enforce_eager"] is False  # upstream's decoder set-up
    # the talker's graphs: every decode batch (1, 2, 4, 8, then steps of 8 up to max_num_seqs) and prefills up to a
    # step's token budget (a step above the largest graph runs eagerly: a prompt is ~80 tokens); the list alone, vLLM
    # taking its cap from it (a cap beside it that disagreed would be refused at start)
    graphs = talker["compilation_config"]
    sizes, seqs = graphs["cudagraph_capture_sizes"], talker["max_num_seqs"]
    assert sizes == sorted(set(sizes)) and {1, 2, 4, *range(8, seqs + 1, 8)} <= set(sizes)
    assert max(sizes) == talker["max_num_batched_tokens"] and "max_cudagraph_capture_size" not in graphs
    # whole steps in graphs, prefills and mixed batches too, so that no step with a prompt in it runs its attention
    # eagerly between pieces (with every step's size graphed, FULL leaves no step to piecewise graphs)
    assert graphs["cudagraph_mode"] == "FULL"
    batches = extra.get("decode_cudagraph_batch_sizes", [1])
    assert max(batches) <= extra["decode_batch_max_size"]  # a graph for a batch the decoder never forms is waste


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_scheduler_settings_are_ones_the_scheduler_reads(profile: Path) -> None:
    """A misspelt knob would be ignored silently by the code2wav scheduler (it reads the connector's `extra`)."""
    extra = yaml.safe_load(profile.read_text())["connectors"]["connector_of_shared_memory"]["extra"]
    source = SCHEDULER.read_text()
    ours = [key for key in extra if key.startswith(("first_audio_first", "short_streams", "code2wav_", "engine_probe"))]
    assert ours, "the profile sets none of the scheduler's settings"
    for key in ours:
        assert f'"{key}"' in source, f"{key} is not read by {SCHEDULER.name}"


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


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_code2wav_gives_way_to_the_talker_under_cuda_mps(profile: Path) -> None:
    """Where both stages share a GPU, code2wav is a below-normal-priority CUDA MPS client and the talker a normal one:
    the measured order (benchmarks/gpu/2026-12-03-h200-omni-mps-code2wav-priority; the reverse was behind MPS alone).
    vllm-omni 0.30 applies a stage's `env` in its process, which CUDA reads as it starts there: strings only."""
    talker, code2wav = yaml.safe_load(profile.read_text())["stages"]
    assert "CUDA_MPS_CLIENT_PRIORITY" not in (talker.get("env") or {})
    if talker["devices"] == code2wav["devices"]:
        assert code2wav["env"] == {"CUDA_MPS_CLIENT_PRIORITY": "1"}
    else:  # a GPU each: no neighbour on the GPU to give way to
        assert "env" not in code2wav
