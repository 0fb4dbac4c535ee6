"""Weight-less Qwen3-TTS model directories for the omni engine's unit tests (over the vllm-omni fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir


@pytest.fixture(scope="module")
def custom_voice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("cv"), "custom_voice")


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("base"), "base")
