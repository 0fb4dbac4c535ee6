"""app/engines/omni/model_info.py on a GPU host: every model a stage can run (vllm-omni's and the service's, each
SPEECH_OMNI__TALKER_MODEL and SPEECH_OMNI__CODE2WAV_MODEL) imported in a fresh process as the server's process imports
them, registered there as its class, makes no call into CUDA's initialisation (vLLM inspects in a fresh process to keep
a model's import from initialising CUDA) and is described by vLLM from the class, as a stage's config will ask
vllm-omni's registry; the shipped stages' descriptions are those vLLM's own inspection in a fresh process gives.

CUDA is initialised in that process before the registration all the same, by vllm-omni's own import (its fp8 patch asks
the device's capability): whether it is says little about the registration, so the test counts the registration's
calls into `torch.cuda._lazy_init` (the device queries of `torch.cuda`, capability and current device among them, call
it whether or not CUDA is initialised) and the most GPU memory it held at once (a tensor put on the GPU once CUDA is
initialised no longer calls it), and checks that it did not initialise CUDA where vllm-omni's import had not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.gpu.support import torch_with_vllm_omni_030

ROOT = Path(__file__).resolve().parents[2]

# a fresh process, as a server's: vllm-omni's plugins loaded, then what the engine's factory registers
SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, sys
    from concurrent.futures import ThreadPoolExecutor
    import torch

    lazy_init, calls = torch.cuda._lazy_init, []
    def counted_lazy_init():  # what the registration asks of CUDA, whether or not it is initialised already
        calls.append(1)
        return lazy_init()
    from vllm.model_executor.models import ModelRegistry
    from vllm_omni.model_executor.models.registry import OmniModelRegistry
    from vllm_omni.engine.arg_utils import register_omni_models_to_vllm
    from vllm_omni.plugins import load_omni_general_plugins
    from app.engines.omni import model_info
    from app.engines.omni.stage_plugins import model_registration

    model_registration.register()
    load_omni_general_plugins()
    SHIPPED = ["Qwen3TTSTalkerForConditionalGeneration", "SpeechFoldedQwen3TTSCode2Wav"]  # the defaults
    architectures = [
        "Qwen3TTSTalkerForConditionalGeneration", "Qwen3TTSCode2Wav",
        *model_registration.TALKER_ARCHITECTURES.values(), *model_registration.CODE2WAV_ARCHITECTURES.values(),
    ]
    lazy = {arch: OmniModelRegistry.models[arch] for arch in architectures}
    cuda_at_import = torch.cuda.is_initialized()
    if cuda_at_import:
        torch.cuda.reset_peak_memory_stats()
        allocated = torch.cuda.memory_allocated()
    torch.cuda._lazy_init = counted_lazy_init
    try:
        registered = model_info.register_in_process(
            (ModelRegistry, OmniModelRegistry), architectures, torch.cuda.is_initialized
        )
    finally:
        torch.cuda._lazy_init = lazy_init
    cuda_calls = len(calls)
    # the most the registration held on the GPU at once, a tensor it made and dropped included
    peak = torch.cuda.max_memory_allocated() - allocated if cuda_at_import else 0
    cuda_now = torch.cuda.is_initialized()
    load_omni_general_plugins()  # again, as AsyncOmni and each stage's engine arguments run them: nothing re-registered
    register_omni_models_to_vllm()  # as each stage's engine arguments do, in vLLM's own registry
    described = {arch: OmniModelRegistry._try_inspect_model_cls(arch) for arch in architectures}
    # vLLM's own inspection of each, in fresh processes (not from the cache the registration wrote)
    from vllm.model_executor.models import registry as vllm_registry
    fresh = vllm_registry._run_in_subprocess
    def described_in_a_fresh_process(arch):
        return fresh(lambda: vllm_registry._ModelInfo.from_model_cls(lazy[arch].load_model_cls()))
    with ThreadPoolExecutor(len(SHIPPED)) as pool:
        theirs = dict(zip(SHIPPED, pool.map(described_in_a_fresh_process, SHIPPED)))
    # vLLM's registry after vllm-omni registered its own models there again by name (the shipped talker is one):
    # described from the cache the registration wrote, no fresh process
    started = []
    vllm_registry._run_in_subprocess = lambda fn: started.append(1) or fn()
    from_vllm = {arch: vllm_registry._try_inspect_model_cls(arch, ModelRegistry.models[arch]) for arch in SHIPPED}
    vllm_registry._run_in_subprocess = fresh
    print(json.dumps({
        "registered": registered, "cuda_calls": cuda_calls, "cuda_bytes": peak, "cuda_at_import": cuda_at_import,
        "cuda_initialised_here": cuda_now and not cuda_at_import,
        "described": {arch: info.architecture for arch, info in described.items()},
        "kinds": sorted({type(OmniModelRegistry.models[a]).__name__ for a in architectures}),
        # the service's own, in vLLM's registry after vllm-omni registered its own there again by name
        "ours_in_vllm": sorted({type(ModelRegistry.models[a]).__name__ for a in architectures if "Speech" in a}),
        "as_vllm_inspects": [dataclasses.asdict(described[a]) == dataclasses.asdict(theirs[a]) for a in SHIPPED],
        "vllm_fresh_processes": len(started),
        "vllm_as_inspected": [dataclasses.asdict(from_vllm[a]) == dataclasses.asdict(theirs[a]) for a in SHIPPED],
    }))
    """
)


def test_every_stage_model_is_described_in_this_process_without_a_call_to_cuda(tmp_path: Path) -> None:
    torch_with_vllm_omni_030("model registry")
    # an empty model-info cache: vLLM's inspection runs its fresh process (a cached answer has been through JSON)
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["cuda_calls"] == 0, f"the registration asked CUDA {answer['cuda_calls']} times"
    assert answer["cuda_bytes"] == 0
    assert answer["cuda_initialised_here"] is False
    assert answer["kinds"] == ["_RegisteredModel"]
    assert answer["ours_in_vllm"] == ["_RegisteredModel"]
    assert answer["vllm_fresh_processes"] == 0  # vllm-omni's talker, held by name again: from the cache written
    assert answer["vllm_as_inspected"] == [True, True]
    assert sorted(answer["registered"]) == sorted(answer["described"])
    assert all(arch == described for arch, described in answer["described"].items())
    assert answer["as_vllm_inspects"] == [True, True]  # the shipped stages' descriptions: what vLLM's process gives
