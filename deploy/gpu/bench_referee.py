"""One Markdown table from a `side-by-side.sh sweep-bench` folder: what vllm-omni's own benchmark (`vllm bench serve
--omni --backend openai-audio-speech`) printed for each target at each concurrency, read from its logs.

The logs, not the `--save-result` JSON: vllm-omni 0.30's JSON leaves out the streaming continuity rate, which it only
prints. The lines read are the ones its `print_metrics` / `print_audio_metrics` write ("Request throughput (req/s):",
"Median AUDIO_TTFP (ms):", "P95 AUDIO_TTFP (ms):", "Median AUDIO_RTF:", "Streaming continuity OK rate:", ...).

    python3 deploy/gpu/bench_referee.py FOLDER > FOLDER/README.md
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

FIELDS = {
    "ok": "Successful requests:",
    "failed": "Failed requests:",
    "duration_s": "Benchmark duration (s):",
    "req_s": "Request throughput (req/s):",
    "ttfp_p50_ms": "Median AUDIO_TTFP (ms):",
    "ttfp_p95_ms": "P95 AUDIO_TTFP (ms):",
    "rtf_p50": "Median AUDIO_RTF:",
    "rtf_p95": "P95 AUDIO_RTF:",
    "continuity_ok": "Streaming continuity OK rate:",
}
LOG_NAME = re.compile(r"^c(?P<level>\d+)-(?P<target>.+)\.log$")


@dataclass(frozen=True)
class BenchRun:
    level: int
    target: str
    values: dict[str, float]


def read_log(text: str) -> dict[str, float]:
    """The figures a benchmark log printed (a percentage as a fraction); a figure it did not print is absent."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        for key, label in FIELDS.items():
            if line.startswith(label):
                number = line[len(label) :].strip().rstrip("%")
                try:
                    values[key] = float(number) / (100 if line.rstrip().endswith("%") else 1)
                except ValueError:
                    pass
    return values


def read_folder(folder: Path) -> list[BenchRun]:
    """Every c<level>-<target>.log, level by level, targets in targets.txt's order."""
    order = [line.split()[0] for line in (folder / "targets.txt").read_text().splitlines() if line.strip()]
    runs = []
    for path in folder.glob("c*.log"):
        match = LOG_NAME.match(path.name)
        if match:
            runs.append(BenchRun(int(match["level"]), match["target"], read_log(path.read_text(errors="replace"))))
    rank = {name: index for index, name in enumerate(order)}
    return sorted(runs, key=lambda run: (run.level, rank.get(run.target, len(rank)), run.target))


def _num(values: dict[str, float], key: str, digits: int) -> str:
    return f"{values[key]:.{digits}f}" if key in values else "–"


def table(runs: list[BenchRun]) -> str:
    lines = [
        "| c | target | ok / failed | req/s | audio TTFP p50 / p95 ms | RTF p50 / p95 | continuity OK "
        "| ÷ first target: req/s, TTFP p50, p95 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    first: dict[int, dict[str, float]] = {}
    for run in runs:
        v = run.values
        reference = first.setdefault(run.level, v)
        ratios = "–"
        if reference is not v:
            ratios = ", ".join(
                f"{v[key] / reference[key]:.2f}" if v.get(key) and reference.get(key) else "–"
                for key in ("req_s", "ttfp_p50_ms", "ttfp_p95_ms")
            )
        continuity = f"{v['continuity_ok']:.0%}" if "continuity_ok" in v else "–"
        lines.append(
            f"| {run.level} | {run.target} | {_num(v, 'ok', 0)} / {_num(v, 'failed', 0)} | {_num(v, 'req_s', 2)} "
            f"| {_num(v, 'ttfp_p50_ms', 0)} / {_num(v, 'ttfp_p95_ms', 0)} | {_num(v, 'rtf_p50', 3)} / "
            f"{_num(v, 'rtf_p95', 3)} | {continuity} | {ratios} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    print("# vllm-omni's benchmark (`vllm bench serve --omni --backend openai-audio-speech`)\n")
    print(
        "Its own figures, read from its logs: req/s = completed / the level's whole duration; audio TTFP = time to "
        "the first audio byte; continuity OK = the share of streams a listener starting at the first byte never heard "
        "starve by more than its threshold (100 ms). Commands in ../commands.txt.\n"
    )
    print(table(read_folder(folder)))


if __name__ == "__main__":
    main()
