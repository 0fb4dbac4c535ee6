"""Where the first audio of vllm bench's requests waited inside this service: the server-side TTFA and its phases
(`validate`, `queue`, `prepare`, `engine`, `encode_write`; app/timing.py), read from the service's request log lines
(`"message": "speech request"`, one JSON object a line), for each run of `vllm bench serve` (its requests carry
`x-request-id: bench-<run>-<n>`), split into the first wave (the run's first `concurrency` requests, sent at once) and
the later ones.

    python3 deploy/gpu/ttfa_phases.py LOG --concurrency 8,32,64 [--prompts-per-stream 3]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

PHASES = ("validate", "queue", "prepare", "engine", "encode_write")
BENCH_ID = re.compile(r"^bench-(?P<run>[0-9a-f]+)-(?P<n>\d+)$")


def bench_runs(lines: Iterable[str]) -> list[list[dict[str, object]]]:
    """Each benchmark run's request records that reached their first byte, in the order the benchmark numbered
    them."""
    runs: dict[str, list[tuple[int, dict[str, object]]]] = defaultdict(list)
    for line in lines:
        if '"speech request"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        match = BENCH_ID.match(str(record.get("request_id", "")))
        if match and record.get("ttfa_phases_s"):
            runs[match["run"]].append((int(match["n"]), record))
    return [[record for _, record in sorted(items, key=lambda item: item[0])] for items in runs.values()]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def describe(records: list[dict[str, object]]) -> str:
    """TTFA and each phase in ms, p50/p95."""

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1000:.1f}/{percentile(values, 0.95) * 1000:.1f}"

    ttfa = [float(r["ttfa_s"]) for r in records]  # type: ignore[arg-type]
    phases = [f"{p} {ms([float(r['ttfa_phases_s'][p]) for r in records])}" for p in PHASES]  # type: ignore[index]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--concurrency", default="1,8,16,32,64", help="the levels sweep-bench ran")
    parser.add_argument("--prompts-per-stream", type=int, default=3, help="sweep-bench's BENCH_PROMPTS")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with args.log.open(encoding="utf-8", errors="replace") as lines:
        print("\n".join(report(lines, levels, args.prompts_per_stream)))


if __name__ == "__main__":
    main()
