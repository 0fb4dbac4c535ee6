"""Write a weight-less Qwen3-TTS-12Hz model directory (0.6B or 1.7B, CustomVoice or Base) for vllm-omni's
`load_format=dummy`.

With random weights vllm-omni runs the real two-stage pipeline at the real model size, so a deployment can be
smoke-tested and load-tested without downloading a checkpoint. The directory holds what fixes every tensor shape and
what the pipeline reads at start-up: `config.json` (the published checkpoints' values), `generation_config.json`,
`speech_tokenizer/config.json` and `preprocessor_config.json`, and a text tokenizer in Qwen2's layout. The tokenizer
is a small byte-level BPE trained here on generated English (not Qwen's vocabulary), padded so that every special
token sits at its real id; English gets about one token per word, as with Qwen's.

    speech-make-model-dir OUT_DIR [--variant custom_voice|base] [--size 0.6B|1.7B]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
from pathlib import Path
from typing import Any

# Qwen2's pre-tokenizer split rule (contractions, letters, single digits, punctuation runs, newlines, spaces).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGULAR_TOKENS = 151_643  # ids below this are ordinary BPE tokens; specials follow in a fixed order
SPECIAL_TOKENS = (
    "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> <|box_start|> <|box_end|> "
    "<|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> <|vision_pad|> <|image_pad|> <|video_pad|> "
    "<tool_call> </tool_call> <|fim_prefix|> <|fim_middle|> <|fim_suffix|> <|fim_pad|> <|repo_name|> <|file_sep|> "
    "<tool_response> </tool_response> <think> </think> <|audio_start|> <|audio_end|> <tts_pad> <tts_text_bos> "
    "<tts_text_eod> <tts_text_bos_single> <|audio_pad|>"
).split()

SPEAKERS = {  # CustomVoice preset speakers: codec id, and the dialect some of them speak
    "serena": (3066, False),
    "vivian": (3065, False),
    "uncle_fu": (3010, False),
    "ryan": (3061, False),
    "aiden": (2861, False),
    "ono_anna": (2873, False),
    "sohee": (2864, False),
    "eric": (2875, "sichuan_dialect"),
    "dylan": (2878, "beijing_dialect"),
}
CODEC_LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}


# The 1.7B checkpoints' config.json, as published at Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice revision 0c0e3051 and
# Qwen/Qwen3-TTS-12Hz-1.7B-Base revision fd4b2543. Read from byte-identical copies in github.com/deepbeepmeep/Wan2GP,
# models/TTS/qwen3/configs/qwen3_tts_customvoice.json and qwen3_tts_base.json (their SHA-256, 17a07f52... and
# b4f01752..., are the ones pinned for those revisions in another public project's checkpoint manifest). Against the
# 0.6B values only these differ: the talker is 2048 wide with a 6144 MLP (its 28 layers, 16 query and 8 key/value
# heads of 128 stay), the Base speaker encoder gives 2048-wide x-vectors, and the code predictor (1024 wide, 5
# layers) is reached through a 2048 -> 1024 projection that vllm-omni builds from the two widths. As published, the
# CustomVoice file has no speaker_encoder_config, the Base file lists no dialects among its codec languages, and
# neither names a torch_dtype; the nine CustomVoice speakers and their codec ids are the 0.6B ones.
SIZES: dict[str, dict[str, Any]] = {
    "0.6B": {"tag": "0b6", "talker_hidden": 1024, "talker_intermediate": 3072, "enc_dim": 1024},
    "1.7B": {"tag": "1b7", "talker_hidden": 2048, "talker_intermediate": 6144, "enc_dim": 2048},
}


def _attention(hidden: int, layers: int, positions: int, intermediate: int = 3072) -> dict[str, Any]:
    return {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": intermediate,
        "hidden_act": "silu",
        "max_position_embeddings": positions,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1_000_000,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
    }


def model_config(variant: str, size: str = "0.6B") -> dict[str, Any]:
    shape = SIZES[size]
    speakers = SPEAKERS if variant == "custom_voice" else {}
    languages = dict(CODEC_LANGUAGES)
    if size == "1.7B" and variant == "base":  # the published 1.7B Base config names no dialects
        languages = {name: codec for name, codec in languages.items() if "dialect" not in name}
    talker = {
        "model_type": "qwen3_tts_talker",
        **_attention(shape["talker_hidden"], 28, 32768, shape["talker_intermediate"]),
        "rope_scaling": {"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default", "type": "default"},
        "vocab_size": 3072,
        "text_vocab_size": 151_936,
        "text_hidden_size": 2048,
        "num_code_groups": 16,
        "position_id_per_seconds": 13,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "codec_language_id": languages,
        "spk_id": {name: ids for name, (ids, _) in speakers.items()},
        "spk_is_dialect": {name: dialect for name, (_, dialect) in speakers.items()},
        "code_predictor_config": {
            "model_type": "qwen3_tts_talker_code_predictor",
            **_attention(1024, 5, 65536),
            "rope_scaling": None,
            "layer_types": ["full_attention"] * 5,
            "vocab_size": 2048,
            "num_code_groups": 16,
        },
    }
    config: dict[str, Any] = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": shape["tag"],
        "tts_model_type": variant,
        "im_start_token_id": 151_644,
        "im_end_token_id": 151_645,
        "tts_pad_token_id": 151_671,
        "tts_bos_token_id": 151_672,
        "tts_eos_token_id": 151_673,
        "assistant_token_id": 77091,
        "speaker_encoder_config": {"enc_dim": shape["enc_dim"], "sample_rate": 24000},
        "talker_config": talker,
        "torch_dtype": "bfloat16",
    }
    if size == "1.7B":  # as published (see SIZES); the 0.6B output stays as it always was
        del config["torch_dtype"]
        if variant != "base":
            del config["speaker_encoder_config"]
    return config


GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "max_new_tokens": 8192,
}

SPEECH_TOKENIZER_CONFIG = {
    "architectures": ["Qwen3TTSTokenizerV2Model"],
    "model_type": "qwen3_tts_tokenizer_12hz",
    "encoder_valid_num_quantizers": 16,
    "input_sample_rate": 24000,
    "output_sample_rate": 24000,
    "decode_upsample_rate": 1920,
    "encode_downsample_rate": 1920,
    "encoder_config": {  # Mimi
        "model_type": "mimi",
        "audio_channels": 1,
        "num_filters": 64,
        "kernel_size": 7,
        "residual_kernel_size": 3,
        "last_kernel_size": 3,
        "num_residual_layers": 1,
        "compress": 2,
        "dilation_growth_rate": 2,
        "upsampling_ratios": [8, 6, 5, 4],
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2048,
        "hidden_act": "gelu",
        "norm_eps": 1e-05,
        "layer_scale_initial_scale": 0.01,
        "rope_theta": 10000.0,
        "max_position_embeddings": 8000,
        "sliding_window": 250,
        "num_quantizers": 32,
        "num_semantic_quantizers": 1,
        "codebook_size": 2048,
        "codebook_dim": 256,
        "vector_quantization_hidden_dimension": 256,
        "pad_mode": "constant",
        "use_causal_conv": True,
        "use_conv_shortcut": False,
        "trim_right_ratio": 1.0,
        "upsample_groups": 512,
        "frame_rate": 12.5,
        "sampling_rate": 24000,
    },
    "decoder_config": {
        "latent_dim": 1024,
        "codebook_dim": 512,
        "codebook_size": 2048,
        "decoder_dim": 1536,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "hidden_act": "silu",
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 64,
        "rms_norm_eps": 1e-05,
        "layer_scale_initial_scale": 0.01,
        "rope_theta": 10000,
        "max_position_embeddings": 8000,
        "sliding_window": 72,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "num_quantizers": 16,
        "num_semantic_quantizers": 1,
        "semantic_codebook_size": 4096,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "vector_quantization_hidden_dimension": 512,
    },
}

PREPROCESSOR_CONFIG = {
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "sampling_rate": 24000,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "chunk_length_s": None,
    "overlap": None,
}

_VOCABULARY = (
    "a about after all also an and any are as at back be because been but by call can city come could day did do "
    "dog even evening first for fox from get give go good had has have he hello her him his how i if in into is it "
    "its just know large like look make me meeting message model morning most music my new no not now number of on "
    "once one only or other our out over people phone please quick read river said say see seven she small so some "
    "sound speech story stream take text than thank that the their them then there these they think this time to "
    "today two up upon us use voice want was way we weather weekend welcome well were what when which who will with "
    "work world would year you your"
).split()


def _training_text(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [rng.choice(_VOCABULARY) for _ in range(rng.randint(3, 14))]
        lines.append(" ".join(words).capitalize() + rng.choice(".!?,"))
    return lines + ["user\n", "assistant\n", "system\n"] * (count // 10)


def write_tokenizer(out: Path) -> None:
    for name, text in _tokenizer_files().items():
        (out / name).write_text(text, encoding="utf-8")


# Training the BPE takes about a second (two on a busy machine) and gives the same files every time (a fixed seed, a
# fixed corpus): one process writing several directories (the test suite's fixtures) trains it once.
@functools.cache
def _tokenizer_files() -> dict[str, str]:
    """File name -> text of the text tokenizer's files (tokenizer.json, vocab.json, merges.txt,
    tokenizer_config.json)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000, min_frequency=2, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_training_text(20_000), trainer=trainer)
    spec = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    vocab.update({f"<|unused_{i}|>": i for i in range(len(vocab), QWEN2_REGULAR_TOKENS)})  # keep Qwen2's id layout
    special = [
        {
            "id": QWEN2_REGULAR_TOKENS + i,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, token in enumerate(SPECIAL_TOKENS)
    ]
    spec["added_tokens"] = special
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 131072,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "added_tokens_decoder": {
            str(entry["id"]): {
                k: entry[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
            }
            for entry in special
        },
    }
    return {
        "tokenizer.json": json.dumps(spec, ensure_ascii=False),
        "vocab.json": json.dumps(vocab, ensure_ascii=False),
        "merges.txt": "#version: 0.2\n" + "\n".join(merges) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=1),
    }


def write_model_dir(out: str | Path, variant: str = "custom_voice", size: str = "0.6B") -> Path:
    if variant not in ("custom_voice", "base"):
        raise ValueError("variant must be custom_voice or base")
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}")
    root = Path(out)
    (root / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": model_config(variant, size),
        "generation_config.json": GENERATION_CONFIG,
        "speech_tokenizer/config.json": SPEECH_TOKENIZER_CONFIG,
        "speech_tokenizer/preprocessor_config.json": PREPROCESSOR_CONFIG,
    }
    for name, content in files.items():
        (root / name).write_text(json.dumps(content, indent=2), encoding="utf-8")
    write_tokenizer(root)
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="speech-make-model-dir", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", help="directory to write")
    parser.add_argument("--variant", choices=["custom_voice", "base"], default="custom_voice")
    parser.add_argument("--size", choices=list(SIZES), default="0.6B", help="checkpoint shape to copy (default 0.6B)")
    args = parser.parse_args(argv)
    root = write_model_dir(args.out, args.variant, args.size)
    print(f"wrote a Qwen3-TTS {args.size} {args.variant} model directory (no weights) to {root}")


if __name__ == "__main__":
    main()
