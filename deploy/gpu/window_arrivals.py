"""When each of a stream's first audio windows reached the client, from speech-loadtest's results: per window, the
time since the request was sent and the gap after the window before, as p10 / p50 / p90 ms over the streams of each
target and level. A stream runs dry where a gap is longer than the audio in hand, so this says which window is late.

    python3 deploy/gpu/window_arrivals.py RESULTS.json [RESULTS.json...] [--windows 4]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, whether run as a script or loaded by path
from ttfa_phases import percentile

QUANTILES = (0.1, 0.5, 0.9)


def window_table(per_request: list[dict[str, Any]], windows: int) -> list[tuple[int, int, list[float], list[float]]]:
    """Per window (1-based): how many streams had it, its arrival and its gap after the one before (ms), each as
    QUANTILES. `audio_arrivals` is the load tool's list of [seconds since the request, audio seconds in hand]."""
    table = []
    for index in range(windows):
        arrived = [
            r["audio_arrivals"] for r in per_request if r.get("ok") and len(r.get("audio_arrivals") or ()) > index
        ]
        if not arrived:
            break
        at = [a[index][0] * 1000 for a in arrived]
        gaps = [(a[index][0] - a[index - 1][0]) * 1000 for a in arrived] if index else at
        table.append(
            (index + 1, len(arrived), [percentile(at, q) for q in QUANTILES], [percentile(gaps, q) for q in QUANTILES])
        )
    return table


def runs(path: Path) -> Iterator[tuple[str, int, list[dict[str, Any]]]]:
    results = json.loads(path.read_text(encoding="utf-8"))
    for run in results.get("runs", []):
        yield run.get("url", "?"), run.get("concurrency", 0), run.get("per_request", [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="speech-loadtest's results.json")
    parser.add_argument("--windows", type=int, default=4, help="how many of each stream's first windows")
    args = parser.parse_args(argv)
    for path in args.results:
        for url, concurrency, per_request in runs(path):
            print(f"{path} {url} c={concurrency}")
            print(
                f"{'window':>6} {'streams':>7}   arrived p10 / p50 / p90 ms   after the one before p10 / p50 / p90 ms"
            )
            for window, count, at, gap in window_table(per_request, args.windows):
                print(
                    f"{window:>6} {count:>7}   {' / '.join(f'{v:.0f}' for v in at):>27}   "
                    f"{' / '.join(f'{v:.0f}' for v in gap):>39}"
                )


if __name__ == "__main__":
    main()
