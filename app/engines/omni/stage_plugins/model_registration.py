"""The service's vllm-omni plugin: registers its code2wav model (`code2wav_model.SpeechQwen3TTSCode2Wav`) in
vllm-omni's model registry under `CODE2WAV_ARCHITECTURE`. vllm-omni 0.30 runs the `vllm_omni.general_plugins` entry
points (pyproject.toml declares this one as `speech`) in every process it starts, the stage processes among them, which
are spawned and so see nothing the server's process registered. A registration alone changes nothing: a stage runs
the model only where the pipeline names it as its `model_arch` (the service does with SPEECH_OMNI__CODE2WAV_MODEL).

The class is registered by its dotted name, imported only where a stage builds it (it needs torch and vllm-omni)."""

from __future__ import annotations

# vllm-omni's Qwen3-TTS config treats any architecture whose name contains "Code2Wav" as the codec decoder's
CODE2WAV_ARCHITECTURE = "SpeechQwen3TTSCode2Wav"
CODE2WAV_CLASS = "app.engines.omni.stage_plugins.code2wav_model:SpeechQwen3TTSCode2Wav"


def register() -> None:
    from vllm_omni.model_executor.models.registry import OmniModelRegistry

    OmniModelRegistry.register_model(CODE2WAV_ARCHITECTURE, CODE2WAV_CLASS)  # again in one process: the same entry
