"""The talker's steady decode steps batched (app/engines/omni/stage_plugins/steady_decode.py,
SPEECH_OMNI__STEADY_DECODE) against vllm-omni 0.30's own hooks: the wheel's `preprocess_decode_batch_mrv2` and
`make_omni_output` (model_executor/models/qwen3_tts/qwen3_tts_talker.py), their source read from the locked wheel and
run here as they are, with the module-level names they use, on a stand-in for torch (tests/fakes/torch_rows.py), and
the service's functions on the same rows: the same tensors (dtype, device, shape, strides, values) and the same
per-request updates. On a GPU, with vllm-omni's own class and CUDA tensors: tests/gpu/test_steady_decode.py.

Also what ties the service's override to vllm-omni's runner: which hook it calls, by which keywords, and what it passes
`make_omni_output` (worker_v2/model_states/omni_model_state.py)."""

from __future__ import annotations

import ast
import copy
import logging
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pytest

from app.engines.omni.stage_plugins import steady_decode
from tests.fakes import torch_rows as torch
from tests.fakes.torch_rows import Tensor, same
from tests.support.locked_wheels import Wheel, class_def, fetch_locked_wheel, function_def, literal_constants

ROOT = Path(__file__).resolve().parents[2]
TALKER_MODULE = "model_executor/models/qwen3_tts/qwen3_tts_talker.py"
BUILDER_MODULE = "model_executor/models/qwen3_tts/prompt_embeds_builder.py"
STATE_MODULE = "worker_v2/model_states/omni_model_state.py"
HOOKS = ("preprocess_decode_batch", "preprocess_decode_batch_mrv2", "make_omni_output")
HELPERS = ("_has_tts_text_conditioning", "_should_publish_async_ref_codes", "_mark_async_ref_codes_published")
HIDDEN, VOCAB, GROUPS, DEVICE = 8, 2048, 16, "cuda:0"


@pytest.fixture(scope="module")
def wheel() -> Wheel:
    return fetch_locked_wheel("vllm-omni", "0.30.0", "-py3-none-any.whl", "vllm_omni")


class OmniOutput(NamedTuple):  # vllm-omni 0.30's (model_executor/models/output_templates.py), a NamedTuple
    text_hidden_states: Any
    multimodal_outputs: Any = None
    intermediate_tensors: Any = None
    next_token_id: Any = None


class Logger:
    def __init__(self) -> None:
        self.said: list[str] = []

    def warning_once(self, message: str, *args: Any) -> None:
        self.said.append(message % args if args else message)

    warning = info = debug = warning_once


def compiled(node: ast.FunctionDef, namespace: dict[str, Any], where: str) -> Callable[..., Any]:
    module = ast.Module(body=[node], type_ignores=[])
    exec(compile("from __future__ import annotations\n" + ast.unparse(module), where, "exec"), namespace)
    return namespace[node.name]


@pytest.fixture(scope="module")
def talker_class(wheel: Wheel) -> type:
    """vllm-omni 0.30's talker hooks, as the wheel has them, on a class of their own: the module-level names they
    read are the wheel's (its constants and helper functions) or stand-ins (torch, the logger, OmniOutput)."""
    tree = wheel.tree(TALKER_MODULE)
    namespace: dict[str, Any] = {
        "torch": torch,
        "logger": Logger(),
        "OmniOutput": OmniOutput,
        "Any": Any,
        **literal_constants(tree),
        "PRECOMPUTED_TEXT_IDS_KEY": literal_constants(wheel.tree(BUILDER_MODULE))["PRECOMPUTED_TEXT_IDS_KEY"],
    }
    for name in HELPERS:
        compiled(function_def(tree, name), namespace, f"{TALKER_MODULE}:{name}")
    talker = class_def(tree, "Qwen3TTSTalkerForConditionalGeneration")
    methods = {name: compiled(function_def(talker, name), namespace, f"{TALKER_MODULE}:{name}") for name in HOOKS}
    return type("WheelTalker", (), methods)


