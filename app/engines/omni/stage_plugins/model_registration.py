"""The service's vllm-omni plugin: registers its code2wav models (`code2wav_model.py`), each under its name in
`CODE2WAV_ARCHITECTURES`, and its talker (`talker_model.py`, `TALKER_ARCHITECTURES`) in both registries vllm-omni 0.30
reads a stage's architecture from: vLLM's own, against which each stage's vLLM `ModelConfig` checks it (in the
server's process, where AsyncOmni builds the stages' configs, and in the stage's), and vllm-omni's
`OmniModelRegistry`, from which the stage's model loader builds the class (`OmniModelConfig.registry`). vllm-omni
registers its own models in both the same way (`engine/arg_utils.py`, `register_omni_models_to_vllm`).

vllm-omni runs the `vllm_omni.general_plugins` entry points (pyproject.toml declares this one as `speech`) in every
process it starts, the stage processes among them, which are spawned and so see nothing the server's process
registered. A registration alone changes nothing: a stage runs the model only where the pipeline names it as its
`model_arch` (the service does with SPEECH_OMNI__CODE2WAV_MODEL and SPEECH_OMNI__TALKER_MODEL). Each class is
registered by its dotted name, imported only where a stage builds it (it needs torch and vllm-omni).

Being the one hook of the service's that runs first in every stage process, it also sets those processes' thread
switch interval where the service asks (SPEECH_OMNI__SWITCH_INTERVAL_MS)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from importlib.metadata import entry_points

PLUGIN_GROUP = "vllm_omni.general_plugins"
PLUGIN_NAME = "speech"  # pyproject.toml's entry point
PLUGIN_TARGET = f"{__name__}:register"
# seconds, set by the engine from SPEECH_OMNI__SWITCH_INTERVAL_MS before the stage processes start, which inherit it
SWITCH_INTERVAL_VARIABLE = "SPEECH_OMNI_SWITCH_INTERVAL_S"
CODE2WAV_MODULE = "app.engines.omni.stage_plugins.code2wav_model"
# SPEECH_OMNI__CODE2WAV_MODEL -> the architecture its model is registered as, which is also its class's name in
# CODE2WAV_MODULE; vllm-omni's Qwen3-TTS config treats any architecture whose name contains "Code2Wav" as the codec
# decoder's
CODE2WAV_ARCHITECTURES = {"service": "SpeechQwen3TTSCode2Wav", "service-folded": "SpeechFoldedQwen3TTSCode2Wav"}
TALKER_MODULE = "app.engines.omni.stage_plugins.talker_model"
# SPEECH_OMNI__TALKER_MODEL -> the architecture its model is registered as, its class's name in TALKER_MODULE
TALKER_ARCHITECTURES = {
    "service": "SpeechQwen3TTSTalker",
    "fused": "SpeechQwen3TTSTalkerFused",
    "compiled-once": "SpeechQwen3TTSTalkerCompiledOnce",
}


log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


def set_stage_switch_interval() -> None:
    """Python's thread switch interval from SWITCH_INTERVAL_VARIABLE, in a stage process only: one that
    multiprocessing started (vllm-omni spawns its stages; the server's process, where this plugin runs too, was
    not). A value that is not a number of seconds Python takes is said and left unset, not a failed stage."""
    value = os.environ.get(SWITCH_INTERVAL_VARIABLE)
    if not value or multiprocessing.parent_process() is None:
        return
    try:
        sys.setswitchinterval(float(value))
    except ValueError as error:
        log.warning("%s=%r left unset: %s", SWITCH_INTERVAL_VARIABLE, value, error)
        return
    log.info("thread switch interval %.6g s in this stage process", sys.getswitchinterval())


def register() -> None:
    set_stage_switch_interval()
    from vllm.model_executor.models import ModelRegistry
    from vllm_omni.model_executor.models.registry import OmniModelRegistry

    models = [(CODE2WAV_MODULE, name) for name in CODE2WAV_ARCHITECTURES.values()]
    models += [(TALKER_MODULE, name) for name in TALKER_ARCHITECTURES.values()]
    for registry in (ModelRegistry, OmniModelRegistry):  # again in one process: the same entry
        for module, architecture in models:
            registry.register_model(architecture, f"{module}:{architecture}")
    register_connectors()


def register_connectors() -> None:
    """The service's shared-memory connector that rings code2wav's window doorbell (`window_doorbell.py`), by the name
    a deploy profile gives it; built only where a profile names it. vllm-omni's factory refuses a name twice."""
    from vllm_omni.distributed.omni_connectors.factory import OmniConnectorFactory

    from app.engines.omni.stage_plugins import window_doorbell

    if window_doorbell.CONNECTOR_NAME not in OmniConnectorFactory.list_registered_connectors():
        OmniConnectorFactory.register_connector(window_doorbell.CONNECTOR_NAME, _doorbell_connector)


def _doorbell_connector(config: dict) -> object:
    from app.engines.omni.stage_plugins.window_doorbell_stage import create_connector

    return create_connector(config)


def unreachable_reason() -> str | None:
    """Why the stage processes would not find the service's models, with its remedy, or None. Without its entry
    point (the service run from a source tree it was not installed from) or with VLLM_PLUGINS naming other plugins
    only, vLLM fails deep in the stage's start on an architecture it does not know; this says why before anything
    starts. The caller names the settings that need it (each could be set to vllm-omni instead)."""
    ours = [e for e in entry_points(group=PLUGIN_GROUP) if e.name == PLUGIN_NAME and e.value == PLUGIN_TARGET]
    if not ours:
        return (
            f"the service's vllm-omni plugin is not installed (no {PLUGIN_GROUP} entry point {PLUGIN_NAME!r}): "
            "install the service (pip install '.[omni]'; the image does)"
        )
    allowed = os.environ.get("VLLM_PLUGINS")
    # as vLLM reads it (vllm/envs.py) and vllm-omni compares it (load_omni_plugins_by_group): names split on commas,
    # nothing stripped
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        return f"VLLM_PLUGINS={allowed!r} leaves out the service's plugin {PLUGIN_NAME!r}: add it"
    return None
