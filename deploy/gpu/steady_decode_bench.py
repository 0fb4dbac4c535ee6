"""Host time of the talker's two per-row decode hooks on a GPU host: vllm-omni 0.30's own
(`Qwen3TTSTalkerForConditionalGeneration.preprocess_decode_batch_mrv2` and `make_omni_output`, its class's methods on a
stand-in talker) against the service's batched ones (app/engines/omni/stage_plugins/steady_decode.py,
SPEECH_OMNI__STEADY_DECODE), on the same steady rows on the GPU, called in turn; the host's time of each call (kernels
are queued, not waited for), median of N calls. tests/gpu/test_steady_decode.py uses its rows to check that both give
the same tensors.

    python deploy/gpu/steady_decode_bench.py [--calls 3000] [--hidden 1024]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import types
from pathlib import Path
from typing import Any

VOCAB, GROUPS = 2048, 16


def stand_in_talker(torch: Any, hidden: int, device: str, async_chunk: bool = True) -> Any:
    """What vllm-omni's two hooks read of their talker, with its class's methods bound to it."""
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_talker import Qwen3TTSTalkerForConditionalGeneration

    talker = types.SimpleNamespace(
        _codebook_vocab_size=VOCAB,
        _embedding_dtype=torch.bfloat16,
        _tts_pad_embed=torch.randn(1, hidden, device=device).to(torch.bfloat16),
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(async_chunk=async_chunk)),
        embed_input_ids=None,  # the runner always passes the embeddings
    )
    for name in ("preprocess_decode_batch", "preprocess_decode_batch_mrv2", "make_omni_output"):
        setattr(talker, name, types.MethodType(getattr(Qwen3TTSTalkerForConditionalGeneration, name), talker))
    return talker


def decode_rows(torch: Any, count: int, hidden: int, device: str, rng: random.Random, text_rows: int) -> list[dict]:
    """Steady decode rows as the runner passes them: `text_rows` of them still fed text, the rest past it."""
    last = torch.randn(count, hidden, device=device).to(torch.bfloat16)
    flags = torch.ones(count, dtype=torch.bool, device=device)
    codes = torch.zeros(count, GROUPS, dtype=torch.long, device=device)
    rows = []
    for row in range(count):
        fed = row < text_rows
        tail = torch.randn(40 if fed else 0, hidden, device=device).to(torch.bfloat16)
        rows.append(
            {
                "text": ["Hello there."],
                "task_type": ["CustomVoice"],
                "speaker": ["vivian"],
                "language": ["Auto"],
                "req_id": f"speech-{row}",
                "hidden_states": {"trailing_text": tail, "last": last[row]},
                "meta": {
                    "talker_text_offset": rng.randrange(30) if fed else 0,
                    "codec_streaming": True,
                    "codec_frame_valid": flags[row],
                    "_qwen3_tts_ref_codes_published": True,
                },
                "codes": {"audio": codes[row : row + 1]},
                "_omni_prompt_len": 30,
                "_omni_num_computed_tokens": 100,
                "_omni_is_prefill": False,
            }
        )
    return rows


def ours(torch: Any, talker: Any, ids: Any, embeds: Any, rows: list[dict]) -> Any:
    from app.engines.omni.stage_plugins import steady_decode

    return steady_decode.decode_batch(
        torch, input_ids=ids, input_embeds=embeds, req_infos=rows, vocab_size=talker._codebook_vocab_size,
        dtype=talker._embedding_dtype, pad_embed=talker._tts_pad_embed,
    )  # fmt: skip


def theirs_output(talker: Any, hidden: Any, rows: list[dict]) -> Any:
    spans = [(row, row + 1) for row in range(len(rows))]
    return talker.make_omni_output(
        hidden, model_intermediate_buffer=rows, request_token_spans=spans, runtime_additional_information=rows
    )


def in_turn(torch: Any, first: Any, second: Any, calls: int) -> tuple[float, float]:
    """Median host µs of each of two calls made in turn."""
    times: tuple[list[float], list[float]] = ([], [])
    for call in range(calls):
        if call % 200 == 0:
            torch.cuda.synchronize()
        started = time.perf_counter()
        first()
        between = time.perf_counter()
        second()
        times[0].append(between - started)
        times[1].append(time.perf_counter() - between)
    return tuple(sorted(each)[len(each) // 2] * 1e6 for each in times)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--hidden", type=int, default=1024)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import torch

    from app.engines.omni.stage_plugins import steady_decode

    device = "cuda"
    talker = stand_in_talker(torch, args.hidden, device)
    with torch.inference_mode():
        for count, text_rows in ((1, 0), (8, 0), (32, 0), (32, 16), (64, 0)):
            rows = decode_rows(torch, count, args.hidden, device, random.Random(count), text_rows)
            ids = torch.randint(0, VOCAB, (count,), device=device)
            embeds = torch.randn(count, args.hidden, device=device).to(torch.bfloat16)
            hidden = torch.randn(count, args.hidden, device=device)
            a, b = in_turn(
                torch,
                lambda ids=ids, embeds=embeds, rows=rows: talker.preprocess_decode_batch_mrv2(
                    input_ids=ids, input_embeds=embeds, req_infos=rows
                ),
                lambda ids=ids, embeds=embeds, rows=rows: ours(torch, talker, ids, embeds, rows),
                args.calls,
            )
            c, d = in_turn(
                torch,
                lambda hidden=hidden, rows=rows: theirs_output(talker, hidden, rows),
                lambda rows=rows: steady_decode.async_chunk_outputs(torch, rows),
                args.calls,
            )
            print(
                f"{count:3d} rows ({text_rows:2d} fed text): decode preprocessing {a:7.1f} -> {b:6.1f} µs, "
                f"make_omni_output {c:7.1f} -> {d:6.1f} µs; saved {(a + c - b - d) / count:5.2f} µs a row",
                flush=True,
            )


if __name__ == "__main__":
    main()
