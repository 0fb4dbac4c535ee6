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
    budget = parallel_start_budget({"gpu_memory_utilization": 0.25, "devices": "1,2"}, tmp_path)
    assert asked == [1] and budget == 25 * GIB - 4096 - GIB
    # a stage without either: GPU 0 (within CUDA_VISIBLE_DEVICES) at vLLM's default 0.9
    assert parallel_start_budget({}, tmp_path) == math.ceil(100 * GIB * 0.9) - 4096 - GIB and asked == [1, 0]


def test_a_budget_the_stage_sets_itself_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_memory, "gpu_total_memory", lambda device: pytest.fail("no need to ask the GPU"))
    assert parallel_start_budget({"kv_cache_memory_bytes": 3 * GIB}, tmp_path) is None
