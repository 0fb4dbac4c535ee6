"""Speech engines behind one protocol (`app.engine_protocol`). Engine libraries are imported only by their engine."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # vllm-omni's stage processes import the stage plugins through this package: it stays light
    from app.engine_protocol import SpeechEngine
    from app.engines.omni import OmniEngine
    from app.engines.sglang import SglangEngine
    from app.settings import Settings


@dataclass(frozen=True, slots=True)
class EngineKind:
    """What an engine needs to run: `package` is what it imports, `distribution` that package as pip names it,
    `install` the command that brings it, `gpu` whether it needs an NVIDIA GPU (and its settings group a model)."""

    package: str
    distribution: str
    install: str
    gpu: bool


# Engines this build provides, by name, in the order `auto` tries them: the first whose requirements are met.
# Each engine's packages come with the extra of its name (pyproject.toml), installed as README.md and docs/engines.md
# say: with the word aligner beside a GPU engine, and sglang's without the test tools, whose pins conflict with its own
ENGINES = {
    "omni": EngineKind("vllm_omni", "vllm-omni", 'make install EXTRAS="--extra omni --extra align"', gpu=True),
    "sglang": EngineKind(
        "sglang_omni",
        "sglang-omni",
        'make install EXTRAS="--extra sglang --extra align" SYNC_FLAGS=--no-dev',
        gpu=True,
    ),
    "embedded": EngineKind("hibari", "hibari-tts", 'make install EXTRAS="--extra embedded"', gpu=False),
}


def gpu_present() -> bool:
    """An NVIDIA GPU visible to this process, judged without importing a CUDA library."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return (
        os.path.exists("/dev/nvidia0")
        or os.path.isdir("/proc/driver/nvidia/gpus")
        or shutil.which("nvidia-smi") is not None
    )


def package_installed(package: str) -> bool:
    """`package` importable here, found without importing it."""
    return importlib.util.find_spec(package) is not None


def engine_available(name: str) -> bool:
    return unavailable_because(name) is None


def unavailable_because(name: str) -> str | None:
    """Why engine `name` cannot run here, and what to do about it; None where it can."""
    kind = ENGINES.get(name)
    if kind is None:
        return f"there is no {name!r} engine"
    if not package_installed(kind.package):
        if kind.gpu and not (sys.platform == "linux" and platform.machine() == "x86_64"):
            # its extra's requirements are marked for Linux x86_64 alone: installed elsewhere it brings nothing
            return f"the {name} engine runs on Linux x86_64 only (this is {sys.platform} {platform.machine()})"
        if name == "sglang" and sys.version_info >= (3, 13):
            return "the sglang engine runs on Python 3.11 or 3.12 only (sglang-omni's own limit)"
        return (
            f"the {name} engine is not installed (no {kind.distribution} in this Python environment): install the "
            f"`{name}` extra: {kind.install}"
        )
    if kind.gpu and not gpu_present():
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f" (CUDA_VISIBLE_DEVICES={hidden} hides every GPU)" if hidden in ("", "-1") else ""
        return f"the {name} engine needs an NVIDIA GPU, and this process sees none{why}"
    return None


def resolve_engine_name(requested: str, settings: Settings) -> str:
    """`auto` is omni when vllm-omni, a GPU and a model (SPEECH_OMNI__MODEL) are all there, then sglang likewise
    (sglang-omni, SPEECH_SGLANG__MODEL), else embedded."""
    if requested != "auto":
        return requested
    for name, kind in ENGINES.items():
        if engine_available(name) and (not kind.gpu or getattr(settings, name).model):
            return name
    from app.settings import InvalidSettings  # here: stage processes import this package, and not the settings

    raise InvalidSettings(
        "SPEECH_ENGINE: no speech engine is installed: install the `embedded`, `omni` or `sglang` extra"
    )


def create_engine(settings: Settings) -> SpeechEngine:
    name = resolve_engine_name(settings.engine, settings)
    problem = unavailable_because(name)
    if problem is not None:
        from app.settings import InvalidSettings

        raise InvalidSettings(f"SPEECH_ENGINE (--engine): {problem}")
    if name == "embedded":
        from app.engines.embedded import EmbeddedEngine
        from app.speech.sentences import SentencePipeline

        embedded = EmbeddedEngine(settings.embedded, max_input_chars=settings.max_input_chars)
        return SentencePipeline(embedded, settings.sentence_max_chars)
    if name == "omni":
        return omni_as_served(omni_engine(settings), settings)
    if name == "sglang":
        return qwen3_as_served(sglang_engine(settings), settings, settings.sglang.sentence_pipeline)
    raise RuntimeError(f"unknown engine {name!r}")


def omni_engine(settings: Settings, omni_factory: Callable[..., Any] | None = None) -> OmniEngine:
    """The omni engine on its own settings, given the two of the service's that it needs."""
    from app.engines.omni import OmniEngine

    return OmniEngine(
        settings.omni,
        omni_factory,
        max_input_chars=settings.max_input_chars,
        max_concurrency=settings.max_concurrency,
        profiler_dir=settings.profiler_dir,
    )


def sglang_engine(settings: Settings, runtime_factory: Callable[..., Any] | None = None) -> SglangEngine:
    """The sglang engine on its own settings, given the two of the service's that it needs."""
    from app.engines.sglang import SglangEngine

    return SglangEngine(
        settings.sglang,
        runtime_factory,
        max_input_chars=settings.max_input_chars,
        max_concurrency=settings.max_concurrency,
        profiler_dir=settings.profiler_dir,
    )


def omni_as_served(omni: SpeechEngine, settings: Settings) -> SpeechEngine:
    """The omni engine as the service runs it (`qwen3_as_served`)."""
    return qwen3_as_served(omni, settings, settings.omni.sentence_pipeline)


def qwen3_as_served(engine: SpeechEngine, settings: Settings, sentence_pipeline: bool) -> SpeechEngine:
    """A Qwen3-TTS engine (omni, sglang) as the service runs it: its words timed by the forced aligner (Qwen3-TTS has
    no alignment of its own), behind the sentence pipeline where its settings ask for it (the aligner then times one
    sentence at a time)."""
    from app.audio.alignment import INSTALL_HINT, WhisperAligner
    from app.engines.aligned import ForcedAlignedEngine
    from app.speech.sentences import SentencePipeline

    aligner = WhisperAligner() if WhisperAligner.installed() else None
    aligned = ForcedAlignedEngine(engine, aligner, missing="" if aligner else INSTALL_HINT)
    return SentencePipeline(aligned, settings.sentence_max_chars) if sentence_pipeline else aligned
