"""speech-make-model-dir: the weight-less Qwen3-TTS model directories, 0.6B as it always was and the 1.7B shape."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.engines.qwen3_tts import Qwen3TTSModel
from app.tools.qwen3_tts_model_dir import main, write_model_dir

TEXT_TOKENIZER = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")
SHARED = (*TEXT_TOKENIZER, "generation_config.json", "speech_tokenizer/config.json")
# config.json of the 0.6B output before --size existed: the default must not move (deploy scripts and benchmarks
# compare against directories written by earlier versions)
CONFIG_0_6B_SHA256 = {
    "custom_voice": "333e7c84d8c3e1fcd655a2ebea5c3879f510f915be5da12c268029da3a37a1f2",
    "base": "a90720b82719b97a6b9d98dd08335627343b576584465b78e436b39eb0d41abc",
}
# The published Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice config.json's speakers
SPEAKERS_1_7B = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    return {
        (size, variant): write_model_dir(tmp_path_factory.mktemp(f"{size}-{variant}"), variant, size)
        for size in ("0.6B", "1.7B")
        for variant in ("custom_voice", "base")
    }


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("variant", ["custom_voice", "base"])
def test_the_default_size_writes_the_0_6b_config_unchanged(dirs: dict, variant: str, tmp_path: Path) -> None:
    assert (
        hashlib.sha256((dirs["0.6B", variant] / "config.json").read_bytes()).hexdigest()
        == (CONFIG_0_6B_SHA256[variant])
    )
    default = write_model_dir(tmp_path, variant)  # no size given
    assert (default / "config.json").read_bytes() == (dirs["0.6B", variant] / "config.json").read_bytes()


@pytest.mark.parametrize("variant", ["custom_voice", "base"])
def test_1_7b_has_the_published_talker_and_code_predictor(dirs: dict, variant: str) -> None:
    config = _config(dirs["1.7B", variant])
    assert (config["tts_model_size"], config["tts_model_type"]) == ("1b7", variant)
    talker = config["talker_config"]
    assert {k: talker[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers")} == {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
    }
    assert (talker["num_attention_heads"], talker["num_key_value_heads"], talker["head_dim"]) == (16, 8, 128)
    assert (talker["vocab_size"], talker["text_vocab_size"], talker["text_hidden_size"]) == (3072, 151_936, 2048)
    assert talker["rope_scaling"]["mrope_section"] == [24, 20, 20] and talker["max_position_embeddings"] == 32768
    predictor = talker["code_predictor_config"]
    assert (predictor["hidden_size"], predictor["intermediate_size"], predictor["num_hidden_layers"]) == (1024, 3072, 5)
    assert (predictor["num_attention_heads"], predictor["num_key_value_heads"], predictor["head_dim"]) == (16, 8, 128)
    assert (predictor["vocab_size"], predictor["num_code_groups"], predictor["max_position_embeddings"]) == (
        2048,
        16,
        65536,
    )
    assert "torch_dtype" not in config  # the published files name none


def test_1_7b_custom_voice_keeps_the_checkpoints_speakers(dirs: dict) -> None:
    config = _config(dirs["1.7B", "custom_voice"])
    talker = config["talker_config"]
    assert talker["spk_id"] == SPEAKERS_1_7B
    assert {k: v for k, v in talker["spk_is_dialect"].items() if v} == {
        "eric": "sichuan_dialect",
        "dylan": "beijing_dialect",
    }
    assert talker["codec_language_id"]["beijing_dialect"] == 2074 and len(talker["codec_language_id"]) == 12
    assert "speaker_encoder_config" not in config  # as published: only Base carries one


def test_1_7b_base_has_a_2048_wide_speaker_encoder_and_no_speakers(dirs: dict) -> None:
    config = _config(dirs["1.7B", "base"])
    assert config["speaker_encoder_config"] == {"enc_dim": 2048, "sample_rate": 24000}
    talker = config["talker_config"]
    assert talker["spk_id"] == {} and talker["spk_is_dialect"] == {}
    assert "beijing_dialect" not in talker["codec_language_id"] and len(talker["codec_language_id"]) == 10


@pytest.mark.parametrize("variant", ["custom_voice", "base"])
def test_both_sizes_share_the_text_tokenizer_and_the_codec(dirs: dict, variant: str) -> None:
    for name in SHARED:
        assert (dirs["1.7B", variant] / name).read_bytes() == (dirs["0.6B", variant] / name).read_bytes(), name


def test_the_engine_reads_the_1_7b_directory(dirs: dict) -> None:
    custom = Qwen3TTSModel.from_dir(dirs["1.7B", "custom_voice"])
    assert custom.variant == "custom_voice" and custom.hidden_size == 2048
    assert set(custom.speakers) == set(SPEAKERS_1_7B) and "English" in custom.languages
    base = Qwen3TTSModel.from_dir(dirs["1.7B", "base"])
    # a Base speaker_embedding must be as wide as the talker: 2048 here, the x-vector width the config gives
    assert base.variant == "base" and base.hidden_size == 2048 and base.speakers == ()
    assert base.languages == Qwen3TTSModel.from_dir(dirs["0.6B", "base"]).languages


def test_the_command_line_takes_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(tmp_path / "m"), "--variant", "base", "--size", "1.7B"])
    assert "1.7B base" in capsys.readouterr().out
    assert _config(tmp_path / "m")["tts_model_size"] == "1b7"
    with pytest.raises(SystemExit):
        main([str(tmp_path / "n"), "--size", "4B"])
    assert "invalid choice: '4B'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"size must be one of 0\.6B, 1\.7B"):
        write_model_dir(tmp_path / "o", "base", "1.7b")
