"""The sglang engine: Qwen3-TTS on sglang-omni 0.1.8, on a GPU, inside the server's process.

`engine` starts sglang-omni's pipeline through its own runner and client and streams their audio; `requests` turns a
job into sglang-omni's request; `stage_plugins` holds what runs inside the processes sglang-omni spawns as they start
(Python's switch interval, and the fixed-length switch for benchmarks on random weights).

`SglangEngine` is imported on first use (PEP 562): nothing here imports sglang-omni or torch at load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engines.sglang.engine import SglangEngine

__all__ = ["SglangEngine"]


def __getattr__(name: str) -> Any:
    if name == "SglangEngine":
        from app.engines.sglang.engine import SglangEngine

        return SglangEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
