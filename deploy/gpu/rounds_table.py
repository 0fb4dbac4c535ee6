"""The rounds of one start side by side: what each round of lever-starts.sh's SWITCH_ROUNDS measured (or any folders
of its results: each variant's of a run started in turn), one column a round, and each lever round's ratio to its
baseline rounds.

    python3 deploy/gpu/rounds_table.py OUT/v1 --rounds a1 s1 b1 a2 s2 b2 a3 --baseline a1 a2 a3

For each round (a folder of side-by-side.sh's results): the load tool's levels (time to uninterrupted audio p50 / p95
ms, the share of streams that ran dry, TTFA p95 ms, req/s; c=1: TTFA p50 / p95 and E2E p50), vllm-omni's benchmark
(req/s, TTFP p50 / p95 ms), the GPU's mean utilization over each level (`gpu-util.md`) and the share of the host's
CPU time its hypervisor stole (`host-cpu.md`), and from the request timeline
at c=32 (`timeline-c32.md`) the talker's steps on the host: a decode-only step's time to the next and its
preprocessing, a step that took in prompts and its prompt builder (p50 ms). A measure a round lacks is shown as –.

Then, for each round not among the baseline's, the ratio of its value to the median of the baseline rounds' for the
figures a lever is judged by (uninterrupted p95, req/s, the benchmark's req/s and TTFP p95, the steps), with `*` where
its value lies outside the baseline rounds' range: within it, the ratio is within what the baseline differs by
from itself in the same start.

With --steps, then the talker's steps on the host in full, at one stream and at 32 (`timeline-c1.md`,
`timeline-c32.md`): each phase of a decode-only step and of a step that took in prompts, p50 / p95 ms, one column a
round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (label, the sweep's folder): the levels lever-starts.sh runs, in its order
LEVELS = (
    ("c=1", "closed-c1"),
    ("burst of 8", "closed-burst-c8"),
    ("burst of 32", "closed-burst-c32"),
    ("steady c=8", "closed-c8"),
    ("steady c=32", "closed-c32"),
    ("steady c=64", "closed-c64"),  # only where lever-starts.sh's SWEEPS named steady-c64
)
# what each level's results.json (the load tool's first run) gives, by name
LEVEL_FIGURES: dict[str, Callable[[dict[str, Any]], float]] = {
    "uninterrupted p50": lambda r: r["uninterrupted_s"]["p50"] * 1000,
    "uninterrupted p95": lambda r: r["uninterrupted_s"]["p95"] * 1000,
    "ran dry %": lambda r: r["ran_dry_share"] * 100,
    "TTFA p50": lambda r: r["ttfa_s"]["p50"] * 1000,
    "TTFA p95": lambda r: r["ttfa_s"]["p95"] * 1000,
    "E2E p50": lambda r: r["e2e_s"]["p50"] * 1000,
    "req/s": lambda r: r["throughput_rps"],
}
# what vllm-omni's benchmark result gives: (name, its key)
BENCH_FIGURES = (("req/s", "request_throughput"), ("TTFP p50", "p50_audio_ttfp_ms"), ("TTFP p95", "p95_audio_ttfp_ms"))
BENCHES = (
    ("benchmark c=32, first", "bench-first-c32"),
    ("benchmark c=1", "bench-c1"),  # only where lever-starts.sh's SWEEPS named bench-c1 and bench-c8
    ("benchmark c=8", "bench-c8"),
    ("benchmark c=32, again", "bench-again-c32"),
)
# the talker's step tables in timeline-c32.md (deploy/gpu/omni_timeline.py): (label, the table's heading, its row)
STEPS = (
    ("decode step, to the next p50 ms", "decode only", "to the next step"),
    ("decode step, preprocess p50 ms", "decode only", "preprocess"),
    ("prompt step, to the next p50 ms", "took in a prompt", "to the next step"),
    ("prompt step, prompt builder p50 ms", "took in a prompt", "prompt"),
)
Reading = dict[str, float | None]


def level_results(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / "results.json").read_text())["runs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def bench_results(folder: Path) -> dict[str, Any] | None:
    for path in sorted(folder.glob("c*-service.json")):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None
    return None


def host_steal(folder: Path) -> float | None:
    """The share of the host's CPU time stolen by its hypervisor over the level (host-cpu.md, side-by-side.sh's)."""
    try:
        lines = (folder / "host-cpu.md").read_text().splitlines()
    except OSError:
        return None
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    if len(rows) < 3 or "steal %" not in rows[0]:
        return None
    try:
        return float(rows[2][rows[0].index("steal %")])
    except (IndexError, ValueError):
        return None


def gpu_mean(folder: Path) -> float | None:
    """The first GPU's mean utilization % in the level's gpu-util.md."""
    try:
        text = (folder / "gpu-util.md").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            try:
                return float(cells[2])
            except ValueError:
                return None
    return None


def step_table(timeline: str, heading: str) -> dict[str, tuple[float | None, float | None]]:
    """The step table whose heading holds `heading` (omni_timeline.py's tables: phase, steps, p50, p95, max), as each
    phase's (p50, p95); a figure shown as – is None."""

    def number(cell: str) -> float | None:
        try:
            return float(cell)
        except ValueError:
            return None

    at = timeline.find(heading)
    if at < 0:
        return {}
    rows: dict[str, tuple[float | None, float | None]] = {}
    for line in timeline[at:].splitlines()[1:]:
        if line.startswith("The ") or line.startswith("#"):
            break  # the next table
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] not in ("phase", "---"):
            rows[cells[0]] = (number(cells[2]), number(cells[3]))
    return rows


