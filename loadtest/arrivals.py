"""When a stream's later audio came, read from a finished run: `python3 -m loadtest.arrivals RESULTS.json`.

For every target and level, the time from each stream's first audio to its n-th arrival of audio (`--nth`, default 2:
the second window), p50 and p95, beside the audio the listener held when the first came: the n-th is in time when it
comes before that audio has played. With a window schedule of fixed sizes each arrival is one window (reads within
5 ms are already one arrival in `results.json`), so this tells which window of a stream comes late and by how much,
e.g. a ramp's second window against the 160 ms its 2-frame first window holds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np


def window_gaps(run: dict[str, Any], nth: int) -> dict[str, float | int | None]:
    """{"streams", "held_p50", "gap_p50", "gap_p95"} in seconds for one run (a target at a level): `held` is the audio
    playable at the first arrival, `gap` the time from the first arrival to the n-th. Streams with fewer than `nth`
    arrivals (all audio in fewer pieces) are left out."""
    held: list[float] = []
    gaps: list[float] = []
    for request in run.get("per_request", []):
        arrivals = request.get("audio_arrivals") or []
        if len(arrivals) >= nth:
            held.append(arrivals[0][1])
            gaps.append(arrivals[nth - 1][0] - arrivals[0][0])
    if not gaps:
        return {"streams": 0, "held_p50": None, "gap_p50": None, "gap_p95": None}
    return {
        "streams": len(gaps),
        "held_p50": float(np.percentile(held, 50)),
        "gap_p50": float(np.percentile(gaps, 50)),
        "gap_p95": float(np.percentile(gaps, 95)),
    }


def gaps_markdown(results: dict[str, Any], nth: int) -> str:
    targets = results["meta"]["targets"]
    lines = [
        f"| target | level | streams | audio held at the first arrival ms p50 | first → arrival {nth} ms p50 | p95 |",
        "|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        gaps = window_gaps(run, nth)
        level = run.get("concurrency") if run.get("concurrency") is not None else run.get("rate")
        cells = [_ms(gaps["held_p50"]), _ms(gaps["gap_p50"]), _ms(gaps["gap_p95"])]
        lines.append(
            f"| {targets[run['target']]['label']} | {level:g} | {gaps['streams']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def _ms(value: float | int | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m loadtest.arrivals", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="a results.json written by speech-loadtest")
    parser.add_argument("--nth", type=int, default=2, help="which arrival to time from the first (default 2)")
    args = parser.parse_args(argv)
    if args.nth < 2:
        parser.error("--nth must be 2 or more")
    try:
        results = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        parser.error(f"cannot read {args.results}: {exc}")
    print(gaps_markdown(results, args.nth))


if __name__ == "__main__":
    main()
