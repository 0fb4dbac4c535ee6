"""Where the first audio of vllm bench's requests waited inside this service: the server-side TTFA and its phases
(`validate`, `queue`, `prepare`, `engine`, `encode_write`; app/timing.py), read from the service's request log lines
(`"message": "speech request"`, one JSON object a line), for each run of `vllm bench serve` (its requests carry
`x-request-id: bench-<run>-<n>`), split into the first wave (the run's first `concurrency` requests, sent at once) and
the later ones. With --waves N instead: every burst of at least N requests (any client; each arriving within 50 ms
of the one before), when each got its first chunk from the engine, in clusters (first chunks less than 5 ms apart),
as count@ms after the burst's first arrival: where a burst's first audio is held back, not only how much.

    python3 deploy/gpu/ttfa_phases.py LOG --concurrency 8,32,64 [--prompts-per-stream 3]
    python3 deploy/gpu/ttfa_phases.py LOG --waves 8
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

PHASES = ("validate", "queue", "prepare", "engine", "encode_write")
BENCH_ID = re.compile(r"^bench-(?P<run>[0-9a-f]+)-(?P<n>\d+)$")


def speech_records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The service's request log records (`"message": "speech request"`); other lines and broken ones are left out."""
    for line in lines:
        if '"speech request"' not in line:
            continue
        try:
            yield json.loads(line)
        except ValueError:
            continue


def bench_runs(lines: Iterable[str]) -> list[list[dict[str, object]]]:
    """Each benchmark run's request records that reached their first byte, in the order the benchmark numbered
    them."""
    runs: dict[str, list[tuple[int, dict[str, object]]]] = defaultdict(list)
    for record in speech_records(lines):
        match = BENCH_ID.match(str(record.get("request_id", "")))
        if match and record.get("ttfa_phases_s"):
            runs[match["run"]].append((int(match["n"]), record))
    return [[record for _, record in sorted(items, key=lambda item: item[0])] for items in runs.values()]


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` of the way through the sorted values, the nearer one, halves upward (not `round`'s
    halves to even, which would take the lower middle of 2 values and the upper of 4)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * (len(ordered) - 1) + 0.5))]


def describe(records: list[dict[str, object]]) -> str:
    """TTFA and each phase in ms, p50/p95."""

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1000:.1f}/{percentile(values, 0.95) * 1000:.1f}"

    ttfa = [float(r["ttfa_s"]) for r in records]
    phases = [f"{p} {ms([float(r['ttfa_phases_s'][p]) for r in records])}" for p in PHASES]
    return f"ttfa {ms(ttfa)} | " + " ".join(phases)


def report(lines: Iterable[str], levels: list[int], prompts_per_stream: int = 3) -> list[str]:
    """One line per run and wave. A run's level is the one of `levels` whose prompt count it has (sweep-bench sends
    `prompts_per_stream` x the level, at least 16); a run of another size is left out."""
    sizes = {max(16, prompts_per_stream * level): level for level in levels}
    out = []
    for records in bench_runs(lines):
        level = sizes.get(len(records))
        if level is None:
            continue
        out.append(f"c={level} first wave ({level}): {describe(records[:level])}")
        out.append(f"c={level} later waves ({len(records) - level}): {describe(records[level:])}")
    return out


def arrivals(lines: Iterable[str]) -> list[tuple[float, float]]:
    """(arrival, first chunk) in epoch seconds of every request that got a first chunk, by arrival: the log line is
    written as the request ends, so it arrived `e2e_s` before its timestamp."""
    out = []
    for record in speech_records(lines):
        try:
            ended = datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00")).timestamp()
            arrived = ended - float(record["e2e_s"])
            out.append((arrived, arrived + float(record["timeline_s"]["first_chunk"])))
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(out)


def clusters(times_ms: list[float], gap_ms: float = 5.0) -> str:
    """count@ms for each run of times less than `gap_ms` apart; a run's span as first-last."""
    runs: list[list[float]] = []
    for t in sorted(times_ms):
        if runs and t - runs[-1][-1] < gap_ms:
            runs[-1].append(t)
        else:
            runs.append([t])
    return " ".join(f"{len(r)}@{r[0]:.0f}" + (f"-{r[-1]:.0f}" if r[-1] - r[0] >= 1 else "") for r in runs)


def waves(lines: Iterable[str], least: int, gap_s: float = 0.05) -> list[str]:
    """One line per burst of at least `least` requests: its size, how long its arrivals took, its first chunks."""
    bursts: list[list[tuple[float, float]]] = []
    for request in arrivals(lines):
        if bursts and request[0] - bursts[-1][-1][0] <= gap_s:
            bursts[-1].append(request)
        else:
            bursts.append([request])
    out = []
    for burst in (b for b in bursts if len(b) >= least):
        start = burst[0][0]
        spread = (burst[-1][0] - start) * 1000
        firsts = clusters([(first - start) * 1000 for _, first in burst])
        out.append(f"{len(burst)} requests, arrived over {spread:.0f} ms; first chunks (count@ms): {firsts}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--concurrency", default="1,8,16,32,64", help="the levels sweep-bench ran")
    parser.add_argument("--prompts-per-stream", type=int, default=3, help="sweep-bench's BENCH_PROMPTS")
    parser.add_argument("--waves", type=int, help="instead: the first chunks of every burst of at least this many")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with args.log.open(encoding="utf-8", errors="replace") as lines:
        if args.waves:
            print("\n".join(waves(lines, args.waves)))
        else:
            print("\n".join(report(lines, levels, args.prompts_per_stream)))


if __name__ == "__main__":
    main()
