"""Results: aggregate per target and level, then results.json, summary.md, PNG plots and the console table."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from loadtest.measure import RequestResult
from loadtest.playback import EPSILON_S
from loadtest.runner import LevelRun, runs_as_waves, steady_minimum
from loadtest.stats import low_spread, ratio, spread, summarize
from loadtest.ws import UtteranceResult


def error_groups(results: list[RequestResult]) -> list[dict[str, Any]]:
    """Failed requests grouped by (status, code), most frequent first, each with the first message seen for it."""
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for result in results:
        if result.ok:
            continue
        key = (result.status, result.error_code or "unknown")
        group = groups.setdefault(key, {"status": key[0], "code": key[1], "count": 0, "message": None})
        group["count"] += 1
        if group["message"] is None:
            group["message"] = result.error_message
    return sorted(groups.values(), key=lambda g: (-g["count"], g["status"], g["code"]))


def playback_summary(ok: list[RequestResult], buffer_s: float) -> dict[str, Any]:
    """The listener's view over the requests whose format maps bytes to playing time (see loadtest.playback)."""
    heard = [(r.stalls, r.stalled_s) for r in ok if r.stalls is not None and r.stalled_s is not None]
    first_stalls = [r.stalls_at_audio_s[0] for r in ok if r.stalls_at_audio_s]
    return {
        "buffer_s": buffer_s,
        "requests": len(heard),  # fewer than ok only where the format gave no byte-to-time mapping
        "stalled_share": sum(stalls > 0 for stalls, _ in heard) / len(heard) if heard else None,
        "stalls": spread([float(stalls) for stalls, _ in heard]),
        "stalled_s": spread([stalled for _, stalled in heard]),
        # where in the audio a stream first ran dry: early (a window schedule's first windows) or late (capacity)
        "first_stall_at_audio_s": spread(first_stalls),
        # the same, as the most common places (to 10 ms): with fixed window sizes, each is the end of one window
        "first_stall_places": common_places(first_stalls),
        # how close streams came to running dry (the least audio in hand before their last arrival; < 0: a wait):
        # a margin that stall counts alone do not show, e.g. between two window schedules where none ran dry
        "least_in_hand_s": low_spread([r.least_in_hand_s for r in ok if r.least_in_hand_s is not None]),
        # each stream's largest deficit (uninterrupted minus its first audio): the time-measured buffer a listener
        # starting at the first audio would need; with no buffer, the same as the stalled time
        "deficit_s": spread([r.deficit_s for r in ok if r.deficit_s is not None]),
    }


def ran_dry_share(ok: list[RequestResult]) -> float | None:
    """The share of streams a listener starting at the first audio would hear run dry (deficit over the player's
    float tolerance); None where no stream could be modelled."""
    deficits = [r.deficit_s for r in ok if r.deficit_s is not None]
    return sum(deficit > EPSILON_S for deficit in deficits) / len(deficits) if deficits else None


def common_places(positions: list[float], most: int = 3) -> list[dict[str, float | int]]:
    """The `most` most common positions (seconds, to 10 ms) with how many streams first ran dry there."""
    counts = collections.Counter(round(position, 2) for position in positions)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:most]
    return [{"at_audio_s": place, "streams": count} for place, count in ranked]


def text_stream_summary(ok: list[UtteranceResult]) -> dict[str, Any]:
    """Utterances of streamed text: how long the text took to send, how many sentences were spoken, and the silence
    between sentences (one figure per join, 0 where the next sentence came in time)."""
    gaps = [gap for r in ok for gap in r.gaps_s]
    return {
        "utterances": len(ok),
        "sentences": sum(r.sentences for r in ok),
        "timestamped_sentences": sum(r.timestamped_sentences for r in ok),
        "joins": len(gaps),
        "gapped_share": sum(gap > 0 for gap in gaps) / len(gaps) if gaps else None,
        "gap_s": spread(gaps),
        "text_send_s": summarize([r.text_send_s for r in ok if r.text_send_s is not None]),
        "first_sentence_sent_s": summarize(
            [r.first_sentence_sent_s for r in ok if r.first_sentence_sent_s is not None]
        ),
        "connect_s": summarize([r.connect_s for r in ok if r.connect_s is not None]),
    }


