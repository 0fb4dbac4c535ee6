"""code2wav's window doorbell (app/engines/omni/stage_plugins/window_doorbell_stage.py) on vllm-omni 0.30 itself:
the talker's connector is vllm-omni's shared-memory connector that rings once a window is in /dev/shm, and what it
wrote code2wav's side reads back; code2wav's worker extends the worker vllm-omni gives a generation stage on CUDA.
The whole path (a server whose profile names the connector) is measured by the request timeline."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest

from app.engines.omni.stage_plugins import window_doorbell
from tests.gpu.support import torch_with_vllm_omni_030


@pytest.fixture(scope="module")
def stage() -> Any:
    torch_with_vllm_omni_030("the window doorbell's connector and worker")
    from app.engines.omni.stage_plugins import window_doorbell_stage

    return window_doorbell_stage


def test_the_connector_rings_after_vllm_omnis_write_and_the_window_reads_back(
    stage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"speech-gpu-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(window_doorbell.ADDRESS_VARIABLE, name)
    rang = threading.Event()
    listener = window_doorbell.Listener(window_doorbell.address(name), rang.set)
    talker, code2wav = stage.create_connector({"stage_id": 0}), stage.create_connector({"stage_id": 1})
    key = f"doorbell-{uuid.uuid4().hex}"
    try:
        ok, size, _ = talker.put("0", "1", key, {"codes": list(range(32))})
        assert ok and size > 0
        assert rang.wait(30)
        got = code2wav.get("0", "1", key)
        assert got is not None and got[0] == {"codes": list(range(32))}
    finally:
        listener.close()
        talker.close()
        code2wav.close()


def test_code2wavs_worker_extends_the_one_vllm_omni_gives_a_generation_stage(stage: Any) -> None:
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm_omni.platforms import current_omni_platform

    default = resolve_obj_by_qualname(current_omni_platform.get_omni_generation_worker_cls())
    assert issubclass(stage.DoorbellGenerationWorker, default)
    assert resolve_obj_by_qualname(window_doorbell.WORKER_CLASS) is stage.DoorbellGenerationWorker
