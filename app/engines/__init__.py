"""Speech engines behind one protocol (`app.engine_protocol`). Engine libraries are imported only by their engine."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # vllm-omni's stage processes import the stage plugins through this package: it stays light
    from app.engine_protocol import SpeechEngine
    from app.engines.omni import OmniEngine
    from app.settings import Settings

# Engines this build provides, by name. `auto` picks the first whose requirements are met.
_AUTO_ORDER = ("omni", "embedded")


def gpu_present() -> bool:
    """An NVIDIA GPU visible to this process, judged without importing a CUDA library."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return (
        os.path.exists("/dev/nvidia0")
        or os.path.isdir("/proc/driver/nvidia/gpus")
        or shutil.which("nvidia-smi") is not None
    )


def engine_available(name: str) -> bool:
    if name == "embedded":
        return importlib.util.find_spec("hibari") is not None
    if name == "omni":
        return importlib.util.find_spec("vllm_omni") is not None and gpu_present()
    return False


def resolve_engine_name(requested: str, settings: Settings) -> str:
    """`auto` is omni when vllm-omni, a GPU and a model (SPEECH_OMNI__MODEL) are all there, else embedded."""
    if requested != "auto":
        return requested
    for name in _AUTO_ORDER:
        if engine_available(name) and (name != "omni" or settings.omni.model):
            return name
    raise RuntimeError("no speech engine is installed: install the `embedded` extra or the `omni` extra")


def create_engine(settings: Settings) -> SpeechEngine:
    name = resolve_engine_name(settings.engine, settings)
    if not engine_available(name):
        raise RuntimeError(f"the {name!r} engine is not available here (missing package or GPU)")
    if name == "embedded":
        from app.engines.embedded import EmbeddedEngine
        from app.speech.sentences import SentencePipeline

        embedded = EmbeddedEngine(settings.embedded, max_input_chars=settings.max_input_chars)
        return SentencePipeline(embedded, settings.sentence_max_chars)
    if name == "omni":
        return omni_as_served(omni_engine(settings), settings)
    raise RuntimeError(f"unknown engine {name!r}")


def omni_engine(settings: Settings, omni_factory: Callable[..., Any] | None = None) -> OmniEngine:
    """The omni engine on its own settings, given the two of the service's that it needs."""
    from app.engines.omni import OmniEngine

    return OmniEngine(
        settings.omni,
        omni_factory,
        max_input_chars=settings.max_input_chars,
        max_concurrency=settings.max_concurrency,
    )


def omni_as_served(omni: SpeechEngine, settings: Settings) -> SpeechEngine:
    """The omni engine as the service runs it: its words timed by the forced aligner (Qwen3-TTS has no alignment of
    its own), behind the sentence pipeline where SPEECH_OMNI__SENTENCE_PIPELINE asks for it (the aligner then times
    one sentence at a time)."""
    from app.audio.alignment import INSTALL_HINT, WhisperAligner
    from app.engines.aligned import ForcedAlignedEngine
    from app.speech.sentences import SentencePipeline

    aligner = WhisperAligner() if WhisperAligner.installed() else None
    aligned = ForcedAlignedEngine(omni, aligner, missing="" if aligner else INSTALL_HINT)
    return SentencePipeline(aligned, settings.sentence_max_chars) if settings.omni.sentence_pipeline else aligned