def _request_record(r: RequestResult) -> dict[str, Any]:
    record = {
        "status": r.status,
        "ok": r.ok,
        "error_code": r.error_code,
        "error_message": r.error_message,
        "ttfa_s": r.ttfa_s,
        "e2e_s": r.e2e_s,
        "audio_s": r.audio_s,
        "samples": r.samples,
        "sample_rate": r.sample_rate,
        "bytes": r.bytes,
        "rtf": r.rtf,
        "playback_start_s": r.playback_start_s,
        "stalls": r.stalls,
        "stalled_s": r.stalled_s,
        "stalls_at_audio_s": None if r.stalls_at_audio_s is None else list(r.stalls_at_audio_s),
        "least_in_hand_s": r.least_in_hand_s,
        "uninterrupted_s": r.uninterrupted_s,
        "deficit_s": r.deficit_s,
        "audio_arrivals": None
        if r.audio_arrivals is None
        else [[round(at, 4), round(audio, 4)] for at, audio in r.audio_arrivals],
    }
    if isinstance(r, UtteranceResult):
        record |= {
            "connect_s": r.connect_s,
            "text_send_s": r.text_send_s,
            "first_sentence_sent_s": r.first_sentence_sent_s,
            "sentences": r.sentences,
            "timestamped_sentences": r.timestamped_sentences,
            "gaps_s": r.gaps_s,
        }
    return record


def throughput(run: LevelRun, ok: list[RequestResult]) -> dict[str, Any]:
    """Requests and audio seconds per second: in the steady window (loadtest.schedule: the load held, ramp-up and
    drain excluded) where it counted enough answers, else over the wall time (`throughput_basis` says which). The
    wall-clock figures are always there too."""
    wall = run.wall_s
    wall_rps = len(ok) / wall if wall > 0 else None
    wall_audio = sum(r.audio_s or 0.0 for r in ok) / wall if wall > 0 else None
    held = run.held_s > 0 and run.finished_while_held >= steady_minimum(run.mode, run.level)
    return {
        "throughput_rps": run.finished_while_held / run.held_s if held else wall_rps,
        "audio_throughput": run.audio_s_while_held / run.held_s if held else wall_audio,
        "throughput_basis": "steady" if held else "wall",
        "throughput_wall_rps": wall_rps,
        "audio_throughput_wall": wall_audio,
        "throughput_held_s": run.held_s,
        "throughput_finished_while_held": run.finished_while_held,
    }


def aggregate(run: LevelRun, wer: float | None, playback_buffer_s: float = 0.0) -> dict[str, Any]:
    ok = [r for r in run.results if r.ok]
    errors_by_status: dict[str, int] = {}
    errors_by_code: dict[str, int] = {}
    for result in run.results:
        if not result.ok:
            errors_by_status[str(result.status)] = errors_by_status.get(str(result.status), 0) + 1
            code = result.error_code or "unknown"
            errors_by_code[code] = errors_by_code.get(code, 0) + 1
    audio_total = sum(r.audio_s or 0.0 for r in ok)
    streamed = any(isinstance(r, UtteranceResult) for r in run.results)
    utterances = [r for r in ok if isinstance(r, UtteranceResult)]
    return {
        "target": run.target.index,
        "url": run.target.url,
        "replicas": list(run.target.replicas),  # further URLs the requests went to in turn
        "model": run.target.model,
        "voice": run.target.voice,
        run.mode: run.level,
        "concurrency_achieved": run.peak_in_flight,
        "requests": len(run.results),
        "ok": len(ok),
        "errors": len(run.results) - len(ok),
        "errors_by_status": errors_by_status,
        "errors_by_code": errors_by_code,
        "error_groups": error_groups(run.results),
        # the headline: when a real-time listener could start and never run dry (TTFA + the largest deficit), and
        # the share of streams that ran dry after their first audio; TTFA alone hides a stream that starts early
        # and then stalls
        "uninterrupted_s": summarize([r.uninterrupted_s for r in ok if r.uninterrupted_s is not None]),
        "ran_dry_share": ran_dry_share(ok),
        "ttfa_s": summarize([r.ttfa_s for r in ok if r.ttfa_s is not None]),
        "e2e_s": summarize([r.e2e_s for r in ok if r.e2e_s is not None]),
        "rtf": summarize([r.rtf for r in ok if r.rtf is not None]),
        "audio_seconds_total": audio_total,
        "wall_s": run.wall_s,
        **throughput(run, ok),
        "wer": wer,
        "playback": playback_summary(ok, playback_buffer_s),
        **({"text_stream": text_stream_summary(utterances)} if streamed else {}),
        **({"warmup": warmup_summary(run)} if run.warmup_sent else {}),
        "per_request": [_request_record(r) for r in run.results],
    }


