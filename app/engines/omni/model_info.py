"""vLLM's model info for every stage's model, inspected at once before AsyncOmni builds the stages' configs.

vLLM inspects a model class registered by name (`module:Class`, as vllm-omni registers its own and the service's
plugin registers its) in a fresh Python process that imports vLLM, vllm-omni and the model's module, so that CUDA is
not initialised where the class is only described (`vllm/model_executor/models/registry.py`,
`_LazyRegisteredModel.inspect_model_cls`), unless its model-info cache (`$VLLM_CACHE_ROOT/modelinfos/`, keyed by the
module's source) already holds it. AsyncOmni builds the stages' vLLM configs one after another, each inspecting its
stage's model, so a host without that cache paid one such process per stage: 17 and 18 s of a 288-s cold start on an
H200 (`benchmarks/gpu/2026-11-29-h200-omni-talker-ab/o1/logs/`, between the orchestrator's launch and each
"Resolved architecture"). Inspected together, the stages take one process's time, and AsyncOmni finds them known.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


def inspect_at_once(registry: Any, architectures: Sequence[str]) -> None:
    """Each of `architectures` that `registry` holds, inspected in a thread of its own, all at once, through vLLM's
    `_ModelRegistry._try_inspect_model_cls`, whose answer vLLM keeps in memory by architecture and registered model
    (a frozen dataclass of the module's and class's names, equal in every registry that holds them): a stage's config
    later inspects the same model through vLLM's `ModelRegistry`, where vllm-omni and the service's plugin register
    every stage model under the same names as in vllm-omni's `OmniModelRegistry`, and gets that answer, from memory
    even where the model-info cache could not be written. An inspection that fails is logged (vLLM logs why) and
    fails the start where AsyncOmni's own would have."""
    held = [arch for arch in dict.fromkeys(architectures) if arch in registry.models]
    if not held:
        return
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(held), thread_name_prefix="model-info") as pool:
        inspections = {arch: pool.submit(registry._try_inspect_model_cls, arch) for arch in held}
    failed = [arch for arch, future in inspections.items() if future.exception() or future.result() is None]
    if failed:
        log.warning("stage models not inspected ahead of the start", extra={"failed": failed})
    seconds = round(time.perf_counter() - started, 1)
    log.info("stage models inspected", extra={"architectures": held, "seconds": seconds})
