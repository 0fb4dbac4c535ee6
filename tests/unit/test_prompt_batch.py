"""A talker step's CustomVoice and VoiceDesign prompts built together (app/engines/omni/stage_plugins/prompt_batch.py,
SPEECH_OMNI__PROMPT_BATCH) against vllm-omni 0.30's own builder: the wheel's `Qwen3TTSPromptEmbedsBuilder`
(model_executor/models/qwen3_tts/prompt_embeds_builder.py), its source read from the locked wheel and run here as it
is on a stand-in for torch (tests/fakes/torch_prompts.py) and a stand-in tokenizer: the same tensors, bit for bit,
for every row, and what each asks of a GPU. On a GPU, with vllm-omni's own builder: tests/gpu/test_prompt_batch.py."""

from __future__ import annotations

import ast
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from app.engines.omni.stage_plugins import prompt_batch
from tests.fakes import torch_prompts as torch
from tests.support.locked_wheels import Wheel, class_def, fetch_locked_wheel, function_def, literal_constants

BUILDER_MODULE = "model_executor/models/qwen3_tts/prompt_embeds_builder.py"
HELPERS = ("build_assistant_text", "build_instruct_text", "first_value", "coerce_token_ids")
TEXT_VOCAB, TEXT_HIDDEN, CODEC_VOCAB, HIDDEN = 151_936, 6, 3072, 8
SPEAKERS = {"Vivian": 3065, "Ryan": 3061, "eric": 2875, "dylan": 2878}
LANGUAGES = {"chinese": 2055, "english": 2050, "beijing_dialect": 2074, "sichuan_dialect": 2062}
TALKER = SimpleNamespace(
    codec_pad_id=2148, codec_bos_id=2149, codec_think_id=2154, codec_nothink_id=2155, codec_think_bos_id=2156,
    codec_think_eos_id=2157, codec_language_id=LANGUAGES, spk_id=SPEAKERS, hidden_size=HIDDEN, num_code_groups=16,
    spk_is_dialect={"vivian": False, "ryan": False, "eric": "sichuan_dialect", "dylan": "beijing_dialect"},
)  # fmt: skip
CONFIG = SimpleNamespace(tts_bos_token_id=151672, tts_eos_token_id=151673, tts_pad_token_id=151671)


@pytest.fixture(scope="module")
def wheel() -> Wheel:
    return fetch_locked_wheel("vllm-omni", "0.30.0", "-py3-none-any.whl", "vllm_omni")


class Tokenizer:
    """Special tokens by their ids, words by a hash: the Qwen template's shape ("<|im_start|>assistant\\n", the text,
    "<|im_end|>\\n<|im_start|>assistant\\n"). Called as transformers' tokenizer is, one text or a list."""

    SPECIAL: ClassVar[dict[str, int]] = {
        "<|im_start|>": 151644, "<|im_end|>": 151645, "assistant": 77091, "\n": 198, "user": 872
    }  # fmt: skip

    def __init__(self, torch_module: Any = torch) -> None:
        self.torch = torch_module  # the one whose tensors it returns (the stand-in, or torch on a GPU host)

    def ids(self, text: str) -> list[int]:
        pieces = re.findall(r"<\|im_start\|>|<\|im_end\|>|\n|[^\s<]+|<", text)
        return [self.SPECIAL.get(p, 1000 + sum(map(ord, p)) * 31 % 140_000) for p in pieces]

    def __call__(self, text: Any, return_tensors: str | None = None, padding: bool = False) -> dict[str, Any]:
        if isinstance(text, list):
            return {"input_ids": [self.ids(one) for one in text]}
        assert return_tensors == "pt"
        return {"input_ids": self.torch.tensor([self.ids(text)], dtype=self.torch.long)}


def wheel_builder_class(wheel: Wheel) -> type:
    """vllm-omni 0.30's builder class as the wheel has it, its module-level names the wheel's or stand-ins."""
    tree = wheel.tree(BUILDER_MODULE)
    namespace: dict[str, Any] = {
        "torch": torch, "np": np, "nn": SimpleNamespace(Module=object), "Any": Any, "OrderedDict": OrderedDict,
        "Mapping": Mapping, "Sequence": Sequence, "Callable": Callable, "logger": SimpleNamespace(),
    }  # fmt: skip
    namespace.update(literal_constants(tree))
    for name in HELPERS:
        node = function_def(tree, name)
        exec(compile("from __future__ import annotations\n" + ast.unparse(node), BUILDER_MODULE, "exec"), namespace)
    node = class_def(tree, "Qwen3TTSPromptEmbedsBuilder")
    exec(compile("from __future__ import annotations\n" + ast.unparse(node), BUILDER_MODULE, "exec"), namespace)
    made = namespace["Qwen3TTSPromptEmbedsBuilder"]
    made.assistant_text = staticmethod(namespace["build_assistant_text"])
    return made


