"""deploy/gpu/bench_profile.py: benchmarking copies of the deploy profiles."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.engines.omni.engine import talker_limits
from app.engines.omni.requests import codec_windows

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
    shipped = config["stages"][0]["default_sampling_params"]
    kept = {k: v for k, v in shipped.items() if k not in ("max_tokens", "min_tokens")}
    assert kept and kept.items() <= talker.items()  # the rest of the sampling defaults kept
    assert out["stages"][1]["default_sampling_params"] == config["stages"][1]["default_sampling_params"]  # code2wav
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
            "stages.0.compilation_config.cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32]",
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
    # one key of a section set, the section's others kept
    assert by_id[0]["compilation_config"] == {"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}
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
    # one header line: a path needs no line naming the file it resolved to, a profile without base_config no chain
    assert text.startswith(f"# Benchmark copy of {PROFILE}: memory=0.14, frames=100, stages.0.max_num_seqs=32\n")
    assert text.count("\n#") == 0
    written = yaml.safe_load(text)
    assert written["stages"][0]["max_num_seqs"] == 32
    assert {k: v for k, v in written.items() if k != "stages"} == {k: v for k, v in original().items() if k != "stages"}
    assert talker_limits(str(out), None)[0] == 32
    assert codec_windows(str(out)) == codec_windows(str(PROFILE))  # the shipped windows, as the service reads them


def test_command_line_error_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(PROFILE), str(tmp_path / "x.yaml"), "--set", "stages.9.x=1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "bench_profile:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.yaml").exists()


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def inheriting_profiles(folder: Path) -> Path:
    """Three profiles, each inheriting from the next (one in a subfolder: base_config is relative to the file that
    names it), that between them exercise every merge rule of vllm-omni 0.30's resolve_deploy_yaml."""
    write_yaml(
        folder / "bases/root.yaml",
        {
            "async_chunk": True,
            "model_runner": "v1",
            "connectors": {
                "shm": {"name": "SharedMemoryConnector", "extra": {"chunk": 25, "sizes": [1, 2], "deep": {"a": 1}}},
                "other": {"name": "Other"},
            },
            "stages": [
                {
                    "stage_id": 0,
                    "max_num_seqs": 64,
                    "devices": "0",
                    "compilation_config": {"mode": 3, "sizes": [1, 2]},
                    "default_sampling_params": {"temperature": 0.9, "top_k": 50, "max_tokens": 4096},
                    "subtalker_sampling_params": {"top_k": 50, "top_p": 1.0},
                    "engine_args": {"dtype": "float16", "extra": {"x": 1}},
                },
                {"stage_id": 1, "max_num_seqs": 10, "enforce_eager": True, "devices": "1"},
            ],
            "platforms": {
                "npu": {"stages": [{"stage_id": 0, "enforce_eager": True, "compilation_config": {"mode": 1}}]},
                "rocm": {"model_runner": "v1", "note": "base"},
            },
        },
    )
    write_yaml(
        folder / "bases/middle.yaml",
        {
            "base_config": "root.yaml",
            "model_runner": "v2",
            "platforms": {"npu": {"model_runner": "v1"}, "xpu": {"model_runner": "v1"}},
            "connectors": {"shm": {"extra": {"sizes": [1, 2, 4], "new": True, "deep": {"b": 2}}}},
            "stages": [{"stage_id": 1, "enforce_eager": False}],
        },
    )
    return write_yaml(
        folder / "top.yaml",
        {
            "base_config": "bases/middle.yaml",
            "session_mode": "turn",
            "connectors": {"shm": {"extra": {"chunk": 50}}, "added": {"name": "Added"}},
            "stages": [
                {
                    "stage_id": 1,
                    "max_num_seqs": 32,
                    "devices": "0",
                    "default_sampling_params": {"temperature": 0.0},
                },
                {
                    "stage_id": 0,
                    "max_num_seqs": 128,
                    "compilation_config": {"sizes": [8]},
                    "default_sampling_params": {"max_tokens": 2048},
                    "engine_args": {"extra": {"y": 2}},
                },
                {"stage_id": 2, "max_num_seqs": 1},
            ],
            "platforms": {
                "npu": {"stages": [{"stage_id": 0, "compilation_config": {"sizes": [4]}}, {"stage_id": 1, "x": 1}]},
                "rocm": {"note": "top"},
            },
        },
    )