def warmup_summary(run: LevelRun) -> dict[str, Any]:
    """The level's warm-up: its requests, and those that failed (then the level was measured before every batch
    size had paid its first-time costs)."""
    return {
        "requests": run.warmup_sent,
        "failed": len(run.warmup_failures),
        "error_groups": error_groups(run.warmup_failures),
    }


def level_of(run: dict[str, Any]) -> float:
    """A run's level: its concurrency (closed loop) or its rate (open loop)."""
    return run.get("concurrency", run.get("rate"))


def _stat(run: dict[str, Any], name: str, stat: str) -> float | None:
    """A figure of a run that results written before it was recorded lack (then None, shown as –)."""
    return (run.get(name) or {}).get(stat)


def ab_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every other target against target 0, per level: < 1 means faster (or, for throughput, less)."""
    base = {level_of(r): r for r in runs if r["target"] == 0}
    out = []
    for run in runs:
        reference = base.get(level_of(run))
        if run["target"] == 0 or reference is None:
            continue
        out.append(
            {
                "target": run["target"],
                "level": level_of(run),
                "uninterrupted_p50": ratio(
                    _stat(run, "uninterrupted_s", "p50"), _stat(reference, "uninterrupted_s", "p50")
                ),
                "uninterrupted_p95": ratio(
                    _stat(run, "uninterrupted_s", "p95"), _stat(reference, "uninterrupted_s", "p95")
                ),
                "ttfa_p50": ratio(run["ttfa_s"]["p50"], reference["ttfa_s"]["p50"]),
                "ttfa_p95": ratio(run["ttfa_s"]["p95"], reference["ttfa_s"]["p95"]),
                "e2e_p50": ratio(run["e2e_s"]["p50"], reference["e2e_s"]["p50"]),
                "rtf_p50": ratio(run["rtf"]["p50"], reference["rtf"]["p50"]),
                **throughput_ratio(run, reference),
            }
        )
    return out


def steady(run: dict[str, Any]) -> bool:
    """Whether a run's req/s is its steady-state figure (results written before it was recorded: wall clock)."""
    return run.get("throughput_basis") == "steady"


