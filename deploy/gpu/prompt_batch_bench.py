"""Host time of a talker step's prompts on a GPU host: vllm-omni 0.30's own prompt builder
(`Qwen3TTSPromptEmbedsBuilder.build_prompt_embeds`, one call a request, as the talker's `preprocess` makes them) against
the service's (app/engines/omni/stage_plugins/prompt_batch.py, SPEECH_OMNI__PROMPT_BATCH: one pass over the step's
prompts, then one call a request), for k CustomVoice prompts a step, on random weights of the 0.6B talker's shapes and
the text tokenizer of a model folder; each step on fresh request states, the host's time from its first call to its
last (kernels queued, not waited for), median of N steps. With --busy-ms the GPU is kept busy that long before each
step (a talker step still running, as under asynchronous scheduling): a copy from pageable memory then waits for it.
Also the parts of one vllm-omni build, timed alone, and whether both give the same tensors (bit for bit).

    python deploy/gpu/prompt_batch_bench.py --model-dir DIR [--steps 200] [--busy-ms 0,10]

DIR holds a Qwen3-TTS config.json and its text tokenizer's files. vllm-omni's builder is imported where vllm-omni is
installed, else read from its wheel (--wheel) with stand-ins for the audio helpers it imports and CustomVoice does
not use.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
import types
import zipfile
from pathlib import Path
from typing import Any

BUILDER_MODULE = "vllm_omni/model_executor/models/qwen3_tts/prompt_embeds_builder.py"
TEXTS = (
    "Hello there, and welcome back to the show.",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally wakes up.",
    "Please hold while I transfer your call to the next available agent.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "Turn left in two hundred meters.",
    "Your order has shipped and should arrive on Thursday between nine and noon.",
    "Thanks!",
    "We measured every step of the pipeline twice, once cold and once warm, and wrote both numbers down.",
)
SPEAKERS = ("vivian", "ryan", "serena", "aiden")


def builder_module(wheel: str | None) -> Any:
    """vllm-omni's prompt_embeds_builder module: imported, or exec'd from the wheel with its audio imports stood in."""
    try:
        from vllm_omni.model_executor.models.qwen3_tts import prompt_embeds_builder

        return prompt_embeds_builder
    except ImportError:
        if wheel is None:
            raise
    stubs = {
        "soundfile": {},
        "vllm": {},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.multimodal": {},
        "vllm.multimodal.audio": {"AudioResampler": object},
        "vllm_omni": {},
        "vllm_omni.utils": {},
        "vllm_omni.utils.audio": {"mel_filter_bank": None},
    }
    for name, attributes in stubs.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for key, value in attributes.items():
            setattr(module, key, value)
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(BUILDER_MODULE).decode("utf-8")
    module = types.ModuleType("prompt_embeds_builder")
    exec(compile(source, BUILDER_MODULE, "exec"), module.__dict__)
    return module


def namespace(value: Any) -> Any:
    return types.SimpleNamespace(**value) if isinstance(value, dict) else value


def make_builder(torch: Any, module: Any, model_dir: Path, device: str) -> Any:
    """vllm-omni's builder over random weights of the talker's shapes (its text embedding, text projection, codec
    embedding and tts pad embedding, bfloat16, as the talker loads them)."""
    config = json.loads((model_dir / "config.json").read_text())
    talker = config["talker_config"]
    torch.manual_seed(0)
    text_hidden, hidden = int(talker["text_hidden_size"]), int(talker["hidden_size"])
    text_embedding = torch.nn.Embedding(int(talker["text_vocab_size"]), text_hidden)
    text_projection = torch.nn.Sequential(
        torch.nn.Linear(text_hidden, text_hidden, bias=True), torch.nn.SiLU(), torch.nn.Linear(text_hidden, hidden)
    )
    codec = torch.nn.Embedding(int(talker["vocab_size"]), hidden)
    for part in (text_embedding, text_projection, codec):
        part.to(device=device, dtype=torch.bfloat16)
    with torch.inference_mode():
        pad_ids = torch.tensor([[config["tts_pad_token_id"]]], device=device)
        pad = text_projection(text_embedding(pad_ids)).reshape(1, -1)
    return module.Qwen3TTSPromptEmbedsBuilder(
        config=namespace({k: v for k, v in config.items() if k != "talker_config"}),
        talker_config=namespace(talker),
        model_path=str(model_dir),
        text_embedding=text_embedding,
        text_projection=text_projection,
        codec_embed=codec,
        residual_code_embeddings=lambda: [],
        speaker_encoder=None,
        tts_pad_embed=pad,
        encode_ref_audio_batch=lambda *a, **k: [],
    )


def requests(count: int, offset: int, streaming: bool | None = None) -> list[dict[str, Any]]:
    """`count` CustomVoice request states as the talker's first prefill sees them."""
    rows = []
    for index in range(offset, offset + count):
        info: dict[str, Any] = {
            "task_type": ["CustomVoice"],
            "text": [TEXTS[index % len(TEXTS)]],
            "speaker": [SPEAKERS[index % len(SPEAKERS)]],
            "language": ["Auto" if index % 3 else "English"],
            "instruct": [""],
        }
        if streaming is not None:
            info["non_streaming_mode"] = [not streaming]
        rows.append(info)
    return rows


