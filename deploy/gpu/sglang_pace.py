"""The talker's pace from SGLang's own log lines: every `Decode batch` line after the server was ready, grouped by how
many requests were running, as the mean of their `gen throughput (token/s)` (one token is one codec frame).

SGLang logs one such line every few decode steps with the running requests and the throughput since the last one; a
start's talker pace at a load is their mean over the lines at that load. Lines before the server was ready (its
warm-up) are left out: `--after` is the line that says so (the service: its `"started"` log line).

    python3 deploy/gpu/sglang_pace.py LOG [LOG...] [--buckets 8,16,30-32] [--after REGEX]
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

DECODE = re.compile(
    r"Decode batch, #running-req: (?P<running>\d+),.*?cuda graph: (?P<graph>True|False),"
    r".*?gen throughput \(token/s\): (?P<rate>[\d.]+)"
)
READY = r'"message": "started"'


def log_lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", errors="replace") as lines:
        yield from lines


def buckets(text: str) -> list[tuple[int, int]]:
    """`8,16,30-32` -> [(8, 8), (16, 16), (30, 32)]: running-request counts, single or an inclusive range."""
    out = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out.append((int(low), int(high or low)))
    return out


def decode_lines(lines: Iterable[str], after: str) -> Iterator[tuple[int, bool, float]]:
    """(running requests, replayed a CUDA graph, tokens/s) of each decode line after the first line matching `after`."""
    ready = re.compile(after)
    seen = False
    for line in lines:
        if not seen:
            seen = bool(ready.search(line))
            continue
        match = DECODE.search(line)
        if match:
            yield int(match["running"]), match["graph"] == "True", float(match["rate"])


def pace_table(
    decodes: Iterable[tuple[int, bool, float]], by: list[tuple[int, int]]
) -> list[tuple[str, int, float, float, float, float]]:
    """Per bucket: its name, the lines in it, mean / min / max tokens/s, and the share of them replaying a graph."""
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
            table.append((name, len(rows), sum(rates) / len(rates), min(rates), max(rates), graphs))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="server logs, plain or gzipped")
    parser.add_argument("--buckets", default="1,8,16,30-32,48,64", help="running requests: counts or ranges")
    parser.add_argument("--after", default=READY, help="the line after which the server was ready (a regex)")
    args = parser.parse_args(argv)
    for path in args.logs:
        print(f"{path}")
        print(f"{'running':>8} {'lines':>6} {'tokens/s':>9} {'min':>7} {'max':>7} {'graph':>6}")
        for name, count, mean, low, high, graphs in pace_table(
            decode_lines(log_lines(path), args.after), buckets(args.buckets)
        ):
            print(f"{name:>8} {count:>6} {mean:>9.0f} {low:>7.0f} {high:>7.0f} {graphs:>6.0%}")


if __name__ == "__main__":
    main()
