"""Random weights for sglang-omni's prompt frontend in the checkpoint's own format, so that its preprocessing stage can
run in a process of its own on a model directory whose talker has no weights (`load_format=dummy`).

In the engine's process, sglang-omni 0.1.8 builds a request's prompt with the talker's own embeddings and text
projection, which the dummy loader fills. Given a process of its own (`preprocessing.process`), the stage loads a
copy of them from the checkpoint (`Qwen3TTSPromptFrontend.load_weights`, every parameter or it refuses to start).
This writes them into `prompt-frontend.safetensors` in a model directory made by `app.tools.qwen3_tts_model_dir`
(sglang-omni reads every `*.safetensors` there, by name): each tensor the frontend loads, under the name a checkpoint
gives it (`talker.…`, `speaker_encoder.…`), uniform in ±1e-3 as sglang's dummy loader fills the talker's, so the
prompt is built from the same kind of numbers in either layout.

    python3 deploy/gpu/frontend_weights.py MODEL_DIR

Needs a host where sglang-omni 0.1.8 imports (it builds the frontend from sglang-omni's own class).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

FRONTEND_WEIGHTS = "prompt-frontend.safetensors"
DUMMY_RANGE = 1e-3  # sglang's dummy loader: uniform in [-1e-3, 1e-3]


def checkpoint_tensors(parameters: dict[str, Any], talker_prefix: str, speaker_prefix: str) -> dict[str, Any]:
    """The frontend's parameters under the names a checkpoint gives them (the speaker encoder's as they are, the rest
    under the talker's prefix, as `Qwen3TTSPromptFrontend.checkpoint_weight_names` names them), each a copy of its own
    (safetensors refuses tensors that share memory)."""
    return {
        (name if name.startswith(speaker_prefix) else talker_prefix + name): tensor.detach().clone().contiguous()
        for name, tensor in parameters.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    args = parser.parse_args(argv)
    if not (args.model_dir / "config.json").is_file():
        sys.exit(f"frontend_weights: no config.json in {args.model_dir}")
    if (args.model_dir / "model.safetensors.index.json").exists():  # sglang-omni then reads only the shards it names
        sys.exit(f"frontend_weights: {args.model_dir} has a safetensors index, which would leave this file unread")
    out = args.model_dir / FRONTEND_WEIGHTS
    if out.exists():
        print(f"frontend_weights: {out} is there already")
        return
    import torch
    from safetensors.torch import save_file
    from sglang_omni.models.qwen3_tts import prompt_frontend
    from sglang_omni.models.qwen3_tts.stages import register_qwen3_tts_hf_config
    from transformers import AutoConfig

    register_qwen3_tts_hf_config()
    frontend = prompt_frontend.Qwen3TTSPromptFrontend(
        AutoConfig.from_pretrained(args.model_dir), device="cpu", dtype=torch.bfloat16
    )
    with torch.no_grad():
        for parameter in frontend.parameters():
            parameter.uniform_(-DUMMY_RANGE, DUMMY_RANGE)
    tensors = checkpoint_tensors(
        dict(frontend.named_parameters()), prompt_frontend._TALKER_PREFIX, prompt_frontend._SPEAKER_ENCODER_PREFIX
    )
    if set(tensors) != frontend.checkpoint_weight_names():  # named as the frontend will look them up, or refuse
        sys.exit("frontend_weights: the names differ from the frontend's own checkpoint_weight_names()")
    partial = out.with_suffix(".partial")
    save_file(tensors, str(partial))
    partial.rename(out)
    size = sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    print(f"frontend_weights: {len(tensors)} tensors, {size / 2**20:.0f} MiB -> {out}")


if __name__ == "__main__":
    main()
