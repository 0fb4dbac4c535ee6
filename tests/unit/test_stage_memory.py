"""The talker's KV cache budget for a parallel start (app/engines/omni/stage_memory.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.engines.omni import stage_memory
from app.engines.omni.stage_memory import GIB, checkpoint_bytes, parallel_start_budget, talker_kv_cache_bytes


def test_the_budget_is_the_talkers_share_less_its_weights_and_activations() -> None:
    # the serial start's own terms on an H200 at 0.14: requested 19.57 GiB, weights 1.84, measured KV 17.42
    total = int(139.8 * GIB)
    budget = talker_kv_cache_bytes(total, 0.14, int(1.84 * GIB))
    assert budget == math.ceil(total * 0.14) - int(1.84 * GIB) - GIB
    assert 16.5 * GIB < budget < 17.42 * GIB  # no more than the serial start measured: code2wav's share untouched


def test_a_share_that_leaves_nothing_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"gpu_memory_utilization 0\.02 of 80\.0 GiB"):
        talker_kv_cache_bytes(80 * GIB, 0.02, int(1.84 * GIB))


def test_the_weights_are_the_checkpoints_files_at_the_top_of_the_model_directory(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "model-2.safetensors").write_bytes(b"\0" * 24)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "speech_tokenizer").mkdir()
    (tmp_path / "speech_tokenizer" / "model.safetensors").write_bytes(b"\0" * 5000)  # code2wav's, not the talker's
    assert checkpoint_bytes(tmp_path) == 1024
    assert checkpoint_bytes(tmp_path / "speech_tokenizer") == 5000


def test_the_stage_names_the_gpu_and_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: asked.append(device) or 100 * GIB)
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    talker = {"gpu_memory_utilization": 0.25, "devices": "1,2"}
    budget = parallel_start_budget(talker, {"devices": "1"}, tmp_path)
    assert asked == [1] and budget == 25 * GIB - 4096 - GIB


def test_what_vllm_omni_measures_right_is_left_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget the stage sets itself; each stage on its own GPU (nothing loads beside the talker while it measures);
    a MIG slice, whose share NVML's index does not tell. And no share in the profile: a warning, not a guess."""
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: pytest.fail("no need to ask the GPU"))
    share = {"gpu_memory_utilization": 0.3, "devices": "0"}
    assert parallel_start_budget({**share, "kv_cache_memory_bytes": 3 * GIB}, {"devices": "0"}, tmp_path) is None
    assert parallel_start_budget(share, {"devices": "1"}, tmp_path) is None
    assert parallel_start_budget({"devices": "0"}, {"devices": "0"}, tmp_path) is None
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: None)
    assert parallel_start_budget(share, {}, tmp_path) is None


def test_a_mig_slice_named_in_the_visible_devices_is_not_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-6a3a1b2c-0000-0000-0000-000000000000")
    assert stage_memory.gpu_total_memory(0) is None  # before any import of vLLM, which this machine may not have
