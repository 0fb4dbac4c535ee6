"""The omni engine: Qwen3-TTS on vllm-omni, on a GPU.

`engine` runs vllm-omni's `AsyncOmni` and streams its audio; `requests` builds each engine request the way vllm-omni's
own speech server does; `codec_windows` reads a deploy profile's window sizes; `cuda_mps` runs the MPS daemon the
stage processes may share the GPU through; `stage_plugins` holds what vllm-omni loads by dotted path inside its own
stage processes.

`OmniEngine` is imported on first use (PEP 562), not with the package: vllm-omni's stage processes import
`stage_plugins` through this package, and they need none of the engine (nor the service's settings) that it imports.
Nothing here imports vllm, vllm-omni or torch at load: the engine does when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engines.omni.engine import OmniEngine

__all__ = ["OmniEngine"]


def __getattr__(name: str) -> Any:
    if name == "OmniEngine":
        from app.engines.omni.engine import OmniEngine

        return OmniEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