def test_base_config_chain_is_flattened_with_vllm_omni_s_merge_rules(tmp_path: Path) -> None:
    flat, files = bench.resolve_profile(inheriting_profiles(tmp_path))
    assert [f.name for f in files] == ["top.yaml", "middle.yaml", "root.yaml"]
    assert "base_config" not in flat
    # top-level scalars: the nearer file wins, the others are inherited
    assert (flat["model_runner"], flat["async_chunk"], flat["session_mode"]) == ("v2", True, "turn")
    # connectors merge recursively; a list is replaced whole, not merged
    assert flat["connectors"] == {
        "shm": {
            "name": "SharedMemoryConnector",
            "extra": {"chunk": 50, "sizes": [1, 2, 4], "deep": {"a": 1, "b": 2}, "new": True},
        },
        "other": {"name": "Other"},
        "added": {"name": "Added"},
    }
    # stages merge by stage_id in the base's order (a new stage comes last); a field is replaced whole ...
    assert [s["stage_id"] for s in flat["stages"]] == [0, 1, 2]
    talker, code2wav, extra_stage = flat["stages"]
    assert talker["max_num_seqs"] == 128 and talker["devices"] == "0"
    assert talker["compilation_config"] == {"sizes": [8]}  # not a deep-merge key: the base's mode is gone
    # ... except the sampling parameters, engine_extras and engine_args, which merge key by key
    assert talker["default_sampling_params"] == {"temperature": 0.9, "top_k": 50, "max_tokens": 2048}
    assert talker["subtalker_sampling_params"] == {"top_k": 50, "top_p": 1.0}
    assert talker["engine_args"] == {"dtype": "float16", "extra": {"x": 1, "y": 2}}
    assert code2wav == {
        "stage_id": 1,
        "max_num_seqs": 32,
        "enforce_eager": False,
        "devices": "0",
        "default_sampling_params": {"temperature": 0.0},
    }
    assert extra_stage == {"stage_id": 2, "max_num_seqs": 1}
    # platforms: per platform the nearer file's keys win, its stages merge by stage_id as the top-level ones do,
    # and every platform carries a stages list (empty where no file gives it one), as upstream's resolved dict does
    assert flat["platforms"] == {
        "npu": {
            "model_runner": "v1",
            "stages": [
                {"stage_id": 0, "enforce_eager": True, "compilation_config": {"sizes": [4]}},
                {"stage_id": 1, "x": 1},
            ],
        },
        "rocm": {"model_runner": "v1", "note": "top", "stages": []},
        "xpu": {"model_runner": "v1", "stages": []},
    }


def test_a_profile_without_base_config_is_read_as_it_is(tmp_path: Path) -> None:
    profile = write_yaml(tmp_path / "p.yaml", {"stages": [{"stage_id": 0}], "platforms": {"npu": {"x": 1}}})
    assert bench.resolve_profile(profile) == (yaml.safe_load(profile.read_text()), [profile])


