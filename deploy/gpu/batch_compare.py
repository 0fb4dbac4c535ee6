"""One batch of N utterances against each server's `POST /v1/audio/speech/batch` (vllm-omni 0.30's shape), timed,
each item decoded and its usage compared between the servers (issue #38's GPU part: this service against
`vllm serve --omni`).

The batch: N items (default 64) of varied texts (a few lengths, from a fixed seed) over shared defaults (voice, and
with `--frames F` the length fields `max_new_tokens: F + 1` and `ignore_eos: true`), each item with its own
`response_format` (wav, pcm and flac in turn). The same body goes to every target, `--repeat K` times interleaved
(A, B, A, B, ...). Per batch: the wall time, the answer's counts, and per item its status, the decoded audio (as the
load tool decodes a response: `loadtest.audio.decode`, pcm as s16le mono at `--pcm-rate`), its usage as the server
reported it, and with `--frames F` whether it holds exactly F x 1920 samples (mismatches are listed, never dropped).

    PYTHONPATH=$PWD python3 deploy/gpu/batch_compare.py --target service=http://127.0.0.1:8000 \
        --target vllm-omni=http://127.0.0.1:8005 --items 64 --frames 100 --repeat 3 --warmup 1 --out DIR

Writes DIR/results.json (everything, the request body included) and DIR/README.md (the tables, also printed).
Exit status: 0 when every item of every measured batch succeeded with the length asked for, 1 otherwise, 2 when
the arguments are wrong or DIR already holds results.

Shapes it adapts to: vllm-omni 0.30 answers an item's `error` as a string and this service as an OpenAI error object
(both are kept, the message compared); usage is compared field by field after flattening
(`input_token_details.text_tokens`), a field one server does not send being reported as such (vllm-omni 0.30 counts
the end token among the output tokens: one more per item than this service). Fields vllm-omni's
batch items do not know (`ignore_eos`) it drops unread: its length must come from its profile
(`bench_profile.py --frames F`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadtest.audio import decode

SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz codec frames (Qwen3-TTS)
FORMATS = ("wav", "pcm", "flac")
# words to build texts from (fixed, so that a seed gives the same batch anywhere)
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A batch of speech should come back whole, every item in its place.",
    "The train to the coast leaves at half past nine on weekdays.",
    "Numbers like three hundred and twelve are spelled out in full.",
    "She sells sea shells by the sea shore, or so the story goes.",
    "Every request is timed from the first byte sent to the last byte read.",
    "The weather tomorrow looks bright, with a light breeze in the afternoon.",
    "Reading aloud is slower than reading silently, and that is fine.",
    "Our meeting moved to Thursday, so the report can wait one more day.",
)
LENGTHS = (1, 2, 4)  # sentences per item: short, medium, long


@dataclass(frozen=True)
class Target:
    name: str
    url: str


def parse_target(value: str) -> Target:
    name, sep, url = value.partition("=")
    if not sep:  # a bare URL names itself
        name, url = value, value
    if not name or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"--target wants NAME=URL (http or https), not {value!r}")
    return Target(name, url.rstrip("/"))


def build_batch(args: argparse.Namespace) -> dict[str, Any]:
    """The request body: shared defaults, and N items each with its text and its own format (wav, pcm, flac in turn;
    wav is the batch's default, so its items leave the field out)."""
    rng = random.Random(args.seed)
    items: list[dict[str, Any]] = []
    for index in range(args.items):
        count = LENGTHS[index % len(LENGTHS)]
        text = " ".join(rng.sample(SENTENCES, count))
        item: dict[str, Any] = {"input": text}
        fmt = FORMATS[index % len(FORMATS)]
        if fmt != "wav":
            item["response_format"] = fmt
        items.append(item)
    body: dict[str, Any] = {"voice": args.voice, "response_format": "wav"}
    if args.model:
        body["model"] = args.model
    if args.language:
        body["language"] = args.language
    if args.frames is not None and args.length_fields:
        body["max_new_tokens"] = args.frames + 1  # the last token ends the utterance: no frame
        body["ignore_eos"] = True  # this service: exactly that many tokens; vllm-omni 0.30 drops it unread
    body.update(json.loads(args.extra_body) if args.extra_body else {})
    body["items"] = items
    return body


def item_format(body: dict[str, Any], index: int) -> str:
    return body["items"][index].get("response_format", body.get("response_format", "wav"))


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested usage as dotted fields: {"input_token_details": {"text_tokens": 7}} -> input_token_details.text_tokens."""
    if not isinstance(value, dict):
        return {prefix or "value": value}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten(inner, name) if isinstance(inner, dict) else {name: inner})
    return flat


def error_message(error: Any) -> str | None:
    """vllm-omni 0.30 sends the message alone, this service an OpenAI error object."""
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error)


def read_item(result: dict[str, Any], body: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    index = result.get("index")
    known = isinstance(index, int) and 0 <= index < len(body["items"])
    fmt = item_format(body, index) if known else None
    record: dict[str, Any] = {
        "index": index,
        "status": result.get("status"),
        "response_format": fmt,
        "media_type": result.get("media_type"),
        "chars": len(body["items"][index]["input"]) if known else None,
        "usage": result.get("usage"),
        "usage_flat": flatten(result["usage"]) if isinstance(result.get("usage"), dict) else None,
        "error": result.get("error"),
        "error_message": error_message(result.get("error")),
    }
    if result.get("status") == "success" and result.get("audio_data") and fmt is not None:
        data = base64.b64decode(result["audio_data"])
        record["bytes"] = len(data)
        record["audio_sha256"] = hashlib.sha256(data).hexdigest()
        try:
            audio = decode(data, fmt, args.pcm_rate)
            samples, rate = len(audio.samples), audio.sample_rate
            record.update(samples=samples, sample_rate=rate, duration_s=samples / rate if rate else None)
        except Exception as exc:  # an undecodable file is the item's finding, not the tool's failure
            record["decode_error"] = f"{type(exc).__name__}: {exc}"
    if args.frames is not None and record["status"] == "success":
        expected = args.frames * SAMPLES_PER_FRAME
        record["expected_samples"] = expected
        record["length_ok"] = record.get("samples") == expected and record.get("sample_rate") == 24_000
    return record


def run_batch(client: httpx.Client, target: Target, body: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    run: dict[str, Any] = {"target": target.name, "url": target.url}
    try:
        response = client.post(f"{target.url}/v1/audio/speech/batch", json=body, timeout=args.timeout)
    except httpx.HTTPError as exc:
        run.update(wall_s=time.perf_counter() - started, http_status=None, error=f"{type(exc).__name__}: {exc}")
        return run
    run["wall_s"] = time.perf_counter() - started  # the whole answer read: one JSON, every item in it
    run["http_status"] = response.status_code
    try:
        answer = response.json()
    except ValueError:
        run["error"] = response.text[:2000]
        return run
    if response.status_code != 200 or not isinstance(answer, dict) or "results" not in answer:
        run["error"] = answer
        return run
    items = [read_item(result, body, args) for result in answer["results"]]
    run.update({key: answer.get(key) for key in ("id", "total", "succeeded", "failed")})
    run["items"] = sorted(items, key=lambda item: item["index"] if isinstance(item["index"], int) else -1)
    run["anomalies"] = anomalies(run, answer, len(body["items"]))
    return run


def anomalies(run: dict[str, Any], answer: dict[str, Any], sent: int) -> list[str]:
    """What in the answer does not add up: missing or repeated indexes, counts that disagree with the items."""
    found: list[str] = []
    indexes = [item["index"] for item in run["items"]]
    if sorted(i for i in indexes if isinstance(i, int)) != list(range(sent)):
        found.append(f"indexes {indexes} are not 0..{sent - 1} once each")
    ok = sum(1 for item in run["items"] if item["status"] == "success")
    for key, value in (("total", len(run["items"])), ("succeeded", ok), ("failed", len(run["items"]) - ok)):
        if answer.get(key) != value:
            found.append(f"`{key}` says {answer.get(key)}, the items say {value}")
    return found


def item_ok(item: dict[str, Any]) -> bool:
    return (
        item["status"] == "success"
        and "decode_error" not in item
        and (item.get("samples") or 0) > 0
        and item.get("length_ok", True)
    )


def p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(target: Target, runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [run["wall_s"] for run in runs if "items" in run]
    ok = [sum(1 for i in run.get("items", []) if i["status"] == "success") for run in runs]
    failed = [sum(1 for i in run.get("items", []) if i["status"] != "success") for run in runs]
    audio = [sum(i.get("duration_s") or 0.0 for i in run.get("items", []) if i["status"] == "success") for run in runs]
    ratio = [a / run["wall_s"] for a, run in zip(audio, runs, strict=True) if "items" in run and run["wall_s"] > 0]
    usage_totals = []
    for run in runs:
        totals: dict[str, float] = {}
        for item in run.get("items", []):
            for field, value in (item.get("usage_flat") or {}).items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    totals[field] = totals.get(field, 0) + value
        usage_totals.append(totals)
    return {
        "target": target.name,
        "url": target.url,
        "batches": len(runs),
        "batches_answered": len(walls),
        "wall_s": walls,
        "wall_s_p50": p50(walls),
        "items_ok": ok,
        "items_failed": failed,
        "audio_s": audio,
        "audio_s_per_wall_s": ratio,
        "audio_s_per_wall_s_p50": p50(ratio),
        "usage_totals": usage_totals,
        "usage_totals_same_every_batch": all(t == usage_totals[0] for t in usage_totals),
        "length_mismatches": sum(1 for run in runs for i in run.get("items", []) if i.get("length_ok") is False),
        "failed_batches": [run.get("error") for run in runs if "items" not in run],
    }


def compare_usage(reference: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Item by item, field by field: the usage of `other`'s first answered batch against `reference`'s."""
    ref_items = {i["index"]: i for i in reference.get("items", [])}
    other_items = {i["index"]: i for i in other.get("items", [])}
    rows, fields = [], {}
    for index in sorted(set(ref_items) | set(other_items), key=lambda i: (not isinstance(i, int), str(i))):
        a = (ref_items.get(index) or {}).get("usage_flat") or {}
        b = (other_items.get(index) or {}).get("usage_flat") or {}
        differences = []
        for field in sorted(set(a) | set(b)):
            stats = fields.setdefault(field, {"equal": 0, "differ": 0, "only_reference": 0, "only_other": 0})
            if field not in b:
                stats["only_reference"] += 1
                differences.append({"field": field, "reference": a[field], "other": None, "kind": "only_reference"})
            elif field not in a:
                stats["only_other"] += 1
                differences.append({"field": field, "reference": None, "other": b[field], "kind": "only_other"})
            elif a[field] != b[field]:
                stats["differ"] += 1
                differences.append({"field": field, "reference": a[field], "other": b[field], "kind": "differ"})
            else:
                stats["equal"] += 1
        rows.append({"index": index, "reference": a, "other": b, "differences": differences})
    return {
        "reference": reference["target"],
        "other": other["target"],
        "items": rows,
        "fields": fields,
        "items_differing": sum(1 for row in rows if row["differences"]),
    }


def fmt_num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def triple(usage: dict[str, Any]) -> str:
    return "/".join(fmt_num(usage.get(k)) for k in ("input_tokens", "output_tokens", "total_tokens"))


def markdown(
    meta: dict[str, Any], summaries: list[dict[str, Any]], comparisons: list[dict[str, Any]], runs: list[dict[str, Any]]
) -> str:
    lines = [
        f"# Batch of {meta['items']} items: {', '.join(s['target'] for s in summaries)}",
        "",
        f"{meta['items']} items (formats {', '.join(FORMATS)} in turn; texts of {', '.join(map(str, LENGTHS))} "
        f"sentences, seed {meta['seed']}), voice `{meta['voice']}`, {meta['repeat']} measured batch(es) per target "
        f"interleaved after {meta['warmup']} warm-up batch(es); "
        + (
            f"every item {meta['frames']} frames ({meta['frames'] * SAMPLES_PER_FRAME} samples)."
            if meta["frames"] is not None
            else "lengths not checked (no `--frames`)."
        ),
        f"Shared fields: `{json.dumps({k: v for k, v in meta['request_defaults'].items()})}`.",
        "",
        "| target | wall s p50 | wall s (each batch) | items ok | failed | audio s | audio s / wall s p50 "
        "| length mismatches | usage totals (first batch) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        totals = s["usage_totals"][0] if s["usage_totals"] else {}
        usage = ", ".join(f"{k} {fmt_num(v)}" for k, v in sorted(totals.items())) or "–"
        if not s["usage_totals_same_every_batch"]:
            usage += " (differs between batches)"
        lines.append(
            f"| {s['target']} | {fmt_num(s['wall_s_p50'])} | {' / '.join(fmt_num(w) for w in s['wall_s']) or '–'} "
            f"| {'/'.join(map(str, s['items_ok']))} | {'/'.join(map(str, s['items_failed']))} "
            f"| {'/'.join(fmt_num(a, 1) for a in s['audio_s'])} | {fmt_num(s['audio_s_per_wall_s_p50'])} "
            f"| {s['length_mismatches']} | {usage} |"
        )
    problems = []
    for run in runs:
        where = f"{run['target']} batch {run['repeat']}"
        if "items" not in run:
            problems.append(f"- {where}: HTTP {run.get('http_status')}: `{json.dumps(run.get('error'))[:300]}`")
            continue
        problems += [f"- {where}: {a}" for a in run["anomalies"]]
        for item in run["items"]:
            if item["status"] != "success":
                problems.append(f"- {where} item {item['index']}: failed: {item['error_message']}")
            elif "decode_error" in item:
                problems.append(f"- {where} item {item['index']} ({item['response_format']}): {item['decode_error']}")
            elif item.get("length_ok") is False:
                problems.append(
                    f"- {where} item {item['index']} ({item['response_format']}): {item.get('samples')} samples at "
                    f"{item.get('sample_rate')} Hz, expected {item['expected_samples']} at 24000 "
                    f"({fmt_num((item.get('samples') or 0) / SAMPLES_PER_FRAME)} frames)"
                )
    lines += ["", "## Problems", ""] + (
        problems
        or [
            "None: every item succeeded"
            + (" with exactly the frames asked for." if meta["frames"] is not None else ".")
        ]
    )
    for comparison in comparisons:
        ref, other = comparison["reference"], comparison["other"]
        lines += [
            "",
            f"## Usage per item: {other} against {ref} (first measured batch of each)",
            "",
            f"{comparison['items_differing']} of {len(comparison['items'])} items differ.",
            "",
            f"| field | equal | differ | only {ref} | only {other} |",
            "| --- | --- | --- | --- | --- |",
        ]
        for field, stats in sorted(comparison["fields"].items()):
            counts = (stats["equal"], stats["differ"], stats["only_reference"], stats["only_other"])
            lines.append(f"| {field} | " + " | ".join(map(str, counts)) + " |")
        lines += [
            "",
            f"| item | format | chars | {ref} in/out/total | {other} in/out/total | differences |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        formats = {
            i["index"]: i for i in next((r for r in runs if r["target"] == ref and "items" in r), {}).get("items", [])
        }
        for row in comparison["items"]:
            item = formats.get(row["index"], {})
            diffs = (
                "; ".join(
                    f"{d['field']}: {fmt_num(d['reference'])} vs {fmt_num(d['other'])}"
                    if d["kind"] == "differ"
                    else f"{d['field']} only from {ref if d['kind'] == 'only_reference' else other}"
                    for d in row["differences"]
                )
                or "same"
            )
            lines.append(
                f"| {row['index']} | {item.get('response_format', '–')} | {item.get('chars', '–')} "
                f"| {triple(row['reference'])} | {triple(row['other'])} | {diffs} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--target", type=parse_target, action="append", required=True, help="NAME=URL, repeatable")
    parser.add_argument("--items", type=int, default=64, help="items in the batch (default 64)")
    parser.add_argument("--repeat", type=int, default=1, help="measured batches per target, interleaved (default 1)")
    parser.add_argument("--warmup", type=int, default=0, help="unmeasured batches per target first (default 0)")
    parser.add_argument("--frames", type=int, help="every item exactly F codec frames (F x 1920 samples at 24 kHz)")
    parser.add_argument(
        "--length-fields",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --frames: send max_new_tokens F+1 and ignore_eos true (default); --no-length-fields checks the "
        "length only, for servers whose profile fixes it",
    )
    parser.add_argument("--voice", default="vivian")
    parser.add_argument("--language", help="the batch's `language` (omitted by default)")
    parser.add_argument("--model", help="the batch's `model` (omitted by default: each server's own)")
    parser.add_argument("--extra-body", help="JSON object merged into the batch's shared fields")
    parser.add_argument("--seed", type=int, default=38, help="seed of the texts (default 38)")
    parser.add_argument("--pcm-rate", type=int, default=24_000, help="sample rate of pcm items (default 24000)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per batch (default 1800)")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and README.md")
    args = parser.parse_args(argv)
    names = [t.name for t in args.target]
    if len(set(names)) != len(names):
        parser.error(f"target names must differ: {names}")
    if args.items < 1 or args.repeat < 1 or args.warmup < 0 or (args.frames is not None and args.frames < 1):
        parser.error("--items, --repeat and --frames must be at least 1, --warmup at least 0")
    if (args.out / "results.json").exists() or (args.out / "README.md").exists():
        parser.error(f"{args.out} already holds results: name another folder")
    body = build_batch(args)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    runs: list[dict[str, Any]] = []
    with httpx.Client() as client:
        for round_ in range(-args.warmup, args.repeat):
            for target in args.target:  # interleaved: A, B, A, B
                run = run_batch(client, target, body, args)
                state = "warm-up" if round_ < 0 else f"batch {round_}"
                print(
                    f"{target.name} {state}: HTTP {run.get('http_status')} in {run['wall_s']:.2f} s, "
                    f"{run.get('succeeded', 0)} ok, {run.get('failed', '?')} failed",
                    file=sys.stderr,
                )
                if round_ >= 0:
                    runs.append({"repeat": round_, **run})
    summaries = [summarize(t, [r for r in runs if r["target"] == t.name]) for t in args.target]
    first = {t.name: next((r for r in runs if r["target"] == t.name and "items" in r), None) for t in args.target}
    reference = first[args.target[0].name]
    comparisons = [
        compare_usage(reference, first[t.name])
        for t in args.target[1:]
        if reference is not None and first[t.name] is not None
    ]
    meta = {
        "items": args.items,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "frames": args.frames,
        "seed": args.seed,
        "voice": args.voice,
        "targets": [{"name": t.name, "url": t.url} for t in args.target],
        "request_defaults": {k: v for k, v in body.items() if k != "items"},
        "started": started,
    }
    results = {"meta": meta, "request": body, "summaries": summaries, "usage_comparisons": comparisons, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(meta, summaries, comparisons, runs)
    (args.out / "README.md").write_text(table)
    print(table)
    every_ok = all("items" in run and not run["anomalies"] and all(map(item_ok, run["items"])) for run in runs)
    return 0 if every_ok else 1


if __name__ == "__main__":
    sys.exit(main())
