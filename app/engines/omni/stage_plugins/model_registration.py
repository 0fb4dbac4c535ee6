"""The service's vllm-omni plugin: registers its code2wav models (`code2wav_model.py`), each under its name in
`CODE2WAV_ARCHITECTURES`, in both registries vllm-omni 0.30 reads a stage's architecture from: vLLM's own, against
which each stage's vLLM `ModelConfig` checks it (in the server's process, where AsyncOmni builds the stages' configs,
and in the stage's), and vllm-omni's `OmniModelRegistry`, from which the stage's model loader builds the class
(`OmniModelConfig.registry`). vllm-omni registers its own models in both the same way
(`engine/arg_utils.py`, `register_omni_models_to_vllm`).

vllm-omni runs the `vllm_omni.general_plugins` entry points (pyproject.toml declares this one as `speech`) in every
process it starts, the stage processes among them, which are spawned and so see nothing the server's process
registered. A registration alone changes nothing: a stage runs the model only where the pipeline names it as its
`model_arch` (the service does with SPEECH_OMNI__CODE2WAV_MODEL). The class is registered by its dotted name,
imported only where a stage builds it (it needs torch and vllm-omni)."""

from __future__ import annotations

CODE2WAV_MODULE = "app.engines.omni.stage_plugins.code2wav_model"
# SPEECH_OMNI__CODE2WAV_MODEL -> the architecture its model is registered as, which is also its class's name in
# CODE2WAV_MODULE; vllm-omni's Qwen3-TTS config treats any architecture whose name contains "Code2Wav" as the codec
# decoder's
CODE2WAV_ARCHITECTURES = {"service": "SpeechQwen3TTSCode2Wav", "service-folded": "SpeechFoldedQwen3TTSCode2Wav"}


def register() -> None:
    from vllm.model_executor.models import ModelRegistry
    from vllm_omni.model_executor.models.registry import OmniModelRegistry

    for registry in (ModelRegistry, OmniModelRegistry):  # again in one process: the same entry
        for architecture in CODE2WAV_ARCHITECTURES.values():
            registry.register_model(architecture, f"{CODE2WAV_MODULE}:{architecture}")
