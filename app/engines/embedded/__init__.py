"""The embedded engine: hibari-tts on the CPU. `engine` synthesizes; `alignment` times each word from hibari's own
phoneme durations. hibari itself is imported only when the engine starts."""

from __future__ import annotations

from app.engines.embedded.engine import EmbeddedEngine

__all__ = ["EmbeddedEngine"]
