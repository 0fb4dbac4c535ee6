"""Every stage's model class imported in the server's process and registered there as a class, before AsyncOmni
builds the stages' configs, so that vLLM describes each from the class itself instead of from a fresh process.

vLLM inspects a model class registered by name (`module:Class`, as vllm-omni registers its own and the service's
plugin registers its) in a fresh Python process that imports vLLM, vllm-omni and the model's module, so that CUDA is
not initialised where the class is only described (`vllm/model_executor/models/registry.py`,
`_LazyRegisteredModel.inspect_model_cls`), unless its model-info cache (`$VLLM_CACHE_ROOT/modelinfos/`, keyed by the
module's source) already holds that class. A host's first start paid one such process per stage: 17 and 18 s of a
288-s cold start on an H200 one after the other, and 22 s with both at once
(`benchmarks/gpu/2026-11-29-h200-omni-compiled-once/`). A class registered as a class (vLLM's public
`register_model(architecture, cls)`) is described from its attributes where it is registered: 0.1–0.2 s for both
stages on a CPU, where the server has already imported vLLM and vllm-omni. A stage's config inspects its model twice,
through both registries, so the class is registered in both: vllm-omni's `OmniEngineArgs.create_model_config` first
builds vLLM's own `ModelConfig`, which inspects through vLLM's `ModelRegistry` (where vllm-omni and the service's
plugin register the stage models by name too), then vllm-omni's `OmniModelConfig`, which inspects through
`OmniModelRegistry`. Registered in vllm-omni's alone, the start still paid one such process per stage, 13 and 16 s
one after the other (py-spy over a start on an H200: `vllm.model_executor.models.registry` processes under
`ModelConfig.__post_init__`, benchmarks/gpu/2026-11-29-h200x2-sglang-profile-omni-c1/). vllm-omni registers its own
models by name again in vLLM's registry for each stage's config, so for each class the description is also written
to vLLM's model-info cache, where vLLM then finds it (`remember`).

The subprocess guards against a model module that initialises CUDA on import. On a GPU host the server's process has
CUDA initialised before this runs all the same: importing vllm-omni 0.30 asks the device's capability
(`vllm_omni/patch.py` → `quantization/quack_fp8.py`, for its fp8 patch). `tests/gpu/test_model_info.py` checks on a GPU
that the stages' imports here make no call into CUDA's initialisation (they add nothing to what vllm-omni's import
did), the stage processes are spawned, not forked (vllm-omni sets the start method), and an import that initialised
CUDA where it was not yet is logged. A class that cannot be imported here is left as vLLM registered it, for
vLLM to inspect (and fail on) as before.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register_in_process(
    registries: Sequence[Any], architectures: Sequence[str], cuda_initialized: Callable[[], bool] = lambda: False
) -> list[str]:
    """Each of `architectures` that one of `registries` (vLLM's `_ModelRegistry` kind) holds by name, its class
    loaded here and registered again as that class in each registry that holds it by that name (registries that name
    another module or class for it each get theirs), and its description written to vLLM's model-info cache; returns
    those registered. `cuda_initialized` says whether this process has initialised CUDA (`torch.cuda.is_initialized`),
    which an import here must not have done."""
    started, cuda_before = time.perf_counter(), cuda_initialized()
    registered, failed = [], []
    for arch in dict.fromkeys(architectures):
        # by the module and class each registry names for it; not held, or held as a class already: nothing to do
        by_name: dict[tuple[str, str], list[Any]] = {}
        for registry in registries:
            model = registry.models.get(arch)
            if hasattr(model, "module_name"):
                by_name.setdefault((model.module_name, model.class_name), []).append(registry)
        if not by_name:
            continue
        named: list[tuple[Any, Any]] = []  # each name's model as registered by name, and its registries' class entry
        try:
            for holders in by_name.values():
                model = holders[0].models[arch]
                model_cls = model.load_model_cls()
                for registry in holders:
                    registry.register_model(arch, model_cls)
                named.append((model, holders[0].models[arch]))
        except Exception:
            log.warning("stage model left to vLLM's inspection", exc_info=True, extra={"architecture": arch})
            failed.append(arch)
            continue
        registered.append(arch)
        try:
            for model, as_class in named:
                remember(model, as_class.inspect_model_cls())
        except Exception:  # the cache is vLLM's to fill, as before: a start only takes longer
            log.warning("stage model's description not cached", exc_info=True, extra={"architecture": arch})
    if not cuda_before and cuda_initialized():
        log.warning(
            "importing the stages' models initialised CUDA in the server's process",
            extra={"architectures": registered},
        )
    seconds = round(time.perf_counter() - started, 1)
    if registered or failed:
        log.info("stage models inspected", extra={"architectures": registered, "left": failed, "seconds": seconds})
    return registered


def remember(model: Any, info: Any) -> None:
    """vLLM's model-info cache entry for `model` (a class registered by name: `_LazyRegisteredModel`) written from
    `info` (its `_ModelInfo`, described here), where the cache lacks it: as vLLM writes it after describing the class in
    a fresh process, in vLLM's own file (`$VLLM_CACHE_ROOT/modelinfos/`, keyed by the module's source). vllm-omni
    registers its own models by name again in vLLM's registry as it builds each stage's config, after they were
    registered here as classes: with the entry written, vLLM reads it instead of starting that process (about 15 s
    for the talker as shipped on a host's first start)."""
    spec = importlib.util.find_spec(model.module_name)
    if spec is None or not spec.origin:
        return
    module_hash = model._get_modelinfo_module_hash(Path(spec.origin))
    if model._load_modelinfo_from_cache(module_hash) is None:
        model._save_modelinfo_to_cache(info, module_hash)
