"""Which of vllm-omni 0.30's codec-decoder CUDA graphs a checkpoint can replay. Its code2wav captures graphs for two
kinds of stream (`Qwen3TTSCode2Wav.decoder_cudagraph_modes`, `("icl", "xvec")`): `icl`, a stream whose first window
is decoded after reference codes (a Base checkpoint cloning with `ref_audio` and `ref_text`), and `xvec`, a stream
with none before it (every CustomVoice and VoiceDesign stream, and a Base stream cloning from its speaker embedding
alone). The decoder picks a stream's kind by its prefix frames (`batched_request_decode`: none is `xvec`). So a
checkpoint that never gets reference codes replays only `xvec` graphs, and capturing the `icl` ones (a prefix graph
and a suffix graph per window size for each batch size: half of them, 64 of 128 with the shipped profile) costs its
start about 6 s on an H200 for graphs no stream uses; a stream of the other kind, should one come, decodes eagerly.
Imports neither torch nor vllm-omni, so that it can be tested without them."""

from __future__ import annotations

import json
import os

EVERY_MODE = ("icl", "xvec")
# tts_model_type of the checkpoints whose streams never start after reference codes
WITHOUT_REFERENCE_CODES = {"custom_voice", "voice_design"}


def decoder_graph_modes(model_path: str) -> tuple[str, ...]:
    """The kinds of stream to capture decoder graphs for, from the checkpoint's config.json (`tts_model_type`); both
    where it cannot be read or names another type."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as config_file:
            config = json.load(config_file)
    except (OSError, ValueError):
        return EVERY_MODE
    kind = config.get("tts_model_type") if isinstance(config, dict) else None
    return ("xvec",) if isinstance(kind, str) and kind in WITHOUT_REFERENCE_CODES else EVERY_MODE
