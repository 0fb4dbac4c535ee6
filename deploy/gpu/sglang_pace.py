"""The talker's pace from SGLang's own log lines: its `Decode batch` lines after the server was ready, grouped by how
many requests were running, as the mean (and median) of their `gen throughput (token/s)` (one token is one codec frame).

SGLang logs such a line every few decode steps, with the running requests and the throughput since its previous decode
line. A line's throughput is the decoding pace only where the interval held nothing else, so only a decode line that
follows another decode line of the same running requests, within `--max-gap` seconds, counts. The first one after a
prefill spans that prefill, and after an idle pause (between two sweeps) the pause too. Lines before the server was
ready (its warm-up) are left out: `--after` is the line that says so, the service's `"started"` log line.

    python3 deploy/gpu/sglang_pace.py LOG [LOG...] [--buckets 8,16,30-32] [--after REGEX] [--max-gap 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, whether run as a script or loaded by path
from sglang_timeline import read_lines

DECODE = re.compile(
    r"Decode batch, #running-req: (?P<running>\d+),.*?cuda graph: (?P<graph>True|False),"
    r".*?gen throughput \(token/s\): (?P<rate>[\d.]+)"
)
READY = r'"message": "started"'
PREFILL = "Prefill batch"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")  # Python logging's asctime, as SGLang logs it


def buckets(text: str) -> list[tuple[int, int]]:
    """`8,16,30-32` -> [(8, 8), (16, 16), (30, 32)]: running-request counts, single or an inclusive range."""
    out = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out.append((int(low), int(high or low)))
    return out


def decode_lines(lines: Iterable[str], after: str, max_gap_s: float) -> Iterator[tuple[int, bool, float]]:
    """(running requests, replayed a CUDA graph, tokens/s) of each decode line, after the first line matching `after`,
    that follows a decode line of as many running requests within max_gap_s, with no prefill line between them."""
    ready = re.compile(after)
    seen = False
    previous: tuple[int, datetime | None] | None = None  # the last scheduler line's running requests and time
    for line in lines:
        if not seen:
            seen = bool(ready.search(line))
            continue
        if PREFILL in line:
            previous = None
            continue
        match = DECODE.search(line)
        if not match:
            continue
        stamp = STAMP.match(line)
        at = datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S,%f") if stamp else None
        running = int(match["running"])
        steady = previous is not None and previous[0] == running
        if steady and at is not None and previous is not None and previous[1] is not None:
            steady = (at - previous[1]).total_seconds() <= max_gap_s
        previous = (running, at)
        if steady:
            yield running, match["graph"] == "True", float(match["rate"])


def pace_table(
    decodes: Iterable[tuple[int, bool, float]], by: list[tuple[int, int]]
) -> list[tuple[str, int, float, float, float, float, float]]:
    """Per bucket: its name, the lines in it, mean / median / min / max tokens/s, and the share replaying a graph."""
    found: dict[tuple[int, int], list[tuple[bool, float]]] = {bucket: [] for bucket in by}
    for running, graph, rate in decodes:
        for low, high in by:
            if low <= running <= high:
                found[low, high].append((graph, rate))
    table = []
    for (low, high), rows in found.items():
        if rows:
            rates = [rate for _, rate in rows]
            name = str(low) if low == high else f"{low}-{high}"
            graphs = sum(graph for graph, _ in rows) / len(rows)
            mean, median = sum(rates) / len(rates), statistics.median(rates)
            table.append((name, len(rows), mean, median, min(rates), max(rates), graphs))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="server logs, plain or gzipped")
    parser.add_argument("--buckets", default="1,8,16,30-32,48,64", help="running requests: counts or ranges")
    parser.add_argument("--after", default=READY, help="the line after which the server was ready (a regex)")
    parser.add_argument(
        "--max-gap",
        type=float,
        default=2.0,
        help="seconds: a decode line later than this after the one before is left out",
    )
    args = parser.parse_args(argv)
    for path in args.logs:
        print(f"{path}")
        print(f"{'running':>8} {'lines':>6} {'mean tok/s':>10} {'median':>7} {'min':>7} {'max':>7} {'graph':>6}")
        decodes = decode_lines(read_lines(path), args.after, args.max_gap)
        for name, count, mean, median, low, high, graphs in pace_table(decodes, buckets(args.buckets)):
            print(f"{name:>8} {count:>6} {mean:>10.0f} {median:>7.0f} {low:>7.0f} {high:>7.0f} {graphs:>6.0%}")


if __name__ == "__main__":
    main()
