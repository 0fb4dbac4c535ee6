"""The table of run.sh's results: per level and round, vllm bench's req/s beside speech-loadtest's (steady state, and
over the wall clock), and their ratio."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def main(out: Path) -> None:
    rows, ratios = [], {}
    for bench_file in sorted(out.glob("bench-c*-*.json"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)]):
        level, round_ = (int(n) for n in re.findall(r"\d+", bench_file.stem))
        bench = json.loads(bench_file.read_text())
        tool = json.loads((out / f"loadtest-c{level}-{round_}" / "results.json").read_text())["runs"][0]
        ratio = tool["throughput_rps"] / bench["request_throughput"]
        ratios.setdefault(level, []).append(ratio)
        rows.append(
            f"| {level} | {round_} | {bench['completed']} / {bench['failed']} | {bench['request_throughput']:.3f} "
            f"({bench['duration']:.1f} s) | {tool['ok']} / {tool['errors']} | {tool['throughput_rps']:.3f} "
            f"({tool['throughput_basis']}, {tool['throughput_finished_while_held']} answers in "
            f"{tool['throughput_held_s']:.1f} s) | {tool['throughput_wall_rps']:.3f} ({tool['wall_s']:.1f} s) | "
            f"{ratio:.3f} |"
        )
    print(
        "| c | round | bench ok / failed | bench req/s (duration) | load tool ok / errors | load tool req/s "
        "(basis, window) | load tool wall req/s (wall) | load tool / bench |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    for level, values in ratios.items():
        print(f"- c={level}: load tool / bench, mean of {len(values)} rounds: {statistics.fmean(values):.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