def test_an_inheritance_cycle_is_refused(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", {"base_config": "b.yaml", "stages": [{"stage_id": 0}]})
    write_yaml(tmp_path / "b.yaml", {"base_config": "a.yaml"})
    with pytest.raises(ValueError, match="base_config cycle"):
        bench.resolve_profile(tmp_path / "a.yaml")


def test_package_source_reads_vllm_omni_s_deploy_folder_given_or_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy = tmp_path / "deploy"
    write_yaml(deploy / "x.yaml", {"stages": [{"stage_id": 0}]})
    assert bench.source_path("vllm-omni:x.yaml", deploy) == deploy / "x.yaml"
    monkeypatch.setenv("VLLM_OMNI_DEPLOY_DIR", str(deploy))
    assert bench.source_path("vllm-omni:x.yaml") == deploy / "x.yaml"
    assert bench.source_path("deploy/vllm-omni/customvoice.yaml") == Path("deploy/vllm-omni/customvoice.yaml")
    with pytest.raises(ValueError, match=re.escape(f"no y.yaml in {deploy}")):
        bench.source_path("vllm-omni:y.yaml")
    for bad in ("vllm-omni:", "vllm-omni:../x.yaml", "vllm-omni:/etc/x.yaml"):
        with pytest.raises(ValueError, match=r"want vllm-omni:NAME\.yaml"):
            bench.source_path(bad)


def test_package_source_finds_the_installed_package_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site/vllm_omni"
    (package / "__init__.py").parent.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imported: find_spec should not run this')\n")
    write_yaml(package / "deploy/x.yaml", {"stages": [{"stage_id": 0}]})
    monkeypatch.delenv("VLLM_OMNI_DEPLOY_DIR", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert bench.source_path("vllm-omni:x.yaml") == package / "deploy/x.yaml"
    assert "vllm_omni" not in sys.modules


def test_package_source_without_vllm_omni_says_how_to_point_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("vllm_omni") is not None:
        pytest.skip("vllm_omni is importable here")
    monkeypatch.delenv("VLLM_OMNI_DEPLOY_DIR", raising=False)
    with pytest.raises(ValueError, match=r"vllm_omni is not importable .* VLLM_OMNI_DEPLOY_DIR"):
        bench.source_path("vllm-omni:qwen3_tts.yaml")


@pytest.mark.parametrize(
    ("text", "memory"),
    [("0.14", 0.14), ("1", 1.0), ("0:0.12,1:0.10", {0: 0.12, 1: 0.10}), ("1:0.2", {1: 0.2})],
)
def test_memory_is_one_share_or_one_per_stage(text: str, memory: object) -> None:
    assert bench.parse_memory(text) == memory


@pytest.mark.parametrize("text", ["", "a", "0.1,0.2", "0:", "x:0.1", "0:0.1,1"])
def test_memory_in_another_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--memory wants F or STAGE:F,STAGE:F"):
        bench.parse_memory(text)


def test_memory_per_stage_sets_the_stages_named_and_keeps_the_others() -> None:
    config = original()
    config["stages"].reverse()  # stage_id, not list position
    out = bench.bench_profile(config, memory={1: 0.1})
    by_id = {s["stage_id"]: s for s in out["stages"]}
    assert by_id[1]["gpu_memory_utilization"] == 0.1
    assert by_id[0]["gpu_memory_utilization"] == original()["stages"][0]["gpu_memory_utilization"]
    with pytest.raises(ValueError, match=r"names stage 5; the profile's stage_ids are \[0, 1\]"):
        bench.bench_profile(config, memory={5: 0.1})
    with pytest.raises(ValueError, match="fraction"):
        bench.bench_profile(config, memory={0: 1.2})


def test_memory_reaches_a_stage_that_sets_it_in_engine_args() -> None:
    """In the nested layout vllm-omni lets engine_args win over the stage's flat fields: the share goes there too."""
    config = {"stages": [{"stage_id": 0, "engine_args": {"gpu_memory_utilization": 0.9, "dtype": "bf16"}}]}
    out = bench.bench_profile(config, memory=0.2)
    assert out["stages"][0]["engine_args"] == {"gpu_memory_utilization": 0.2, "dtype": "bf16"}
    assert out["stages"][0]["gpu_memory_utilization"] == 0.2


def test_command_line_flattens_a_package_profile_and_names_what_it_read(tmp_path: Path) -> None:
    top = inheriting_profiles(tmp_path / "deploy")
    out = tmp_path / "bench.yaml"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "vllm-omni:top.yaml", str(out), "--memory", "0:0.12,1:0.1", "--frames", "100"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "VLLM_OMNI_DEPLOY_DIR": str(tmp_path / "deploy")},
    )
    assert "memory=0:0.12,1:0.1, frames=100" in done.stdout
    lines = out.read_text().splitlines()
    assert lines[:3] == [
        "# Benchmark copy of vllm-omni:top.yaml: memory=0:0.12,1:0.1, frames=100",
        f"# source file: {top.resolve()}",
        "# base_config flattened (as vllm-omni 0.30 merges it): top.yaml <- middle.yaml <- root.yaml",
    ]
    written = yaml.safe_load(out.read_text())
    flat, _ = bench.resolve_profile(top)
    assert "base_config" not in written and written["platforms"] == flat["platforms"]
    assert [s.get("gpu_memory_utilization") for s in written["stages"]] == [0.12, 0.1, None]  # stage 2: none
    assert written == bench.bench_profile(flat, {0: 0.12, 1: 0.1}, 100)


def test_upstream_single_gpu_high_concurrency_profile_flattens_to_its_known_values(tmp_path: Path) -> None:
    """The real profile (three files deep) as the installed vllm-omni 0.30 ships it."""
    if importlib.util.find_spec("vllm_omni") is None:
        pytest.skip("vllm_omni is not importable here")
    source = "vllm-omni:qwen3_tts_high_concurrency_mrv2_single_gpu.yaml"
    flat, files = bench.resolve_profile(bench.source_path(source))
    assert [f.name for f in files] == [
        "qwen3_tts_high_concurrency_mrv2_single_gpu.yaml",
        "qwen3_tts_high_concurrency_mrv2.yaml",
        "qwen3_tts_high_concurrency.yaml",
    ]
    by_id = {s["stage_id"]: s for s in flat["stages"]}
    assert flat["model_runner"] == "v2" and "base_config" not in flat
    assert by_id[0]["max_num_seqs"] == 128 and by_id[1]["max_num_seqs"] == 32
    assert by_id[0]["devices"] == by_id[1]["devices"] == "0"
    assert by_id[1]["enforce_eager"] is False
    extra = flat["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["decode_batch_max_size"] == 8
    assert extra["decode_cudagraph_batch_sizes"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert flat["platforms"]["npu"]["model_runner"] == "v1"