def builder(made: type) -> Any:
    rng = np.random.default_rng(0)
    text_embedding = torch.Embedding(rng.integers(-3, 4, size=(TEXT_VOCAB, TEXT_HIDDEN)))
    projection = torch.Projection(rng.integers(-2, 3, size=(TEXT_HIDDEN, 7)), rng.integers(-2, 3, size=(7, HIDDEN)))
    codec = torch.Embedding(rng.integers(-3, 4, size=(CODEC_VOCAB, HIDDEN)))
    pad = projection(text_embedding(torch.tensor([[CONFIG.tts_pad_token_id]], dtype=torch.long, device="cuda:0")))
    built = made(
        config=CONFIG, talker_config=TALKER, model_path="unused", text_embedding=text_embedding,
        text_projection=projection, codec_embed=codec, residual_code_embeddings=lambda: [], speaker_encoder=None,
        tts_pad_embed=pad.reshape(1, -1), encode_ref_audio_batch=lambda *a, **k: [],
    )  # fmt: skip
    built._text_tokenizer = Tokenizer()
    return built


TEXTS = ("Hello there.", "The quick brown fox jumps over the lazy dog, twice.", "", "one", "a b c d e f g h i j k l")


def rows(count: int) -> list[dict[str, Any]]:
    """CustomVoice and VoiceDesign request states as the talker's first prefill sees them, of every kind the batch
    builds: each speaker (dialect ones too), language, streaming text or not, as the service's requests give them."""
    made = []
    speakers = list(SPEAKERS)
    for index in range(count):
        task = "VoiceDesign" if index % 5 == 4 else "CustomVoice"
        info: dict[str, Any] = {
            "task_type": [task],
            "text": [TEXTS[index % len(TEXTS)]],
            "language": [("Auto", "English", "Chinese", "chinese", "Klingon")[index % 5]],
            "instruct": [""],
        }
        if task == "CustomVoice":
            info["speaker"] = [speakers[index % len(speakers)]]
            if index % 7 == 3:  # a dialect speaker as vllm-omni spells it for its dialect: not stripped, nor listed
                info["speaker"] = " eric " if index % 2 else [" Eric "]
        if index % 3:
            info["non_streaming_mode"] = [index % 3 == 1]
        made.append(info)
    return made


def same(want: Any, got: Any) -> None:
    assert len(want) == len(got) == 4
    for a, b in zip(want, got, strict=True):
        if a is None or b is None:
            assert a is b
            continue
        assert (a.dtype, a.device, a.shape) == (b.dtype, b.device, b.shape)
        assert np.array_equal(a.array, b.array)


def test_every_row_gets_the_tensors_vllm_omnis_builder_makes_bit_for_bit(wheel: Wheel) -> None:
    made = wheel_builder_class(wheel)
    theirs, ours = builder(made), builder(made)
    batch = prompt_batch.PromptBatch(ours, made.assistant_text, torch)
    build = batch.wrap(ours.build_prompt_embeds)
    for _step in range(3):  # the later steps read what the first kept
        want_rows, got_rows = rows(20), rows(20)
        # an empty text is left to vllm-omni: the talker refuses it before asking for a prompt
        assert batch.build(got_rows) == sum(1 for row in got_rows if row["text"][0])
        for want, got in zip(want_rows, got_rows, strict=True):
            task = want["task_type"][0]
            same(theirs.build_prompt_embeds(task_type=task, info_dict=want), build(task_type=task, info_dict=got))
            assert prompt_batch.BUILT not in got


