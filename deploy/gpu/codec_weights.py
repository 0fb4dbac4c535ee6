"""Random codec-decoder weights in the checkpoint's own format, so that code2wav starts as it does with real weights.

vLLM's `load_format=dummy` never calls a model's `load_weights`, and vllm-omni 0.26.0's code2wav does its set-up
there (`Qwen3TTSCode2Wav.load_weights`: the decoder in float32, its activation caches, the profile's `decode_*`
settings and the decoder's CUDA graphs). With random weights it therefore decodes eagerly, unlike production. This
writes `speech_tokenizer/model.safetensors` into a model directory made by `app.tools.qwen3_tts_model_dir`: every
tensor of the codec decoder, named as the checkpoint names them (`decoder.…`), filled as vLLM's dummy loader fills
weights (uniform in ±1e-3, seeded), and a one-tensor `model.safetensors` at the top, which code2wav's loader reads
and discards (its weights come from the subfolder only). Code2wav can then load with `load_format: auto` while the
talker keeps `dummy`.

    python3 deploy/gpu/codec_weights.py MODEL_DIR

Needs a host where vllm and vllm-omni 0.26.0 import (it builds the decoder from vllm-omni's own class).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CODEC_WEIGHTS = "speech_tokenizer/model.safetensors"
PLACEHOLDER = "model.safetensors"  # code2wav's loader drains the top-level weights unread; vLLM wants some there


def checkpoint_tensors(decoder_state: dict[str, Any]) -> dict[str, Any]:
    """The decoder's tensors under the names a checkpoint's speech tokenizer gives them, each a copy of its own
    (safetensors refuses tensors that share memory, as tied or viewed ones do)."""
    return {f"decoder.{name}": tensor.detach().clone().contiguous() for name, tensor in decoder_state.items()}


def random_decoder(model_dir: Path) -> Any:
    """The codec decoder of the model directory's speech tokenizer, built by vllm-omni's own class, its weights
    filled as vLLM's dummy loader fills them."""
    import torch
    from vllm.model_executor.model_loader.weight_utils import initialize_single_dummy_weight
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Decoder,
    )

    config = Qwen3TTSTokenizerV2Config.from_pretrained(str(model_dir), subfolder="speech_tokenizer")
    decoder = Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    with torch.no_grad():
        for tensor in decoder.state_dict().values():
            initialize_single_dummy_weight(tensor)  # the values the dummy loader would give
    return decoder


def write_codec_weights(model_dir: Path) -> list[Path]:
    import torch
    from safetensors.torch import save_file

    decoder = random_decoder(model_dir)
    codec = model_dir / CODEC_WEIGHTS
    save_file(checkpoint_tensors(decoder.state_dict()), str(codec), metadata={"format": "pt"})
    placeholder = model_dir / PLACEHOLDER
    if not placeholder.exists():
        save_file({"unused": torch.zeros(1)}, str(placeholder), metadata={"format": "pt"})
    return [codec, placeholder]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a directory written by app.tools.qwen3_tts_model_dir")
    args = parser.parse_args(argv)
    if not (args.model_dir / "speech_tokenizer" / "config.json").is_file():
        parser.error(f"{args.model_dir}: no speech_tokenizer/config.json (make it with app.tools.qwen3_tts_model_dir)")
    for path in write_codec_weights(args.model_dir):
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