def throughput_ratio(run: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """req/s against the reference's; where only one of the two is a steady figure, both wall-clock ones, so that
    the ratio compares like with like."""
    if steady(run) and steady(reference):
        return {"throughput": ratio(run["throughput_rps"], reference["throughput_rps"]), "throughput_basis": "steady"}
    walls = [r.get("throughput_wall_rps", r["throughput_rps"]) for r in (run, reference)]
    return {"throughput": ratio(*walls), "throughput_basis": "wall"}


def _rate(value: float | None, basis_steady: bool, digits: int = 2) -> str:
    """A throughput cell: marked * where it is the wall-clock figure."""
    return _num(value, digits) + ("" if basis_steady or value is None else "*")


# what req/s counts, per mode (loadtest.schedule's steady window)
HELD = {"concurrency": "while the level's concurrency was held", "rate": "from the first answer to the end of arrivals"}


def throughput_note(mode: str) -> str:
    """The footnote under the table: what req/s counts."""
    return (
        f"req/s and audio s/s: answers that finished {HELD[mode]} (ramp-up and drain excluded); * = too short a "
        "window, wall clock (all answers over the whole run)."
    )


def ms(value: float | None) -> str:
    """Seconds as whole milliseconds for a Markdown cell; – where there is no value."""
    return "–" if value is None else f"{value * 1000:.0f}"


def _places(places: list[dict[str, float | int]] | None) -> str:
    return ", ".join(f"{ms(p['at_audio_s'])} ({p['streams']})" for p in places or []) or "–"


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_markdown(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    mode = "concurrency" if any("concurrency" in r for r in runs) else "rate"
    lines = [f"# Speech load test — {meta['started_at']}", ""]
    if meta.get("text_rate"):
        lines += [
            f"- WebSocket `/v1/audio/speech/stream`, the text of each utterance sent at {meta['text_rate']:g} "
            "tokens (words) per second, one connection per utterance; TTFA from the send of the text that completed "
            "the first sentence to its first audio",
            f"- format: `{meta['response_format']}`, texts: {meta['texts']}, utterances per level: "
            f"{meta['requests']}, warm-up: {meta['warmup']}",
        ]
    elif meta.get("mode") == "rate":  # the open loop sends what its arrivals bring, with no warm-up
        lines += [
            f"- format: `{meta['response_format']}`, stream format: `{meta['stream_format']}`, "
            f"texts: {meta['texts']}, Poisson arrivals for {meta['duration_s']:g} s per target and rate, no warm-up"
        ]
    else:
        lines += [
            f"- format: `{meta['response_format']}`, stream format: `{meta['stream_format']}`, "
            f"texts: {meta['texts']}, requests per level: {meta['requests']}, warm-up: {meta['warmup']}"
        ]
    if meta.get("stagger_s"):
        lines.append(f"- closed loop: the workers started one after another over {meta['stagger_s']:g} s per round")
    waves = sorted(
        {r["concurrency"] for r in runs if "concurrency" in r and runs_as_waves(r["concurrency"], meta["requests"],
                                                                                 meta.get("rounds") or 1)}
    )  # fmt: skip
    if waves:
        lines.append(
            f"- concurrency {', '.join(map(str, waves))}: fewer than two requests per worker and round, so "
            "each round there is a wave of arrivals onto an idle server, not a sustained load (for one: --requests "
            "of at least 2 x rounds x the level)"
        )
    for target in meta["targets"]:
        lines.append(f"- target {target['label']} — model `{target['model']}`, voice `{target['voice']}`")
    lines.append("")
    lines += [
        "Uninterrupted: the time from the request until a real-time listener could start and never run dry (TTFA plus "
        "the stream's largest deficit); ran dry: the streams a listener starting at the first audio would hear stop.",
        "",
    ]
    header = (
        f"| target | {mode} | ok | errors | uninterrupted p50 ms | p95 | ran dry "
        "| TTFA mean ms | p50 | p90 | p95 | p99 | E2E p50 ms | E2E p95 ms | RTF p50 | req/s | audio s/s | WER |"
    )
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for run in runs:
        t, e, r = run["ttfa_s"], run["e2e_s"], run["rtf"]
        dry = run.get("ran_dry_share")  # results written before it was recorded lack it, and uninterrupted_s
        lines.append(
            f"| {meta['targets'][run['target']]['label']} | {level_of(run):g} | {run['ok']} | {run['errors']} "
            f"| {ms(_stat(run, 'uninterrupted_s', 'p50'))} | {ms(_stat(run, 'uninterrupted_s', 'p95'))} "
            f"| {'–' if dry is None else f'{dry:.0%}'} "
            f"| {ms(t['mean'])} | {ms(t['p50'])} | {ms(t['p90'])} | {ms(t['p95'])} | {ms(t['p99'])} "
            f"| {ms(e['p50'])} | {ms(e['p95'])} | {_num(r['p50'], 3)} | {_rate(run['throughput_rps'], steady(run))} "
            f"| {_rate(run['audio_throughput'], steady(run), 1)} | {_num(run['wer'], 3)} |"
        )
    lines += ["", throughput_note(mode)]
    ratios = ab_ratios(runs)
    if ratios:
        lines += [
            "",
            "## A/B ratios (target ÷ A, same level, interleaved runs)",
            "",
            f"| target | {mode} | uninterrupted p50 | uninterrupted p95 | TTFA p50 | TTFA p95 | E2E p50 | RTF p50 "
            "| throughput |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in ratios:
            lines.append(
                f"| {meta['targets'][row['target']]['label']} | {row['level']:g} "
                f"| {_num(row.get('uninterrupted_p50'))} | {_num(row.get('uninterrupted_p95'))} "
                f"| {_num(row['ttfa_p50'])} | {_num(row['ttfa_p95'])} | {_num(row['e2e_p50'])} "
                f"| {_num(row['rtf_p50'])} | {_rate(row['throughput'], row.get('throughput_basis') == 'steady')} |"
            )
        lines += ["", "throughput: req/s as above; * = wall clock for both, where either window was too short."]
    lines += playback_markdown(meta, runs, mode)
    lines += gaps_markdown(meta, runs, mode)
    errors = [r for r in runs if r["errors"]]
    if errors:
        lines += ["", "## Errors", ""]
        for run in errors:
            lines.append(f"- {meta['targets'][run['target']]['label']} at {mode} {level_of(run):g}:")
            lines += _error_lines(run["error_groups"])
    cold = [r for r in runs if (r.get("warmup") or {}).get("failed")]
    if cold:
        lines += ["", "## Warm-up errors", ""]
        for run in cold:
            warmup = run["warmup"]
            lines.append(
                f"- {meta['targets'][run['target']]['label']} at {mode} {level_of(run):g}: {warmup['failed']} of its "
                f"{warmup['requests']} warm-up requests failed, so it may have been measured before every batch size "
                "had paid its first-time costs:"
            )
            lines += _error_lines(warmup["error_groups"])
    return "\n".join(lines) + "\n"


def _error_lines(groups: list[dict[str, Any]]) -> list[str]:
    lines = []
    for group in groups:
        status = "client" if group["status"] == 0 else group["status"]
        message = (group["message"] or "no message").replace("\n", " ")
        lines.append(f"  - {status} {group['code']} ×{group['count']}: {message}")
    return lines


def playback_markdown(meta: dict[str, Any], runs: list[dict[str, Any]], mode: str) -> list[str]:
    buffer_ms = meta.get("playback_buffer_ms", 0)
    start = "at its first audio" if not buffer_ms else f"once {buffer_ms:g} ms of audio have arrived"
    inside = (
        "; stalls inside sentences, the silence between them is under Sentence gaps" if meta.get("text_rate") else ""
    )
    lines = [
        "",
        f"## Playback (a listener who starts {start} and plays in real time{inside})",
        "",
        f"| target | {mode} | heard | stalled requests | stalls p50 | p95 | max | stalled ms p50 | p95 | max "
        "| first ran dry at audio ms p50 | p95 | most often at ms (streams) | least in hand ms p50 | p5 "
        "| largest deficit ms p50 | p95 | max |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        playback = run["playback"]
        share = playback["stalled_share"]
        stalls, stalled = playback["stalls"], playback["stalled_s"]
        first = playback.get("first_stall_at_audio_s") or {}  # results written before it was recorded lack it
        least = playback.get("least_in_hand_s") or {}  # the same
        deficit = playback.get("deficit_s") or {}  # the same
        lines.append(
            f"| {meta['targets'][run['target']]['label']} | {level_of(run):g} | {playback['requests']} "
            f"| {'–' if share is None else f'{share:.0%}'} | {_num(stalls['p50'], 0)} | {_num(stalls['p95'], 1)} "
            f"| {_num(stalls['max'], 0)} | {ms(stalled['p50'])} | {ms(stalled['p95'])} | {ms(stalled['max'])} "
            f"| {ms(first.get('p50'))} | {ms(first.get('p95'))} | {_places(playback.get('first_stall_places'))} "
            f"| {ms(least.get('p50'))} | {ms(least.get('p5'))} "
            f"| {ms(deficit.get('p50'))} | {ms(deficit.get('p95'))} | {ms(deficit.get('max'))} |"
        )
    return lines


def gaps_markdown(meta: dict[str, Any], runs: list[dict[str, Any]], mode: str) -> list[str]:
    streamed = [run for run in runs if "text_stream" in run]
    if not streamed:
        return []
    lines = [
        "",
        "## Sentence gaps (silence the listener above hears between one sentence's end and the next one's start)",
        "",
        f"| target | {mode} | utterances | sentences | joins | joins with silence | gap ms p50 | p95 | max "
        "| text sent in s p50 | first sentence sent at s p50 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in streamed:
        stream = run["text_stream"]
        share, gap = stream["gapped_share"], stream["gap_s"]
        lines.append(
            f"| {meta['targets'][run['target']]['label']} | {level_of(run):g} | {stream['utterances']} "
            f"| {stream['sentences']} | {stream['joins']} | {'–' if share is None else f'{share:.0%}'} "
            f"| {ms(gap['p50'])} | {ms(gap['p95'])} | {ms(gap['max'])} | {_num(stream['text_send_s']['p50'])} "
            f"| {_num(stream['first_sentence_sent_s']['p50'])} |"
        )
    return lines


def _level_axis(axis: Any, runs: list[dict[str, Any]], label: str) -> None:
    levels = sorted({level_of(r) for r in runs})
    if levels and levels[0] > 0 and levels[-1] / levels[0] >= 8:
        axis.set_xscale("log", base=2)  # 1, 4, 8, 16, 32 spread evenly
    axis.set_xticks(levels, [f"{level:g}" for level in levels])
    axis.set_xlabel(label)


def _nan(value: float | None, scale: float = 1.0) -> float:
    return float("nan") if value is None else value * scale


def _buffer_label(meta: dict[str, Any]) -> str:
    buffer_ms = meta.get("playback_buffer_ms", 0)
    return "playing from the first audio" if not buffer_ms else f"{buffer_ms:g} ms buffer"


def plot(meta: dict[str, Any], runs: list[dict[str, Any]], out: Path) -> dict[str, Path]:
    """PNG charts per level: {"uninterrupted_plot", "ttfa_plot", "throughput_plot", "stalls_plot",
    "stalled_share_plot"}, and "gaps_plot" for streamed text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xlabel = "concurrency" if any("concurrency" in r for r in runs) else "arrival rate (req/s)"
    streamed = any("text_stream" in r for r in runs)
    # (file, title, y label, [(series label, line style, value of a run)])
    charts = [
        (
            "uninterrupted.png",
            "Time to uninterrupted audio (TTFA + largest deficit)"
            + (" from the first complete sentence" if streamed else ""),
            "until a real-time listener never runs dry (ms)",
            [
                ("p50", "-", lambda r: _nan(_stat(r, "uninterrupted_s", "p50"), 1000)),
                ("p95", "--", lambda r: _nan(_stat(r, "uninterrupted_s", "p95"), 1000)),
                ("TTFA p95", ":", lambda r: _nan(r["ttfa_s"]["p95"], 1000)),
            ],
        ),
        (
            "ttfa.png",
            "Time to first audio" + (" from the first complete sentence" if streamed else ""),
            "TTFA (ms)",
            [
                ("p50", "-", lambda r: _nan(r["ttfa_s"]["p50"], 1000)),
                ("p95", "--", lambda r: _nan(r["ttfa_s"]["p95"], 1000)),
            ],
        ),
        (
            "throughput.png",
            "Throughput",
            "requests / s",
            [
                # a gap where the window was too short: no steady figure
                ("while the load was held", "-", lambda r: _nan(r["throughput_rps"] if steady(r) else None)),
                ("wall clock", ":", lambda r: _nan(r.get("throughput_wall_rps", r["throughput_rps"]))),
            ],
        ),
        (
            "stalls.png",
            f"Playback stalls ({_buffer_label(meta)})",
            "stalled time per request (ms)",
            [
                ("p50", ":", lambda r: _nan(r["playback"]["stalled_s"]["p50"], 1000)),
                ("p95", "--", lambda r: _nan(r["playback"]["stalled_s"]["p95"], 1000)),
                ("max", "-", lambda r: _nan(r["playback"]["stalled_s"]["max"], 1000)),
            ],
        ),
        (
            "stalled_share.png",
            f"Requests with a playback stall ({_buffer_label(meta)})",
            "requests with any stall (%)",
            [("", "-", lambda r: _nan(r["playback"]["stalled_share"], 100))],
        ),
    ]
    if streamed:
        charts.append(
            (
                "gaps.png",
                f"Silence between sentences ({_buffer_label(meta)})",
                "gap at a join between sentences (ms)",
                [
                    ("p50", ":", lambda r: _nan(r["text_stream"]["gap_s"]["p50"], 1000)),
                    ("p95", "--", lambda r: _nan(r["text_stream"]["gap_s"]["p95"], 1000)),
                    ("max", "-", lambda r: _nan(r["text_stream"]["gap_s"]["max"], 1000)),
                ],
            )
        )
    paths = {}
    for name, title, ylabel, series in charts:
        figure, axis = plt.subplots(figsize=(7, 4.5))
        for target in meta["targets"]:
            mine = sorted((r for r in runs if r["target"] == target["index"]), key=level_of)
            color = None
            for suffix, style, value in series:
                label = f"{target['label']} {suffix}".strip()
                line = axis.plot(
                    [level_of(r) for r in mine],
                    [value(r) for r in mine],
                    marker="o",
                    linestyle=style,
                    color=color,
                    label=label,
                )[0]
                color = line.get_color()  # one color per target
        _level_axis(axis, runs, xlabel)
        axis.set_ylabel(ylabel)
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        path = paths[name.removesuffix(".png") + "_plot"] = out / name
        figure.savefig(path, dpi=120)
        plt.close(figure)
    return paths


def write_outputs(meta: dict[str, Any], runs: list[dict[str, Any]], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.write_text(json.dumps({"meta": meta, "runs": runs, "ab_ratios": ab_ratios(runs)}, indent=1))
    summary = out / "summary.md"
    summary.write_text(summary_markdown(meta, runs))
    return {"results": results, "summary": summary, **plot(meta, runs, out)}
