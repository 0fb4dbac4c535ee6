"""Synthesis jobs for the Qwen3-TTS engines' unit tests (omni and sglang over their stand-ins)."""

from __future__ import annotations

import numpy as np

from app.engine_protocol import ReferenceAudio, SynthesisJob


def job(**changes: object) -> SynthesisJob:
    """A CustomVoice job for the voice `vivian`, with `changes` on top."""
    fields: dict[str, object] = {"request_id": "r1", "text": "Hello there.", "voice": "vivian"}
    fields.update(changes)
    return SynthesisJob(**fields)  # type: ignore[arg-type]


def reference(seconds: float = 3.0, rate: int = 16_000) -> ReferenceAudio:
    """A constant reference clip of `seconds`."""
    return ReferenceAudio(np.full(int(seconds * rate), 0.1, np.float32), rate)