def bf16(rows: int, seed: int) -> Tensor:
    """A [rows, HIDDEN] bfloat16 tensor on the device, of values bfloat16 holds exactly."""
    values = np.random.default_rng(seed).integers(-64, 64, size=(rows, HIDDEN)).astype(np.float32) / 4
    return Tensor(values, torch.bfloat16, DEVICE)


def talker(wheel_class: type, async_chunk: bool = True) -> Any:
    made = wheel_class()
    made._codebook_vocab_size = VOCAB
    made._embedding_dtype = torch.bfloat16
    made._tts_pad_embed = bf16(1, 0)
    made.vllm_config = SimpleNamespace(model_config=SimpleNamespace(async_chunk=async_chunk))
    return made


ROW_KINDS = ("text used up", "text", "last text position", "compacted", "compacted past half")


def decode_rows(count: int, rng: random.Random, kinds: tuple[str, ...] = ROW_KINDS) -> list[dict[str, Any]]:
    """Decode rows as vllm-omni's runner passes them (omni_model_state.py:558-591): a request's state (its text and
    settings, its prompt, the trailing text and offset its prefill wrote, the last hidden state and frame flag of
    the step before) with the runner's `_omni_*` keys."""
    last = bf16(count, rng.randrange(1 << 30))
    flags = Tensor(np.ones(count, dtype=np.bool_), torch.bool, DEVICE)
    codes = Tensor(np.zeros((count, GROUPS), dtype=np.int64), torch.long, DEVICE)
    rows = []
    for row in range(count):
        kind = rng.choice(kinds)
        if kind == "text used up":
            length, offset = 0, 0
        elif kind == "text":
            length = rng.randint(1, 40)
            offset = rng.randrange(length)
        elif kind == "last text position":
            length = rng.randint(1, 40)
            offset = length - 1
        elif kind == "compacted":  # the 64th position fed of a text of at most twice that
            length, offset = rng.randint(64, 128), 63
        else:
            length = rng.randint(64, 200)
            offset = rng.randint(max(63, (length + 1) // 2 - 1), length - 1)
        rows.append(
            {
                "text": ["Hello there."],
                "task_type": ["CustomVoice"],
                "speaker": ["vivian"],
                "language": ["Auto"],
                "sampling_params": None,
                "req_id": f"speech-{row}",
                "embed": {"prefill": bf16(3, row)},
                "hidden_states": {"trailing_text": bf16(length, rng.randrange(1 << 30)), "last": last[row]},
                "meta": {
                    "talker_text_offset": offset,
                    "codec_streaming": rng.random() < 0.5,
                    "codec_frame_valid": flags[row],
                },
                "codes": {"audio": codes[row : row + 1]},
                "_omni_prompt_len": 30,
                "_omni_num_computed_tokens": 100 + row,
                "_omni_is_prefill": False,
            }
        )
    return rows


def ids_of(count: int, rng: random.Random) -> Tensor:
    """One id a row, some outside the codebook (its end-of-speech id among them)."""
    return Tensor(np.array([rng.randint(-3, VOCAB + 4) for _ in range(count)], dtype=np.int64), torch.long, DEVICE)


def ours(made: Any, ids: Tensor, embeds: Tensor, rows: list[dict[str, Any]]) -> Any:
    return steady_decode.decode_batch(
        torch, input_ids=ids, input_embeds=embeds, req_infos=rows, vocab_size=made._codebook_vocab_size,
        dtype=made._embedding_dtype, pad_embed=made._tts_pad_embed,
    )  # fmt: skip


def snapshot(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows' dicts copied, their tensors kept (to see that nothing was written into the rows)."""
    return [{key: copy.copy(value) if isinstance(value, dict) else value for key, value in row.items()} for row in rows]


@pytest.mark.parametrize("count", [1, 2, 3, 8, 17, 32, 64])
def test_a_steady_decode_batch_is_what_vllm_omnis_hook_returns(talker_class: type, count: int) -> None:
    rng = random.Random(count)
    for _ in range(20):
        made = talker(talker_class)
        rows = decode_rows(count, rng)
        before = snapshot(rows)
        ids, embeds = ids_of(count, rng), bf16(count, rng.randrange(1 << 30))
        expected = made.preprocess_decode_batch_mrv2(input_ids=ids, input_embeds=embeds, req_infos=rows)
        result = ours(made, ids, embeds, rows)
        assert not isinstance(result, str), result
        same(expected, result)
        for row, was in zip(rows, before, strict=True):
            assert row == was  # neither writes into the rows: the runner applies the updates


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_every_kind_of_steady_row_alone(talker_class: type, kind: str) -> None:
    rng = random.Random(kind)
    made = talker(talker_class)
    rows = decode_rows(32, rng, kinds=(kind,))
    ids, embeds = ids_of(32, rng), bf16(32, 7)
    expected = made.preprocess_decode_batch_mrv2(input_ids=ids, input_embeds=embeds, req_infos=rows)
    same(expected, ours(made, ids, embeds, rows))


NOT_STEADY: dict[str, Callable[[dict[str, Any]], None]] = {
    "nested additional_information": lambda row: row.__setitem__("additional_information", {"text": ["x"]}),
    "no last hidden state (vllm-omni fills zeros, and says so)": lambda row: row["hidden_states"].pop("last"),
    "no trailing text": lambda row: row["hidden_states"].pop("trailing_text"),
    "codec_streaming as a list": lambda row: row["meta"].__setitem__("codec_streaming", [True]),
    "no talker_text_offset written": lambda row: row["meta"].__setitem__("talker_text_offset", None),
    "an offset past a used-up text": lambda row: (
        row["hidden_states"].__setitem__("trailing_text", bf16(3, 1))
        or row["meta"].__setitem__("talker_text_offset", 3)
    ),
    "a float32 last hidden state": lambda row: row["hidden_states"].__setitem__(
        "last", Tensor(np.zeros(HIDDEN, dtype=np.float32), torch.float32, DEVICE)
    ),
    "a last hidden state on the host": lambda row: row["hidden_states"].__setitem__("last", bf16(1, 2)[0].to("cpu")),
    "a float32 trailing text": lambda row: (
        row["hidden_states"].__setitem__(
            "trailing_text", Tensor(np.zeros((4, HIDDEN), dtype=np.float32), torch.float32, DEVICE)
        )
        or row["meta"].__setitem__("talker_text_offset", 1)
    ),
}


# the reason each change is refused for: one check deleted shows as another reason, not as a pass
REASONS = {
    "nested additional_information": "nested additional_information",
    "no last hidden state (vllm-omni fills zeros, and says so)": "no trailing text or last hidden state",
    "no trailing text": "no trailing text or last hidden state",
    "codec_streaming as a list": "codec_streaming or talker_text_offset not as the prefill wrote them",
    "no talker_text_offset written": "codec_streaming or talker_text_offset not as the prefill wrote them",
    "an offset past a used-up text": "an offset past a used-up text",
    "a float32 last hidden state": "last hidden states not on the talker's device in its embedding dtype",
    "a last hidden state on the host": "last hidden states of different shapes or devices",
    "a float32 trailing text": "trailing texts not on the talker's device in its embedding dtype",
}


@pytest.mark.parametrize("change", list(NOT_STEADY))
def test_a_row_not_steady_leaves_the_step_to_vllm_omni_and_writes_nothing(talker_class: type, change: str) -> None:
    """Any row these functions do not know as steady makes them answer a reason: the talker then calls vllm-omni's
    own hook (which copes with the row, or raises its own error), having written nothing."""
    rng = random.Random(change)
    made = talker(talker_class)
    rows = decode_rows(6, rng)
    NOT_STEADY[change](rows[3])
    before = snapshot(rows)
    result = ours(made, ids_of(6, rng), bf16(6, 3), rows)
    assert result == REASONS[change], change
    assert [row == was for row, was in zip(rows, before, strict=True)] == [True] * 6
    vllm_omnis = made.preprocess_decode_batch_mrv2(input_ids=ids_of(6, rng), input_embeds=bf16(6, 3), req_infos=rows)
    assert len(vllm_omnis[4]) == 6  # vllm-omni's own takes such a step


def output_rows(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Rows' state after a decode step, as `make_omni_output` reads it: each row's frame (a view of the step's codes),
    its frame flag, and for some rows reference codes already published (Base voice clones)."""
    codes = Tensor(np.array([[rng.randrange(VOCAB) for _ in range(GROUPS)] for _ in range(count)]), torch.long, DEVICE)
    flags = Tensor(np.array([rng.random() < 0.8 for _ in range(count)]), torch.bool, DEVICE)
    rows = []
    for row in range(count):
        meta: dict[str, Any] = {"talker_text_offset": 0, "codec_streaming": True, "codec_frame_valid": flags[row]}
        row_codes: dict[str, Any] = {"audio": codes[row : row + 1]}
        if rng.random() < 0.3:
            row_codes["ref"] = Tensor(np.ones((20, GROUPS), dtype=np.int64), torch.long, DEVICE)
            meta[steady_decode.REF_CODES_PUBLISHED] = True
        rows.append({"req_id": f"speech-{row}", "codes": row_codes, "meta": meta})
    return rows


def make_output(made: Any, rows: list[dict[str, Any]]) -> Any:
    """vllm-omni's hook called as its runner calls it (omni_model_state.py:1197-1211)."""
    spans = [(row, row + 1) for row in range(len(rows))]
    hidden = bf16(len(rows), 5)
    return made.make_omni_output(
        hidden, model_intermediate_buffer=rows, request_token_spans=spans, runtime_additional_information=rows
    )


@pytest.mark.parametrize("count", [1, 2, 5, 32, 64])
def test_steady_outputs_are_what_vllm_omnis_make_omni_output_makes(talker_class: type, count: int) -> None:
    rng = random.Random(count)
    for _ in range(20):
        rows = output_rows(count, rng)
        before = snapshot(rows)
        expected = make_output(talker(talker_class), rows)
        result = steady_decode.async_chunk_outputs(torch, rows)
        assert not isinstance(result, str), result
        same(expected.multimodal_outputs, result)
        assert [row == was for row, was in zip(rows, before, strict=True)] == [True] * count


NOT_STEADY_OUTPUTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "reference codes to publish": lambda row: (
        row["codes"].__setitem__("ref", Tensor(np.ones((5, GROUPS), dtype=np.int64), torch.long, DEVICE))
        or row["meta"].pop(steady_decode.REF_CODES_PUBLISHED, None)
    ),
    "no frame": lambda row: row["codes"].pop("audio"),
    "no frame flag": lambda row: row["meta"].pop("codec_frame_valid"),
    "a frame flag as a bool": lambda row: row["meta"].__setitem__("codec_frame_valid", True),
    "two frames": lambda row: row["codes"].__setitem__(
        "audio", Tensor(np.zeros((2, GROUPS), dtype=np.int64), torch.long, DEVICE)
    ),
    "a warm-up row": lambda row: row.clear(),
}


OUTPUT_REASONS = {
    "reference codes to publish": "reference codes to publish",
    "no frame": "not one frame with its flag",
    "no frame flag": "not one frame with its flag",
    "a frame flag as a bool": "not one frame with its flag",
    "two frames": "not one frame with its flag",
    "a warm-up row": "no codes or meta",
}


@pytest.mark.parametrize("change", list(NOT_STEADY_OUTPUTS))
def test_outputs_not_steady_are_left_to_vllm_omni(talker_class: type, change: str) -> None:
    rows = output_rows(4, random.Random(change))
    NOT_STEADY_OUTPUTS[change](rows[2])
    before = snapshot(rows)
    assert steady_decode.async_chunk_outputs(torch, rows) == OUTPUT_REASONS[change]
    assert [row == was for row, was in zip(rows, before, strict=True)] == [True] * 4


def test_the_tally_says_the_first_batched_step_each_reason_once_and_a_count() -> None:
    records: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    log = logging.getLogger("test.steady_decode")
    log.addHandler(handler := Handler())
    log.setLevel(logging.INFO)
    try:
        tally = steady_decode.Tally(log, every=4)
        taken = [tally.took("decode preprocessing", result, 32) for result in ((), "why", (), "why", (), "other")]
    finally:
        log.removeHandler(handler)
    assert taken == [True, False, True, False, True, False]
    assert records == [
        "SPEECH_OMNI_STEADY_DECODE: the decode preprocessing of a steady decode step made over its 32 rows",
        "SPEECH_OMNI_STEADY_DECODE: decode preprocessing left to vllm-omni's own, first for: why (32 rows)",
        "SPEECH_OMNI_STEADY_DECODE: decode preprocessing made over the batch in 2 of 4 steps",
        "SPEECH_OMNI_STEADY_DECODE: decode preprocessing left to vllm-omni's own, first for: other (32 rows)",
    ]


def test_the_variable_is_on_only_at_one() -> None:
    assert steady_decode.enabled({steady_decode.VARIABLE: "1"})
    assert not steady_decode.enabled({steady_decode.VARIABLE: ""}) and not steady_decode.enabled({})


def test_the_runner_calls_the_hooks_the_talker_overrides_as_the_override_takes_them(wheel: Wheel) -> None:
    """vllm-omni's model state takes the model's `preprocess_decode_batch_mrv2` first, passes it `input_embeds` where
    the hook names it, and calls it by keyword with the decode rows; it calls `make_omni_output` with the rows under
    `model_intermediate_buffer`. The service's talker overrides both with those names, keywords only; its constants
    are the wheel's."""
    state = class_def(wheel.tree(STATE_MODULE), "OmniModelState")
    resolve = ast.unparse(function_def(state, "_resolve_decode_preprocess"))
    assert resolve.index("'preprocess_decode_batch_mrv2'") < resolve.index("'preprocess_decode_batch'")
    assert "'input_embeds' in parameters" in resolve
    preprocess = ast.unparse(function_def(state, "run_preprocess"))
    assert "batch_decode_preprocess(input_ids=batch_ids, input_embeds=batch_embeds, req_infos=" in preprocess
    outputs = ast.unparse(function_def(state, "postprocess_model_output"))
    assert "'model_intermediate_buffer': buffer_list" in outputs
    assert "self.model.make_omni_output(model_output, **make_output_kwargs)" in outputs

    wheel_constants = literal_constants(wheel.tree(TALKER_MODULE))
    assert wheel_constants["_TRAILING_TEXT_COMPACT_MIN_FRAMES"] == steady_decode.TRAILING_TEXT_COMPACT_MIN_FRAMES
    assert wheel_constants["_ASYNC_REF_CODES_PUBLISHED_KEY"] == steady_decode.REF_CODES_PUBLISHED

    service_module = ast.parse((ROOT / "app/engines/omni/stage_plugins/talker_model.py").read_text())
    service = class_def(service_module, "SpeechQwen3TTSTalker")
    hook = function_def(service, "preprocess_decode_batch_mrv2")
    assert [a.arg for a in hook.args.args] == ["self"] and not hook.args.kwarg
    assert [a.arg for a in hook.args.kwonlyargs] == ["input_ids", "input_embeds", "req_infos"]
    talker = class_def(wheel.tree(TALKER_MODULE), "Qwen3TTSTalkerForConditionalGeneration")
    assert [a.arg for a in function_def(talker, "preprocess_decode_batch_mrv2").args.kwonlyargs] == [
        "input_ids", "input_embeds", "req_infos",
    ]  # fmt: skip
    assert [a.arg for a in function_def(talker, "make_omni_output").args.args] == ["self", "model_outputs"]