def test_a_step_of_prompts_asks_the_gpu_for_fewer_kernels_and_no_waiting_copy(wheel: Wheel) -> None:
    made = wheel_builder_class(wheel)
    theirs, ours = builder(made), builder(made)
    batch = prompt_batch.PromptBatch(ours, made.assistant_text, torch)
    build = batch.wrap(ours.build_prompt_embeds)
    counts = []
    for who, step in ((theirs.build_prompt_embeds, None), (build, batch.build)):
        for _warm in (True, False):  # the first step fills both builders' caches
            torch.COUNTS.update(launches=0, waiting_copies=0)
            infos = [{"task_type": ["CustomVoice"], "text": [TEXTS[1]], "speaker": ["Ryan"]} for _ in range(8)]
            if step is not None:
                step(infos)
            for info in infos:
                who(task_type="CustomVoice", info_dict=info)
        counts.append(dict(torch.COUNTS))
    theirs_counts, ours_counts = counts
    assert theirs_counts["waiting_copies"] == 16  # the text's ids and the speaker's id, each request
    assert ours_counts["waiting_copies"] == 0
    assert theirs_counts["launches"] == 22 * 8  # on the fake: a projection is three kernels
    assert ours_counts["launches"] == 7 * 8


def test_rows_it_does_not_build_are_left_to_vllm_omni(wheel: Wheel) -> None:
    made = wheel_builder_class(wheel)
    ours = builder(made)
    batch = prompt_batch.PromptBatch(ours, made.assistant_text, torch)
    left = [
        {"task_type": ["Base"], "text": ["x"]},
        {"task_type": ["CustomVoice"], "text": ["x"], "speaker": ["nobody"]},
        {"task_type": ["CustomVoice"], "text": ["x"], "speaker": [""]},
        {"task_type": ["CustomVoice"], "text": ["x"], "speaker": ["ryan"], "instruct": ["whisper"]},
        {"task_type": ["VoiceDesign"], "text": ["x"], "instruct": ["a deep voice"]},
        {"task_type": ["CustomVoice"], "text": ["x"], "speaker": ["ryan"], "embed": {"prefill": object()}},
        {"task_type": ["CustomVoice"], "text": ["x"], "speaker": ["ryan"], "_qwen3_tts_text_ids": [1, 2]},
        {"additional_information": {"task_type": ["CustomVoice"]}},
    ]
    assert batch.build(left) == 0
    assert all(prompt_batch.BUILT not in info for info in left)
    seen = []
    build = batch.wrap(lambda **kwargs: seen.append(kwargs) or "vllm-omni's")
    assert build(task_type="Base", info_dict=left[0]) == "vllm-omni's" and len(seen) == 1


def test_a_prompt_is_handed_over_once_and_then_let_go() -> None:
    box = prompt_batch.Built(("prompt", "trailing", None, None))  # type: ignore[arg-type]
    info = {prompt_batch.BUILT: box}
    step_copy = dict(info)  # the runner merges the row's state into a copy each step
    build = prompt_batch.PromptBatch(None, str, torch).wrap(lambda **_: "vllm-omni's")
    assert build(task_type="CustomVoice", info_dict=step_copy) == ("prompt", "trailing", None, None)
    assert box.result is None  # the state's box no longer holds the tensors
    assert build(task_type="CustomVoice", info_dict=dict(info)) == "vllm-omni's"


def test_the_switch() -> None:
    assert prompt_batch.enabled({prompt_batch.VARIABLE: "1"})
    assert not prompt_batch.enabled({prompt_batch.VARIABLE: ""}) and not prompt_batch.enabled({})


def test_a_step_whose_batch_fails_leaves_every_row_to_vllm_omni_with_no_prompt_half_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The talker's preprocess_batch_mrv2 calls build_or_leave: a failure part-way (a row built, the next one failing)
    is logged and every row goes back to vllm-omni's own build, none keeping a prompt."""
    batch = prompt_batch.PromptBatch(None, str, torch)
    infos: list[dict[str, Any]] = [{"task_type": ["CustomVoice"]}, {"task_type": ["CustomVoice"]}]

    def part_way(rows: Any) -> int:
        rows[0][prompt_batch.BUILT] = prompt_batch.Built(("prompt", "trailing", None, None))  # type: ignore[arg-type]
        raise RuntimeError("out of memory")

    batch.build = part_way  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="vllm.speech.plugin"):
        assert batch.build_or_leave(infos) == 0
    assert all(prompt_batch.BUILT not in info for info in infos)
    assert "prompts not built together; each built alone" in caplog.text
