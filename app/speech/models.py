"""The model names a request may give: those the server lists, and the ids of the checkpoint it serves."""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from app.engine_protocol import SpeechEngine
from app.settings import Settings


def served_models(engine: SpeechEngine, settings: Settings) -> list[str]:
    return [engine.model_id, *(alias for alias in settings.model_aliases if alias != engine.model_id)]


# A Hugging Face cache snapshot: .../models--Org--Name/snapshots/<revision>
_HF_CACHE_DIR = re.compile(r"models--(?P<org>[^/\\]+?)--(?P<name>[^/\\]+)$")


_VARIANTS = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}


def _hub_id_from_config(model_dir: str) -> str | None:
    """Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice from a Qwen3-TTS config.json (tokenizer_type, tts_model_size,
    tts_model_type): the name Qwen publishes each checkpoint under."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    rate = re.fullmatch(r"qwen3_tts_tokenizer_(\d+)hz", str(config.get("tokenizer_type", "")))
    size = re.fullmatch(r"(\d+)b(\d+)", str(config.get("tts_model_size", "")))
    variant = _VARIANTS.get(str(config.get("tts_model_type", "")))
    if rate is None or size is None or variant is None:
        return None
    return f"Qwen/Qwen3-TTS-{rate[1]}Hz-{size[1]}.{size[2]}B-{variant}"


@functools.cache
def checkpoint_ids(model: str | None) -> tuple[str, ...]:
    """The ids a client of `vllm serve <checkpoint>` names the model by, which this server also answers to: the model
    as it was given (a path, as `vllm serve` accepts it), and the Hugging Face id of the checkpoint the directory
    holds: the repository of a cache snapshot (models--Qwen--Qwen3-TTS-12Hz-1.7B-CustomVoice/snapshots/<rev>), a
    directory named as the checkpoint is (Qwen3-TTS-12Hz-1.7B-CustomVoice), else what its config.json says it is."""
    if not model:
        return ()
    ids = [model]
    parts = os.path.normpath(model).replace("\\", "/").split("/")
    for index, part in enumerate(parts):
        if (match := _HF_CACHE_DIR.fullmatch(part)) and parts[index + 1 : index + 2] == ["snapshots"]:
            ids.append(f"{match['org']}/{match['name']}")
            break
    else:
        if parts[-1].startswith("Qwen3-TTS-"):
            ids.append(f"Qwen/{parts[-1]}")
        elif (hub_id := _hub_id_from_config(model)) is not None:
            ids.append(hub_id)
    return tuple(dict.fromkeys(ids))


def accepted_models(engine: SpeechEngine, settings: Settings) -> list[str]:
    """Every `model` a request may name: the served ids (`served_models`), then, on an engine whose settings name a
    model directory (omni, sglang), its checkpoint's ids (`checkpoint_ids`): accepted, not listed (`vllm serve
    --served-model-name` would not list them either)."""
    served = served_models(engine, settings)
    model_dir = getattr(getattr(settings, engine.name, None), "model", None)
    extra = checkpoint_ids(model_dir) if isinstance(model_dir, str) else ()
    return [*served, *(model for model in extra if model not in served)]
