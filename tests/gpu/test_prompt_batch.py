"""SPEECH_OMNI__PROMPT_BATCH's prompts built together (app/engines/omni/stage_plugins/prompt_batch.py) against vllm-omni
0.30's own builder (`Qwen3TTSPromptEmbedsBuilder.build_prompt_embeds`) on CUDA, both over the same random bfloat16
weights of the 0.6B talker's shapes (deploy/gpu/prompt_batch_bench.py) and the unit test's stand-in tokenizer: the
same tensors, bit for bit (cuBLAS picks its kernels by shape, and the text's projection runs over the same rows as
vllm-omni's). On the CPU, with the wheel's source on a stand-in for torch: tests/unit/test_prompt_batch.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.support import torch_with_vllm_omni_030
from tests.support.scripts import gpu_script
from tests.unit.test_prompt_batch import CONFIG, TALKER, Tokenizer, rows

BENCH = gpu_script("prompt_batch_bench")


@pytest.fixture(scope="module")
def torch() -> Any:
    return torch_with_vllm_omni_030("talker's prompt builder")


def model_dir(tmp_path: Path) -> Path:
    talker = dict(vars(TALKER))
    talker.update(hidden_size=1024, text_hidden_size=2048, text_vocab_size=151_936, vocab_size=3072)
    (tmp_path / "config.json").write_text(json.dumps({**vars(CONFIG), "talker_config": talker}))
    return tmp_path


def test_the_batched_prompts_are_vllm_omnis_bit_for_bit(torch: Any, tmp_path: Path) -> None:
    from app.engines.omni.stage_plugins import prompt_batch

    module = BENCH.builder_module(None)
    theirs, ours = (BENCH.make_builder(torch, module, model_dir(tmp_path), "cuda") for _ in range(2))
    theirs._text_tokenizer = ours._text_tokenizer = Tokenizer(torch)
    batch = prompt_batch.PromptBatch(ours, module.build_assistant_text, torch)
    build = batch.wrap(ours.build_prompt_embeds)
    with torch.inference_mode():
        for _step in range(2):
            want_rows, got_rows = rows(20), rows(20)
            # a row with no text is left to vllm-omni's own build, which refuses it (as the unit test's rows have)
            assert batch.build(got_rows) == sum(1 for row in got_rows if row["text"][0]) == 16
            for want, got in zip(want_rows, got_rows, strict=True):
                task = want["task_type"][0]
                a = theirs.build_prompt_embeds(task_type=task, info_dict=want)
                b = build(task_type=task, info_dict=got)
                for x, y in zip(a, b, strict=True):
                    if x is None or y is None:
                        assert x is y
                        continue
                    assert (x.dtype, x.device, tuple(x.shape)) == (y.dtype, y.device, tuple(y.shape))
                    assert torch.equal(x, y), (task, want["text"][0])
