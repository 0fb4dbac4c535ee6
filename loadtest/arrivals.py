"""When a stream's later audio came, read from a finished run: `python3 -m loadtest.arrivals RESULTS.json`.

For every target and level: the time from each stream's first arrival of audio to its n-th (`--nth`, default 2: the
second window), p50 and p95; the audio the listener held by the arrival before it (the n-th is in time when it comes
before that has played, for a listener who starts at the first arrival without a jitter buffer), p50; and the streams
whose n-th came later than that, and what the listener still held when it came (negative: how long it waited), p50.
With a window schedule of fixed sizes each arrival is one window (in `results.json` reads less than 5 ms apart are
already one arrival, timed at its last read), so this tells which window of a stream comes late and by how much, e.g.
a ramp's second window against the 160 ms its 2-frame first window holds. Not for text streamed over the WebSocket
(`--ws`), whose arrivals run across sentences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.report import level_of, ms


def window_gaps(run: dict[str, Any], nth: int) -> dict[str, float | int | None]:
    """{"streams", "held_p50", "gap_p50", "gap_p95", "late", "in_hand_p50"} for one run (a target at a level), in
    seconds: `gap` is the time from the first arrival to the n-th, `held` the audio playable by the arrival before the
    n-th, `late` the streams whose gap was longer than their held audio, `in_hand` held less gap (what the listener
    still held when the n-th came; a stream paced to keep a margin shows it here). Streams with fewer than `nth`
    arrivals are left out."""
    held: list[float] = []
    gaps: list[float] = []
    for request in run.get("per_request", []):
        arrivals = request.get("audio_arrivals") or []
        if len(arrivals) >= nth:
            held.append(arrivals[nth - 2][1])
            gaps.append(arrivals[nth - 1][0] - arrivals[0][0])
    if not gaps:
        return {"streams": 0, "held_p50": None, "gap_p50": None, "gap_p95": None, "late": 0, "in_hand_p50": None}
    in_hand = [audio - gap for gap, audio in zip(gaps, held, strict=True)]  # below 0: the n-th came late
    return {
        "streams": len(gaps),
        "held_p50": float(np.percentile(held, 50)),
        "gap_p50": float(np.percentile(gaps, 50)),
        "gap_p95": float(np.percentile(gaps, 95)),
        "late": sum(margin < 0 for margin in in_hand),
        "in_hand_p50": float(np.percentile(in_hand, 50)),
    }


def gaps_markdown(results: dict[str, Any], nth: int) -> str:
    """One row per target and level. KeyError, IndexError or TypeError: not a speech-loadtest results.json."""
    labels = [target["label"] for target in results["meta"]["targets"]]
    lines = [
        f"| target | level | streams | audio held by arrival {nth - 1} ms p50 | first → arrival {nth} ms p50 | p95 "
        f"| arrival {nth} late | in hand at arrival {nth} ms p50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        gaps = window_gaps(run, nth)
        seconds = [ms(gaps[key]) for key in ("held_p50", "gap_p50", "gap_p95")]
        cells = [*seconds, str(gaps["late"]), ms(gaps["in_hand_p50"])]
        lines.append(f"| {labels[run['target']]} | {level_of(run):g} | {gaps['streams']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m loadtest.arrivals", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("results", type=Path, help="a results.json written by speech-loadtest")
    parser.add_argument("--nth", type=int, default=2, help="which arrival to time from the first (default 2)")
    args = parser.parse_args(argv)
    if args.nth < 2:
        parser.error("--nth must be 2 or more")
    try:
        results = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        parser.error(f"cannot read {args.results}: {exc}")
    if isinstance(results, dict) and (results.get("meta") or {}).get("text_rate"):
        parser.error(f"{args.results} is a WebSocket run (--ws): its arrivals run across sentences")
    try:
        table = gaps_markdown(results, args.nth)
    except (KeyError, IndexError, TypeError) as exc:
        parser.error(f"{args.results} is not a speech-loadtest results.json ({type(exc).__name__}: {exc})")
    print(table)


if __name__ == "__main__":
    main()
