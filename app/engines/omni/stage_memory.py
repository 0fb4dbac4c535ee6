"""The talker's KV cache budget when both stages start at once on one GPU.

vllm-omni 0.30 sizes a stage's KV cache from the GPU's memory as its process sees it: the memory in use when its
worker started is the baseline, and whatever grew on the device by its measurement counts as its own. With
`parallel_stage_init` its locks keep other stages from allocating *during* the measurement, but not between the
baseline and it — and code2wav loads its weights and captures its decoder graphs in exactly that time (about 14 s
on an H200), so the talker measured 0 GiB for its cache and refused to start, where the serial start measured
17.4 GiB (benchmarks/gpu/2026-11-30-h200x2-pair-fused-prefetch/). Given `kv_cache_memory_bytes`, vllm-omni's worker
takes that budget and measures nothing; for a parallel start on a shared GPU the service gives the talker its share
of the GPU less its weights and an allowance for its activations — the serial measurement's terms, with what code2wav
holds left out.

Where the budget is not given (each stage on its own GPU, no share in the profile, a MIG slice), vllm-omni measures.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 1 << 30
# The talker's peak activations while vLLM profiles it, with what its process holds outside PyTorch: 0.31 GiB
# measured on the 0.6B (requested 19.57 GiB - weights 1.84 - KV 17.42); a margin above that for larger models and
# for the driver's total (NVML's, below) being a little above the CUDA runtime's, from which vLLM takes the share.
ACTIVATION_ALLOWANCE_BYTES = GIB


def checkpoint_bytes(model_dir: str | Path) -> int:
    """The talker's weights as stored: the safetensors files at the top of the model directory (code2wav's live in
    `speech_tokenizer/`). A directory without them counts 0: with random weights (load_format dummy, benchmarks
    only) the talker's budget then exceeds its share by its weights, which vllm-omni's admission margins absorb."""
    return sum(path.stat().st_size for path in Path(model_dir).glob("*.safetensors"))


def talker_kv_cache_bytes(total_bytes: int, utilization: float, weights_bytes: int) -> int:
    """The talker's share of the GPU (`gpu_memory_utilization` of its total) less its weights and the activation
    allowance."""
    budget = math.ceil(total_bytes * utilization) - weights_bytes - ACTIVATION_ALLOWANCE_BYTES
    if budget <= 0:
        raise ValueError(
            f"the talker's gpu_memory_utilization {utilization} of {total_bytes / GIB:.1f} GiB leaves no room for its "
            f"KV cache beside its weights ({weights_bytes / GIB:.2f} GiB) and activations "
            f"({ACTIVATION_ALLOWANCE_BYTES / GIB:.0f} GiB): raise it in the deploy profile"
        )
    return budget


def gpu_total_memory(device: int) -> int | None:
    """The total memory of the stage's GPU (`device` as the stage names it, within CUDA_VISIBLE_DEVICES), read
    through vLLM's platform (NVML, without creating a CUDA context in the server's process); None for a MIG slice,
    whose share NVML's device index does not tell."""
    if any(entry.strip().startswith("MIG-") for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")):
        return None
    from vllm.platforms import current_platform
    from vllm.utils.import_utils import import_pynvml

    physical = current_platform.device_id_to_physical_device_id(device)
    try:
        pynvml = import_pynvml()
        pynvml.nvmlInit()
        try:
            current, _ = pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(physical))
            if current == pynvml.NVML_DEVICE_MIG_ENABLE:
                return None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no MIG support (not an A100/H100-class GPU), or NVML without it: not a MIG slice
        pass
    return int(current_platform.get_device_total_memory(device))


def _device(stage: dict[str, Any]) -> int:
    return int(str(stage.get("devices", "0")).split(",")[0])


def parallel_start_budget(talker: dict[str, Any], code2wav: dict[str, Any], model_dir: str | Path) -> int | None:
    """The `kv_cache_memory_bytes` to give the talker for a parallel start, from both stages' settings (the deploy
    profile's with the overrides on top); None where vllm-omni's own measurement stands: a budget the settings give
    themselves, each stage on its own GPU (nothing loads beside the talker), no share of the GPU in the profile for
    the talker, or a MIG slice."""
    if talker.get("kv_cache_memory_bytes") is not None:
        return None
    device = _device(talker)
    if device != _device(code2wav):
        return None
    if talker.get("gpu_memory_utilization") is None:
        log.warning(
            "parallel stage start without the talker's gpu_memory_utilization in the deploy profile: vllm-omni "
            "measures its KV cache while code2wav loads beside it, and may count code2wav's memory as the talker's"
        )
        return None
    utilization = float(talker["gpu_memory_utilization"])
    total = gpu_total_memory(device)
    if total is None:
        log.warning("parallel stage start on a MIG slice: the talker's KV cache is left to vllm-omni's measurement")
        return None
    weights = checkpoint_bytes(model_dir)
    budget = talker_kv_cache_bytes(total, utilization, weights)
    log.info(
        "the talker's KV cache sized by the service for a parallel start",
        extra={
            "kv_cache_gib": round(budget / GIB, 2),
            "gpu_gib": round(total / GIB, 1),
            "gpu_memory_utilization": utilization,
            "weights_gib": round(weights / GIB, 2),
        },
    )
    return budget
