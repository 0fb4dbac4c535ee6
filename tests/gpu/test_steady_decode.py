"""SPEECH_OMNI__STEADY_DECODE's batched hooks (app/engines/omni/stage_plugins/steady_decode.py) against vllm-omni 0.30's
own class's (`Qwen3TTSTalkerForConditionalGeneration.preprocess_decode_batch_mrv2` and `make_omni_output`, on a
stand-in talker: deploy/gpu/steady_decode_bench.py), on steady rows of CUDA tensors: the same tensors (dtype, device,
shape, strides, values) and the same per-request updates. On the CPU, with the wheel's source on a stand-in for torch:
tests/unit/test_steady_decode.py."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.gpu.support import torch_with_vllm_omni_030
from tests.support.scripts import gpu_script

BENCH = gpu_script("steady_decode_bench")
HIDDEN = 1024


@pytest.fixture(scope="module")
def torch() -> Any:
    return torch_with_vllm_omni_030("talker's decode hooks")


def same(torch: Any, a: Any, b: Any, path: str = "result") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert (a.dtype, a.device, tuple(a.shape), a.stride()) == (b.dtype, b.device, tuple(b.shape), b.stride()), path
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), path
        for key in a:
            same(torch, a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            same(torch, x, y, f"{path}[{index}]")
    else:
        assert type(a) is type(b) and a == b, path


@pytest.mark.parametrize("count", [1, 8, 32, 64])
@pytest.mark.parametrize("fed", ["none", "half", "all"])
def test_the_batched_hooks_give_vllm_omnis_tensors_on_the_gpu(torch: Any, count: int, fed: str) -> None:
    from app.engines.omni.stage_plugins import steady_decode

    text_rows = {"none": 0, "half": count // 2, "all": count}[fed]
    talker = BENCH.stand_in_talker(torch, HIDDEN, "cuda")
    with torch.inference_mode():
        for seed in range(5):
            rng = random.Random(seed)
            rows = BENCH.decode_rows(torch, count, HIDDEN, "cuda", rng, text_rows)
            for row in rows[: text_rows // 3]:  # the text's last position: its tail is compacted to nothing
                row["meta"]["talker_text_offset"] = row["hidden_states"]["trailing_text"].shape[0] - 1
            ids = torch.randint(-3, BENCH.VOCAB + 4, (count,), device="cuda")
            embeds = torch.randn(count, HIDDEN, device="cuda").to(torch.bfloat16)
            expected = talker.preprocess_decode_batch_mrv2(input_ids=ids, input_embeds=embeds, req_infos=rows)
            result = BENCH.ours(torch, talker, ids, embeds, rows)
            assert not isinstance(result, str), result
            same(torch, tuple(expected), result)

            hidden = torch.randn(count, HIDDEN, device="cuda")
            outputs = steady_decode.async_chunk_outputs(torch, rows)
            assert not isinstance(outputs, str), outputs
            same(torch, BENCH.theirs_output(talker, hidden, rows).multimodal_outputs, outputs)
