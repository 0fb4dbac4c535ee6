"""deploy/gpu/bench_profile.py: benchmarking copies of the deploy profiles."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.engines.codec_windows import CodecWindows
from app.engines.omni import talker_limits
from app.engines.qwen3_tts import codec_windows

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/gpu/bench_profile.py"
PROFILE = ROOT / "deploy/vllm-omni/customvoice.yaml"

_spec = importlib.util.spec_from_file_location("bench_profile", SCRIPT)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def original() -> dict:
    return yaml.safe_load(PROFILE.read_text())


def test_memory_and_frames_reach_every_stage_and_stage_0() -> None:
    config = original()
    out = bench.bench_profile(config, memory=0.14, frames=100)
    assert [s["gpu_memory_utilization"] for s in out["stages"]] == [0.14, 0.14]
    talker = out["stages"][0]["default_sampling_params"]
    assert (talker["max_tokens"], talker["min_tokens"]) == (101, 101)
    assert talker["temperature"] == 0.9 and talker["top_k"] == 50  # the rest of the sampling defaults kept
    assert out["stages"][1]["default_sampling_params"]["max_tokens"] == 65536  # code2wav untouched
    assert config == original()  # the input is not modified
    assert {k: v for k, v in out.items() if k != "stages"} == {k: v for k, v in config.items() if k != "stages"}


def test_overrides_address_stages_by_id_and_parse_yaml_values() -> None:
    config = original()
    config["stages"].reverse()  # stage_id, not list position
    out = bench.bench_profile(
        config,
        overrides=[
            "stages.1.async_scheduling=false",
            "connectors.connector_of_shared_memory.extra.decode_batch_max_size=16",
            "connectors.connector_of_shared_memory.extra.decode_cudagraph_capture_sizes=[1, 26, 51, 76, 97]",
            "stages.0.compilation_config.max_cudagraph_capture_size=32",
            "stages.0.new_section.key=text",
        ],
    )
    by_id = {s["stage_id"]: s for s in out["stages"]}
    assert by_id[1]["async_scheduling"] is False and by_id[0]["async_scheduling"] is True
    extra = out["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["decode_batch_max_size"] == 16
    assert extra["decode_cudagraph_capture_sizes"] == [1, 26, 51, 76, 97]
    untouched = config["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["codec_chunk_frames"] == untouched["codec_chunk_frames"]
    assert by_id[0]["compilation_config"] == {"max_cudagraph_capture_size": 32}
    assert by_id[0]["new_section"] == {"key": "text"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory": 0.0}, "fraction"),
        ({"memory": 1.5}, "fraction"),
        ({"frames": 0}, "at least 1"),
        ({"overrides": ["stages.7.max_num_seqs=8"]}, "stage_id 7"),
        ({"overrides": ["stages.1=3"]}, "whole stage"),
        ({"overrides": ["no_equals_sign"]}, "KEY.PATH=VALUE"),
        ({"overrides": ["a..b=1"]}, "KEY.PATH=VALUE"),
        ({"overrides": ["async_chunk.deeper=1"]}, "not a mapping"),
    ],
)
def test_bad_arguments_are_refused_clearly(kwargs: dict, message: str) -> None:
    with pytest.raises((ValueError, KeyError)) as info:
        bench.bench_profile(original(), **kwargs)
    assert message in str(info.value)


def test_command_line_writes_a_profile_the_service_reads(tmp_path: Path) -> None:
    out = tmp_path / "bench.yaml"
    args = [str(PROFILE), str(out), "--memory", "0.14", "--frames", "100", "--set", "stages.0.max_num_seqs=32"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True)
    assert "memory=0.14" in done.stdout
    text = out.read_text()
    assert text.startswith(f"# Benchmark copy of {PROFILE}: memory=0.14, frames=100, stages.0.max_num_seqs=32\n")
    written = yaml.safe_load(text)
    assert written["stages"][0]["max_num_seqs"] == 32
    assert written["stages"][0]["custom_process_next_stage_input_func"].startswith("app.engines.omni_stage_fix")
    assert talker_limits(str(out), None) == (32, 64)
    assert codec_windows(str(out)) == CodecWindows((2, 4, 8, 16, 25, 50), 50, ramp=True)  # the shipped ramp


def test_command_line_error_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(PROFILE), str(tmp_path / "x.yaml"), "--set", "stages.9.x=1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "bench_profile:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.yaml").exists()
