"""What one level of a sweep did inside each server, from the /metrics that side-by-side.sh keeps beside its results
(`metrics-<target>-before.txt` and `-after.txt`): each histogram's observations between the two, as quantiles read
from its buckets the way Prometheus' histogram_quantile reads them.

    python3 deploy/gpu/level_metrics.py LEVEL_FOLDER [LEVEL_FOLDER ...]

One table per folder: for each target, the event loop's lag (p50 / p95 / p99 / the largest bucket reached, and the
samples) and the service's TTFA phases (p95 of each), in ms. The snapshots wrap the whole load-tool call, warm-up
included: a sweep of one target at one level per call (SWEEP_TARGETS=T, one CONCURRENCY) is one level of one server;
where the call drove several, each server's figures also hold the time it sat idle while the others were driven, and
the table says so.

Where a server exports vLLM's per-stage request histograms (the omni engine with vllm-omni's statistics on), a second
table gives each stage's mean per request over the level, from their sums and counts (their buckets start at 0.3 s,
too coarse for a stream's first milliseconds): queued → scheduled, scheduled → first output, and the two together. In
vllm-omni's Qwen3-TTS pipeline code2wav's stage is handed each request as it starts, so its queued → scheduled is the
wait for its first window (the talker's prefill and first frames, and the window's way across), and scheduled →
first output its first decode; the talker's stage streams its codes to code2wav, not to the server, so its first
output is at the stream's end.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

LOOP_LAG = "speech_event_loop_lag_seconds"
TTFA_PHASE = "speech_ttfa_phase_seconds"
# vLLM's per-request histograms, one series per stage (label `stage`) in vllm-omni's statistics
STAGE_TIMES = (
    ("queued → scheduled", "vllm:request_queue_time_seconds"),
    ("scheduled → first output", "vllm:request_prefill_time_seconds"),
    ("queued → first output", "vllm:time_to_first_token_seconds"),
)
PHASES = ("validate", "queue", "prepare", "engine", "encode_write")

Buckets = dict[float, float]  # upper bound -> cumulative count


def buckets(text: str, family: str, **match: str) -> Buckets:
    """A histogram's cumulative buckets in a /metrics text, summed over the series whose labels include `match`."""
    found: Buckets = defaultdict(float)
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            if sample.name == f"{family}_bucket" and all(sample.labels.get(k) == v for k, v in match.items()):
                found[float(sample.labels["le"])] += sample.value
    return dict(found)


def totals(text: str, family: str) -> dict[str, tuple[float, float]]:
    """A histogram's (sum, count) in a /metrics text per stage (its `stage` label), summed over the other labels."""
    found: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            if sample.name in (f"{family}_sum", f"{family}_count") and "stage" in sample.labels:
                found[sample.labels["stage"]][sample.name.endswith("_count")] += sample.value
    return {stage: (total, count) for stage, (total, count) in found.items()}


def difference(after: Buckets, before: Buckets) -> Buckets:
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def quantile(cumulative: Buckets, fraction: float) -> float:
    """histogram_quantile: linear within the bucket the rank falls in; the highest finite bound where it falls in
    +Inf; NaN with no observations."""
    bounds = sorted(cumulative)
    total = cumulative.get(math.inf, cumulative[bounds[-1]] if bounds else 0.0)
    if total <= 0:
        return math.nan
    rank = fraction * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


def largest(cumulative: Buckets) -> float:
    """The upper bound of the highest bucket that holds an observation (inf: beyond every finite bound)."""
    previous = 0.0
    top = 0.0
    for bound in sorted(cumulative):
        if cumulative[bound] > previous:
            top = bound
        previous = cumulative[bound]
    return top


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "–"
    return "∞" if math.isinf(seconds) else f"{seconds * 1000:.1f}"


def what_was_driven(folder: Path) -> tuple[set[str], set[str]]:
    """The targets and the levels (closed-loop concurrency or open-loop rate) of the load tool's results there."""
    try:
        runs = json.loads((folder / "results.json").read_text()).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return set(), set()
    targets = {str(run.get("target")) for run in runs}
    levels = {str(run.get("concurrency") if run.get("concurrency") is not None else run.get("rate")) for run in runs}
    return targets, levels


def report(folder: Path) -> list[str]:
    targets, levels = what_was_driven(folder)
    rows = [f"## {folder.name}", ""]
    if len(targets) > 1 or len(levels) > 1:
        rows += [
            f"(one load-tool call drove {len(targets)} targets at {len(levels)} levels: each server's figures span "
            "them all, its idle turns included)",
            "",
        ]
    rows += [
        "| target | loop lag p50 / p95 / p99 ms | largest bucket ms | samples | TTFA phase p95 ms: "
        + ", ".join(PHASES)
        + " |",
        "| --- | --- | --- | --- | --- |",
    ]
    stages: list[str] = []
    for before_path in sorted(folder.glob("metrics-*-before.txt")):
        target = before_path.name[len("metrics-") : -len("-before.txt")]
        after_path = folder / f"metrics-{target}-after.txt"
        if not after_path.exists():
            continue
        before, after = before_path.read_text(), after_path.read_text()
        lag = difference(buckets(after, LOOP_LAG), buckets(before, LOOP_LAG))
        samples = lag.get(math.inf, 0.0)
        phases = []
        for phase in PHASES:
            observed = difference(buckets(after, TTFA_PHASE, phase=phase), buckets(before, TTFA_PHASE, phase=phase))
            phases.append(ms(quantile(observed, 0.95)))
        rows.append(
            f"| {target} | {' / '.join(ms(quantile(lag, q)) for q in (0.5, 0.95, 0.99))} | {ms(largest(lag))} "
            f"| {samples:.0f} | {', '.join(phases)} |"
        )
        stages += stage_rows(target, before, after)
    if stages:
        rows += [
            "",
            "| target | stage | requests | mean ms a request: " + ", ".join(name for name, _ in STAGE_TIMES) + " |",
            "| --- | --- | --- | --- |",
            *stages,
        ]
    return rows


def stage_rows(target: str, before: str, after: str) -> list[str]:
    """One row a stage: the requests it finished over the level and each of STAGE_TIMES' mean per request."""
    means: dict[str, list[str]] = defaultdict(list)
    counts: dict[str, float] = {}
    for _, family in STAGE_TIMES:
        earlier = totals(before, family)
        for stage, (total, count) in sorted(totals(after, family).items()):
            total_before, count_before = earlier.get(stage, (0.0, 0.0))
            added_total, added = total - total_before, count - count_before
            counts.setdefault(stage, added)
            means[stage].append(ms(added_total / added) if added > 0 else "–")
    return [
        f"| {target} | {stage} | {counts[stage]:.0f} | {', '.join(values)} |"
        for stage, values in means.items()
        if len(values) == len(STAGE_TIMES)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path)
    for folder in parser.parse_args().folders:
        print("\n".join(report(folder)) + "\n")


if __name__ == "__main__":
    main()