def step_p50(timeline: str, heading: str, row: str) -> float | None:
    """The p50 of `row` in the step table whose heading holds `heading`."""
    return step_table(timeline, heading).get(row, (None, None))[0]


# the step tables --steps shows: (what the steps are, the heading, the phases in the order shown)
STEP_PHASES = ("to the next step", "execute_model", "sample_tokens", "add_requests", "prepare_inputs", "preprocess")
STEP_TABLES = (
    ("decode", "decode only", tuple(phase for phase in STEP_PHASES if phase != "add_requests")),
    ("prompt", "took in a prompt", (*STEP_PHASES, "prompt")),
)


def timeline_text(folder: Path, level: str) -> str:
    """A round's request timeline at `level` (c1, c32), empty where it has none."""
    try:
        return (folder / f"timeline-{level}.md").read_text()
    except OSError:
        return ""


def steps_tables(root: Path, rounds: list[str]) -> str:
    """The talker's steps on the host, each phase's p50 / p95 ms one column a round, at one stream and at 32."""
    out: list[str] = []
    for level, title in (("c1", "At one stream"), ("c32", "In a burst of 32")):
        timelines = {r: timeline_text(root / r, level) for r in rounds}
        tables = {(kind, r): step_table(timelines[r], heading) for kind, heading, _ in STEP_TABLES for r in rounds}
        out += [f"{title} (`timeline-{level}.md`), ms p50 / p95:", ""]
        out += ["| step: phase | " + " | ".join(rounds) + " |", "| --- |" + " --- |" * len(rounds)]
        for kind, _heading, phases in STEP_TABLES:
            for phase in phases:
                cells = []
                for r in rounds:
                    p50, p95 = tables[(kind, r)].get(phase, (None, None))
                    cells.append("–" if p50 is None else f"{p50:.1f} / {'–' if p95 is None else f'{p95:.1f}'}")
                if all(cell == "–" for cell in cells):
                    continue
                out.append(f"| {kind}: {phase} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def read_round(folder: Path) -> Reading:
    """Every figure of one round, by name (None where it lacks one)."""
    reading: Reading = {}
    for label, sweep in LEVELS:
        run = level_results(folder / sweep)
        for name, value in LEVEL_FIGURES.items():
            try:
                reading[f"{label} {name}"] = value(run) if run is not None else None
            except (KeyError, TypeError):
                reading[f"{label} {name}"] = None
        reading[f"{label} GPU %"] = gpu_mean(folder / sweep)
        reading[f"{label} host steal %"] = host_steal(folder / sweep)
    for label, sweep in BENCHES:
        bench = bench_results(folder / sweep)
        for name, key in BENCH_FIGURES:
            value = bench.get(key) if bench else None
            reading[f"{label} {name}"] = float(value) if isinstance(value, (int, float)) else None
    timeline = timeline_text(folder, "c32")
    for label, heading, row in STEPS:
        reading[label] = step_p50(timeline, heading, row)
    return reading


def shown(value: float | None, name: str) -> str:
    if value is None:
        return "–"
    if name.endswith("req/s"):
        return f"{value:.2f}"
    if "step" in name or name.endswith("steal %"):
        return f"{value:.1f}"
    return f"{value:.0f}"


# the figures a lever is judged by, with which way is better (1: higher, -1: lower)
JUDGED = (
    *((f"{label} uninterrupted p95", -1) for label, _ in LEVELS),
    *((f"{label} req/s", 1) for label, _ in LEVELS[1:]),
    *((f"{label} {name}", sign) for label, _ in BENCHES for name, sign in (("req/s", 1), ("TTFP p95", -1))),
    *((label, -1) for label, _, _ in STEPS),
)


def table(readings: dict[str, Reading], baseline: list[str]) -> str:
    rounds = list(readings)
    names = list(next(iter(readings.values())))
    lines = ["| figure | " + " | ".join(rounds) + " |", "| --- |" + " --- |" * len(rounds)]
    for name in names:
        if all(readings[r][name] is None for r in rounds):
            continue
        lines.append(f"| {name} | " + " | ".join(shown(readings[r][name], name) for r in rounds) + " |")
    levers = [r for r in rounds if r not in baseline]
    if baseline and levers:
        lines += [
            "",
            f"Each round against the median of {', '.join(baseline)} (`*`: outside their range; lower is better but "
            "for req/s):",
            "",
            "| figure | " + " | ".join(levers) + " |",
            "| --- |" + " --- |" * len(levers),
        ]
        for name, _better in JUDGED:
            base = [readings[r][name] for r in baseline if readings[r][name] is not None]
            if not base:
                continue
            middle, low, high = statistics.median(base), min(base), max(base)
            cells = []
            for r in levers:
                value = readings[r][name]
                if value is None or not middle:
                    cells.append("–")
                    continue
                outside = "*" if value < low or value > high else ""
                cells.append(f"{value / middle:.2f}×{outside}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the folder that holds the rounds' folders")
    parser.add_argument("--rounds", nargs="+", required=True, help="the rounds' folders under ROOT, in order")
    parser.add_argument("--baseline", nargs="*", default=[], help="the rounds without the lever")
    parser.add_argument("--steps", action="store_true", help="then the talker's steps on the host in full")
    args = parser.parse_args(argv)
    missing = [r for r in args.rounds if not (args.root / r).is_dir()]
    unknown = [r for r in args.baseline if r not in args.rounds]
    if missing or unknown:
        print(
            f"rounds_table: no folder for {missing}; baseline rounds not among the rounds: {unknown}", file=sys.stderr
        )
        return 2
    readings = {r: read_round(args.root / r) for r in args.rounds}
    sys.stdout.write(table(readings, args.baseline))
    if args.steps:
        sys.stdout.write("\n" + steps_tables(args.root, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
