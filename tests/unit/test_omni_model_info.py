"""app/engines/omni/model_info.py: every stage's model class imported in the server's process and registered there as
its class, so that vLLM describes it from the class instead of from a fresh Python process."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.engines.omni.model_info import register_in_process


class TalkerClass:
    pass


class Code2WavClass:
    pass


@dataclass(frozen=True)
class LazyModel:
    """vLLM 0.30's `_LazyRegisteredModel`: a class by its module's and its own name, imported by `load_model_cls()`,
    and inspected by `inspect_model_cls()` in a fresh Python process (which this stand-in refuses)."""

    module_name: str
    class_name: str
    loaded: type | None = None

    def load_model_cls(self) -> type:
        if self.loaded is None:
            raise ModuleNotFoundError(f"No module named {self.module_name!r}")
        return self.loaded

    def inspect_model_cls(self) -> str:
        raise AssertionError("a fresh process inspected the class")


@dataclass(frozen=True)
class ClassModel:
    """vLLM 0.30's `_RegisteredModel`: the class itself, described from its attributes where it is registered."""

    model_cls: type

    def inspect_model_cls(self) -> str:
        return self.model_cls.__name__


@dataclass
class Registry:
    """vLLM 0.30's `_ModelRegistry` (vllm-omni's `OmniModelRegistry` is one): its models by architecture, and
    `register_model`, which keeps a `module:Class` name lazily and a class as the class."""

    models: dict[str, LazyModel | ClassModel]
    registered: list[str] = field(default_factory=list)

    def register_model(self, model_arch: str, model_cls: type | str) -> None:
        assert isinstance(model_cls, type), "registered by name again"
        self.models[model_arch] = ClassModel(model_cls)
        self.registered.append(model_arch)


def lazy(model_cls: type | None, name: str = "Missing") -> LazyModel:
    return LazyModel("stage_models", model_cls.__name__ if model_cls else name, model_cls)


def test_each_stage_model_is_registered_as_its_class_and_described_without_a_process() -> None:
    registry = Registry({"Talker": lazy(TalkerClass), "Code2Wav": lazy(Code2WavClass), "Other": lazy(None)})
    assert register_in_process([registry], ["Talker", "Code2Wav"]) == ["Talker", "Code2Wav"]
    assert registry.models["Talker"] == ClassModel(TalkerClass)
    assert [registry.models[arch].inspect_model_cls() for arch in ("Talker", "Code2Wav")] == [
        "TalkerClass",
        "Code2WavClass",
    ]
    assert isinstance(registry.models["Other"], LazyModel)  # a model no stage runs is not imported


def test_a_model_named_twice_not_held_or_already_a_class_is_registered_once_or_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry({"Talker": lazy(TalkerClass), "Code2Wav": ClassModel(Code2WavClass)})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        assert register_in_process([registry], ["Talker", "Talker", "Elsewhere", "Code2Wav"]) == ["Talker"]
        assert register_in_process([registry], ["Elsewhere", "Talker"]) == []  # nothing left to do: nothing logged
    assert registry.registered == ["Talker"]
    assert [(record.message, record.architectures) for record in caplog.records] == [
        ("stage models inspected", ["Talker"])
    ]


def test_a_model_that_cannot_be_imported_here_is_left_to_vllm_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry({"Talker": lazy(None, "Talker"), "Code2Wav": lazy(Code2WavClass)})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        assert register_in_process([registry], ["Talker", "Code2Wav"]) == ["Code2Wav"]
    assert registry.models["Talker"] == lazy(None, "Talker")  # as vLLM registered it: vLLM inspects it as before
    warning = next(record for record in caplog.records if record.levelno == logging.WARNING)
    assert warning.architecture == "Talker" and "No module named" in caplog.text
    assert caplog.records[-1].left == ["Talker"]


def test_an_import_that_initialised_cuda_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    cuda = {"initialized": False}

    @dataclass(frozen=True)
    class CudaOnImport(LazyModel):
        def load_model_cls(self) -> type:
            cuda["initialized"] = True  # as a module that touches CUDA when it is imported
            return super().load_model_cls()

    registry = Registry({"Talker": lazy(TalkerClass), "Code2Wav": CudaOnImport("stage_models", "C", Code2WavClass)})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        register_in_process([registry], ["Talker"], lambda: cuda["initialized"])
        assert not any(record.levelno == logging.WARNING for record in caplog.records)  # untouched: no warning
        register_in_process([registry], ["Code2Wav"], lambda: cuda["initialized"])
    warning = next(record for record in caplog.records if record.levelno == logging.WARNING)
    assert "initialised CUDA" in warning.message and warning.architectures == ["Code2Wav"]


