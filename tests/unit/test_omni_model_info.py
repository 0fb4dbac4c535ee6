"""app/engines/omni/model_info.py: every stage's model inspected at once, before AsyncOmni inspects them one by one."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pytest

from app.engines.omni.model_info import inspect_at_once


@dataclass
class LazyModel:
    """vLLM 0.30's `_LazyRegisteredModel` as the service calls it: `inspect_model_cls()` (a fresh process, unless
    its model-info cache holds the class)."""

    meet: threading.Barrier | None = None
    error: Exception | None = None
    calls: list[str] = field(default_factory=list)

    def inspect_model_cls(self) -> object:
        self.calls.append(threading.current_thread().name)
        if self.meet is not None:
            self.meet.wait()  # every inspection waits for the others: one after another, the first never returns
        if self.error is not None:
            raise self.error
        return object()


@dataclass
class Registry:
    """vLLM 0.30's `_ModelRegistry`: its models by architecture (vllm-omni's `OmniModelRegistry` is one), each
    inspected through `_try_inspect_model_cls`, which logs a failed inspection and answers None."""

    models: dict[str, LazyModel]

    def _try_inspect_model_cls(self, model_arch: str) -> object | None:
        try:
            return self.models[model_arch].inspect_model_cls()
        except Exception:
            return None


def test_the_stages_models_are_inspected_at_the_same_time() -> None:
    meet = threading.Barrier(2, timeout=30)  # broken (and the test failed) only where they run one after another
    registry = Registry({"Talker": LazyModel(meet), "Code2Wav": LazyModel(meet)})
    inspect_at_once(registry, ["Talker", "Code2Wav"])
    assert not meet.broken
    assert all(len(model.calls) == 1 for model in registry.models.values())
    assert len({name for model in registry.models.values() for name in model.calls}) == 2  # two threads


def test_an_architecture_named_twice_is_inspected_once_and_one_it_does_not_hold_is_left_to_vllm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry({"Talker": LazyModel()})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        inspect_at_once(registry, ["Talker", "Talker", "Elsewhere"])
        inspect_at_once(registry, ["Elsewhere"])  # nothing it holds: nothing inspected, nothing logged
    assert len(registry.models["Talker"].calls) == 1
    assert [(record.message, record.architectures) for record in caplog.records] == [
        ("stage models inspected", ["Talker"])
    ]


def test_an_inspection_that_fails_is_logged_and_left_to_the_start_that_inspects_it_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry({"Talker": LazyModel(error=RuntimeError("no module named talker")), "Code2Wav": LazyModel()})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        inspect_at_once(registry, ["Talker", "Code2Wav"])
    warning = next(record for record in caplog.records if record.levelno == logging.WARNING)
    assert warning.failed == ["Talker"]
    assert len(registry.models["Code2Wav"].calls) == 1
