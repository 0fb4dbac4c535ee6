"""Random codec-decoder weights in the checkpoint's own format, so that code2wav starts as it does with real weights.

vLLM's `load_format=dummy` never calls a model's `load_weights`, and vllm-omni's code2wav does its set-up there
(0.30.0: `Qwen3TTSCode2Wav.load_weights` moves the decoder to the stage's dtype, precomputes its SnakeBeta caches,
reads the profile's `decode_*` and chunk settings and captures the decoder's CUDA graphs). With random weights it
therefore decodes eagerly, unlike production. This writes `speech_tokenizer/model.safetensors` into a model
directory made by `app.tools.qwen3_tts_model_dir`: every tensor of the codec decoder, named as the checkpoint names
them (`decoder.…`), and a one-tensor `model.safetensors` at the top, which code2wav's loader reads and discards (its
weights come from the subfolder only). Code2wav can then load with `load_format: auto` while the talker keeps
`dummy`.

Two fills:
- `dummy` (the default, for load tests): as vLLM's dummy loader fills weights, uniform in ±1e-3 (each floating tensor
  drawn from seed 1234, as it draws them; the others left as built). Cost and memory are
  those of real weights, but the audio is not: every layer scales its input by about 0.02 and adds a bias of about
  1e-3, so past the first few layers the waveform no longer depends on the codes at all.
- `signal` (for tests that compare waveforms, tests/gpu/test_stateful_decode.py): seeded random weights scaled so
  that a signal keeps its size through the decoder (each linear map and convolution draws from N(0, 1/fan-in), norms
  at 1, biases at 0, codebooks N(0, 1), the residual scales at 0.1, SnakeBeta at its own initial value, the last
  convolution scaled for a waveform of RMS 0.1), so that the waveform depends on every code and on the context each
  frame sees, as a trained decoder's does.

    python3 deploy/gpu/codec_weights.py MODEL_DIR [--fill dummy|signal] [--seed N]

Needs torch and one of the two engines' decoder classes: vllm-omni 0.30.0's where it imports (the class code2wav
builds), otherwise qwen-tts's (the one sglang-omni's codec builds; installed with the `sglang` extra). Both name the
checkpoint's tensors alike, so either engine loads what the other host wrote.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

CODEC_WEIGHTS = "speech_tokenizer/model.safetensors"
PLACEHOLDER = "model.safetensors"  # code2wav's loader drains the top-level weights unread; vLLM wants some there
FILLS = ("dummy", "signal")
RESIDUAL_SCALE = 0.1  # the transformer's LayerScale and the ConvNeXt blocks' gamma under the `signal` fill
WAVE_RMS = 0.1  # the `signal` fill's waveform level (10 dB below a full-scale sine's), far from the ±1 clamp
DUMMY_RANGE = 1e-3  # vLLM's dummy loader: uniform in ±this
DUMMY_SEED = 1234  # and each tensor drawn from a generator seeded so


def checkpoint_tensors(decoder_state: dict[str, Any]) -> dict[str, Any]:
    """The decoder's tensors under the names a checkpoint's speech tokenizer gives them, each a copy of its own
    (safetensors refuses tensors that share memory, as tied or viewed ones do)."""
    return {f"decoder.{name}": tensor.detach().clone().contiguous() for name, tensor in decoder_state.items()}


def _signal_fill(decoder: Any, seed: int) -> None:
    """Weights that keep a signal's size from the codes to the waveform (see the module's docstring)."""
    import torch
    from torch import nn

    generator = torch.Generator(device="cpu").manual_seed(seed)

    def normal(tensor: Any, std: float) -> None:
        tensor.copy_(torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * std)

    done: set[int] = set()
    for module in decoder.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, nn.ConvTranspose1d):
            # weight [in, out / groups, kernel]: each output sample sums in_channels x kernel / stride products
            fan_in = module.in_channels * module.kernel_size[0] / module.stride[0]
        elif isinstance(module, (nn.Conv1d, nn.Linear)):
            fan_in = weight[0].numel()  # in_channels / groups x kernel, or in_features
        elif isinstance(weight, nn.Parameter) and weight.dim() == 1:  # LayerNorm, RMSNorm
            weight.fill_(1.0)
            done.add(id(weight))
            continue
        else:
            continue
        normal(weight, 1.0 / math.sqrt(fan_in))
        done.add(id(weight))
    for name, tensor in decoder.named_parameters():
        if id(tensor) in done:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "embedding_sum":  # codebook entries, each code a distinct vector
            normal(tensor, 1.0)
        elif leaf == "cluster_usage":  # the codebook divides its entries by this
            tensor.fill_(1.0)
        elif leaf in ("scale", "gamma"):  # LayerScale, ConvNeXt's residual scale
            tensor.fill_(RESIDUAL_SCALE)
        elif leaf in ("alpha", "beta"):  # SnakeBeta, log-scale: 0 is its own initial value (exp(0) = 1)
            tensor.zero_()
        else:  # biases
            tensor.zero_()
    _scale_output(decoder, generator)


def _scale_output(decoder: Any, generator: Any) -> None:
    """Scale the last convolution so that the waveform's RMS is WAVE_RMS before the decoder clamps it to ±1: the
    residual units let the signal grow on the way (about 60x with the fill above), and a clamped waveform would hide
    differences between two decodes."""
    import torch

    last = decoder.decoder[-1]  # the causal convolution to one channel that ends the decoder
    seen: list[Any] = []
    handle = last.register_forward_hook(lambda _module, _inputs, output: seen.append(output))
    try:
        codes = torch.randint(
            0, decoder.config.codebook_size, (1, decoder.config.num_quantizers, 8), generator=generator
        )
        decoder(codes)
    finally:
        handle.remove()
    rms = float(seen[0].pow(2).mean().sqrt())
    last.conv.weight.mul_(WAVE_RMS / rms)


def random_decoder(model_dir: Path, fill: str = "dummy", seed: int = 0) -> Any:
    """The codec decoder of the model directory's speech tokenizer, built by the class `decoder_classes` names
    (vllm-omni's, the one `Qwen3TTSCode2Wav.__init__` builds, where it imports) from the same config, filled as `fill`
    says (see the module's docstring)."""
    import torch

    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    config_class, decoder_class = decoder_classes()
    config = config_class.from_pretrained(str(model_dir), subfolder="speech_tokenizer")
    decoder = decoder_class._from_config(config.decoder_config)
    with torch.no_grad():
        if fill == "signal":
            _signal_fill(decoder, seed)
        else:
            for tensor in decoder.state_dict().values():
                if torch.is_floating_point(tensor):  # the values the dummy loader would give
                    generator = torch.Generator(device=tensor.device).manual_seed(DUMMY_SEED)
                    tensor.uniform_(-DUMMY_RANGE, DUMMY_RANGE, generator=generator)
    return decoder


def decoder_classes() -> tuple[Any, Any]:
    """The speech tokenizer's config class and its decoder's: vllm-omni's where it imports (the ones code2wav
    builds), otherwise qwen-tts's (sglang-omni's codec builds those; a host with the `sglang` extra has no vllm)."""
    try:
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Decoder,
        )
    except ImportError:  # no vllm-omni, or one that does not import beside sglang-omni's pins
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder
    return Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Decoder


def write_codec_weights(model_dir: Path, fill: str = "dummy", seed: int = 0) -> list[Path]:
    import torch
    from safetensors.torch import save_file

    decoder = random_decoder(model_dir, fill=fill, seed=seed)
    codec = model_dir / CODEC_WEIGHTS
    save_file(checkpoint_tensors(decoder.state_dict()), str(codec), metadata={"format": "pt"})
    placeholder = model_dir / PLACEHOLDER
    if not placeholder.exists():
        save_file({"unused": torch.zeros(1)}, str(placeholder), metadata={"format": "pt"})
    return [codec, placeholder]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a directory written by app.tools.qwen3_tts_model_dir")
    parser.add_argument("--fill", choices=FILLS, default="dummy", help="dummy: vLLM's dummy values (load tests)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the signal fill")
    args = parser.parse_args(argv)
    if not (args.model_dir / "speech_tokenizer" / "config.json").is_file():
        parser.error(f"{args.model_dir}: no speech_tokenizer/config.json (make it with app.tools.qwen3_tts_model_dir)")
    for path in write_codec_weights(args.model_dir, fill=args.fill, seed=args.seed):
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