def test_a_model_held_by_name_in_both_registries_is_imported_once_and_registered_as_its_class_in_each() -> None:
    """vllm-omni builds each stage's config twice: vLLM's ModelConfig first, inspecting through vLLM's ModelRegistry,
    then its OmniModelConfig, through OmniModelRegistry (tests/unit/test_vllm_omni_wheel.py). Registered in one, the
    other still inspected the class in a fresh process: 13 and 16 s of a start on an H200."""
    loads: list[str] = []

    @dataclass(frozen=True)
    class Counted(LazyModel):
        def load_model_cls(self) -> type:
            loads.append(self.class_name)
            return super().load_model_cls()

    vllms = Registry({"Talker": Counted("stage_models", "TalkerClass", TalkerClass), "Code2Wav": lazy(Code2WavClass)})
    omnis = Registry(
        {"Talker": Counted("stage_models", "TalkerClass", TalkerClass), "Code2Wav": ClassModel(Code2WavClass)}
    )
    assert register_in_process([vllms, omnis], ["Talker", "Code2Wav"]) == ["Talker", "Code2Wav"]
    assert loads == ["TalkerClass"]
    assert vllms.models == omnis.models == {"Talker": ClassModel(TalkerClass), "Code2Wav": ClassModel(Code2WavClass)}
    assert (vllms.registered, omnis.registered) == (["Talker", "Code2Wav"], ["Talker"])
    assert all(model.inspect_model_cls() for registry in (vllms, omnis) for model in registry.models.values())


def test_the_description_is_written_to_vllms_cache_for_each_name_it_was_held_by_once() -> None:
    """vllm-omni registers its own models by name again in vLLM's registry as it builds each stage's config: vLLM then
    reads the description from its model-info cache (as it writes it after a fresh process) instead of starting one."""
    cache: dict[tuple[str, str], str] = {}

    @dataclass(frozen=True)
    class Cached(LazyModel):  # vLLM 0.30's cache methods, keyed by the module's file
        def _get_modelinfo_module_hash(self, path: Path) -> str:
            return path.name

        def _load_modelinfo_from_cache(self, module_hash: str) -> str | None:
            return cache.get((self.class_name, module_hash))

        def _save_modelinfo_to_cache(self, info: str, module_hash: str) -> None:
            assert (self.class_name, module_hash) not in cache, "written again"
            cache[(self.class_name, module_hash)] = info

    here = __name__  # an importable module, as a model's is
    vllms = Registry({"Talker": Cached(here, "TalkerClass", TalkerClass)})
    omnis = Registry({"Talker": Cached(here, "TalkerClass", TalkerClass)})
    assert register_in_process([vllms, omnis], ["Talker"]) == ["Talker"]
    assert cache == {("TalkerClass", Path(__file__).name): "TalkerClass"}  # what the class describes itself as
    again = Registry({"Talker": Cached(here, "TalkerClass", TalkerClass)})
    assert register_in_process([again], ["Talker"]) == ["Talker"]  # cached already: not written twice


def test_a_cache_that_cannot_be_written_leaves_the_class_registered(caplog: pytest.LogCaptureFixture) -> None:
    @dataclass(frozen=True)
    class Unwritable(LazyModel):
        def _get_modelinfo_module_hash(self, path: Path) -> str:
            raise PermissionError(f"{path}: read-only")

    registry = Registry({"Talker": Unwritable(__name__, "TalkerClass", TalkerClass)})
    with caplog.at_level(logging.INFO, logger="app.engines.omni.model_info"):
        assert register_in_process([registry], ["Talker"]) == ["Talker"]
    assert registry.models["Talker"] == ClassModel(TalkerClass)
    assert "not cached" in caplog.text and "read-only" in caplog.text


def test_registries_that_name_different_classes_for_one_architecture_each_get_their_own() -> None:
    """vLLM maps some architectures to its own module and vllm-omni to another (Qwen3-Omni): each registry keeps the
    class it named, and each name's description is cached under that name, never the other's class."""
    cache: dict[str, str] = {}

    @dataclass(frozen=True)
    class Cached(LazyModel):
        def _get_modelinfo_module_hash(self, path: Path) -> str:
            return path.name

        def _load_modelinfo_from_cache(self, module_hash: str) -> str | None:
            return None

        def _save_modelinfo_to_cache(self, info: str, module_hash: str) -> None:
            cache[self.class_name] = info

    vllms = Registry({"Talker": Cached(__name__, "TalkerClass", TalkerClass)})
    omnis = Registry({"Talker": Cached(__name__, "Code2WavClass", Code2WavClass)})
    assert register_in_process([vllms, omnis], ["Talker"]) == ["Talker"]
    assert (vllms.models["Talker"], omnis.models["Talker"]) == (ClassModel(TalkerClass), ClassModel(Code2WavClass))
    assert cache == {"TalkerClass": "TalkerClass", "Code2WavClass": "Code2WavClass"}