def step_time(torch: Any, run: Any, steps: int, busy: Any) -> float:
    """Median host ms of `run(step)`, with `busy()` queued on the GPU before each."""
    times = []
    for step in range(steps):
        torch.cuda.synchronize()
        if busy is not None:
            busy()
        started = time.perf_counter()
        run(step)
        times.append(time.perf_counter() - started)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--wheel")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--busy-ms", default="0,10")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import torch

    from app.engines.omni.stage_plugins import prompt_batch

    device = "cuda"
    module = builder_module(args.wheel)
    theirs = make_builder(torch, module, args.model_dir, device)
    ours = make_builder(torch, module, args.model_dir, device)
    batch = prompt_batch.PromptBatch(ours, module.build_assistant_text, torch)
    build = batch.wrap(ours.build_prompt_embeds)
    tok = theirs.get_text_tokenizer()
    ours.get_text_tokenizer()
    big = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    with torch.inference_mode():
        for streaming in (None, True):  # CustomVoice's default (the whole text in the prompt), then streaming text
            rows_a, rows_b = requests(8, 0, streaming), requests(8, 0, streaming)
            batch.build(rows_b)
            different = 0
            for a, b in zip(rows_a, rows_b, strict=True):
                want = theirs.build_prompt_embeds(task_type="CustomVoice", info_dict=a)
                got = build(task_type="CustomVoice", info_dict=b)
                same = all(
                    x is y or (x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y))
                    for x, y in zip(want, got, strict=True)
                )
                if not same:
                    different += 1
                    print(f"DIFFERENT: streaming={streaming} {a['text'][0][:30]!r}", flush=True)
            if different:
                sys.exit(f"{different} prompts not the same as vllm-omni's, streaming={streaming}: not timed")
            print(f"same tensors, streaming={streaming}: checked 8 prompts", flush=True)

        text = TEXTS[1]
        ids_cpu = tok(module.build_assistant_text(text), return_tensors="pt", padding=False)["input_ids"]
        ids = ids_cpu.to(device)
        parts = {
            "tokenizer call (1 text)": lambda _s: tok(module.build_assistant_text(text), return_tensors="pt"),
            "ids to GPU, pageable": lambda _s: ids_cpu.to(device=device),
            "speaker id torch.tensor(device=cuda)": lambda _s: torch.tensor([3065], device=device),
            "text embedding + projection (text rows)": lambda _s: theirs._text_projection(
                theirs._text_embedding(ids[:, 3:-5])
            ),
            "codec embedding (2 ids)": lambda _s: theirs._codec_embed(theirs._long_tensor([2148, 2149], device)),
            "cat of 3": lambda _s: torch.cat([ids, ids, ids], dim=1),
        }
        for busy_ms in (float(x) for x in args.busy_ms.split(",")):
            matmuls = max(0, round(busy_ms / 1.4))  # an 8192^3 bf16 product takes about 1.4 ms on an H200
            busy = (lambda n=matmuls: [big @ big for _ in range(n)]) if matmuls else None
            for name, run in parts.items():
                part_us = step_time(torch, run, args.steps, busy) * 1e3
                print(f"busy {busy_ms:4.1f} ms | part: {name:42s} {part_us:8.1f} µs", flush=True)
            for count in (1, 4, 8, 16):
                a = step_time(
                    torch,
                    lambda s, count=count: [
                        theirs.build_prompt_embeds(task_type="CustomVoice", info_dict=info)
                        for info in requests(count, s)
                    ],
                    args.steps,
                    busy,
                )

                def ours_step(s: int, count: int = count) -> None:
                    infos = requests(count, s)
                    batch.build(infos)
                    for info in infos:
                        build(task_type="CustomVoice", info_dict=info)

                b = step_time(torch, ours_step, args.steps, busy)
                print(
                    f"busy {busy_ms:4.1f} ms | {count:2d} prompts a step: vllm-omni {a:6.2f} ms ({a / count:5.2f} a "
                    f"prompt), batched {b:6.2f} ms ({b / count:5.2f} a prompt)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
