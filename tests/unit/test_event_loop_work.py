"""What a speech request costs the event loop it shares with vllm-omni's output handling: the garbage collector
traversing the startup heap."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.server import create_app
from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.fakes.vllm_omni_0_26 import FakeAsyncOmni
from tests.unit.test_omni_engine import make_engine


@pytest.fixture(scope="module")
def custom_voice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("cv"), "custom_voice")


@pytest.fixture
def unfrozen_heap() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_the_startup_heap_is_frozen_once_the_engine_is_ready(custom_voice_dir: Path, unfrozen_heap: None) -> None:
    """Objects alive at readiness are out of the collector's reach, so a full collection while serving traverses
    only what serving allocated."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    app = create_app(engine.__dict__["_settings"], engine=engine)
    assert gc.get_freeze_count() == 0
    async with app.router.lifespan_context(app):
        for _ in range(500):
            if engine.health().ready:
                break
            await asyncio.sleep(0.01)
        assert engine.health().ready  # seen by another task: the start task's step that made it ready has ended
        assert gc.get_freeze_count() > 10_000  # the libraries' objects, and the engine's
