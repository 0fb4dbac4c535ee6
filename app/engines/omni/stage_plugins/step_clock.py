"""The host's time in each section of a talker step (talker_worker.py), by the host's clock: wrapped methods of the
objects vLLM's Model Runner V2 and vllm-omni keep for a step. Plain Python (nothing of vLLM imported), so that its
names are checked against the wheels without importing them."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# (name, the object's path from the model runner, its method), as vLLM 0.30's Model Runner V2 and vllm-omni 0.30 name
# them. `preprocess` holds `prompt` (a prefill's embeddings) and `predictor_graph` (the code predictor's CUDA graph
# launched for the frames of the step's decode rows); a graph's time is its launch, not its run on the GPU.
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("add_requests", "", "add_requests"),
    ("prepare_inputs", "", "prepare_inputs"),
    ("preprocess", "model_state", "run_preprocess"),
    ("prompt", "model._prompt_builder", "build_prompt_embeds"),
    ("predictor_graph", "model_state", "_call_mtp_runner"),
    ("talker_graph", "cudagraph_manager", "run_fullgraph"),
    ("postprocess", "model_state", "run_postprocess"),
)


def resolve(root: Any, path: str) -> Any:
    """`root`'s attribute at the dotted `path` ("" is `root`), or None where a name is missing."""
    for name in filter(None, path.split(".")):
        root = getattr(root, name, None)
        if root is None:
            return None
    return root


class StepClock:
    """The host's time in each of a step's sections, by wrapping each section's method on its object (the object's
    own attribute, so its class and every other object of it are untouched)."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, int] = defaultdict(int)  # name -> ns since `take`

    def install(self, runner: Any, sections: tuple[tuple[str, str, str], ...] = SECTIONS) -> list[str]:
        """Times every section found from `runner`; returns the names of those not found."""
        missing = []
        for name, path, method in sections:
            owner = resolve(runner, path)
            call = getattr(owner, method, None) if owner is not None else None
            if call is None:
                missing.append(name)
                continue
            try:
                setattr(owner, method, self._timed(name, call))
            except (AttributeError, TypeError):  # an object that takes no attribute: timing is a diagnosis only
                missing.append(name)
        return missing

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter_ns() - started

        return timed

    def take(self) -> dict[str, int]:
        """The time spent in each section since the last take, in µs, and start again."""
        spent = {name: ns // 1000 for name, ns in self.spent.items()}
        self.spent.clear()
        return spent
