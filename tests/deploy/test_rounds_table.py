"""deploy/gpu/rounds_table.py: the rounds of one start side by side, read from the files side-by-side.sh and
omni_timeline.py write, and each lever round's ratio to its baseline rounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "deploy/gpu/rounds_table.py"

TIMELINE = """# Where first audio went on the omni engine (64 requests)

The talker's steps on the host that took in a prompt (19 steps; prompts a step p50 3, max 7), ms by the host's clock:

| phase | steps | p50 | p95 | max |
| --- | --- | --- | --- | --- |
| to the next step | 19 | {prompt_step} | 29.8 | 32.1 |
| prompt | 19 | 5.4 | 14.9 | 16.8 |

The talker's steps on the host that decode only (205 steps; requests a step p50 32), ms by the host's clock:

| phase | steps | p50 | p95 | max |
| --- | --- | --- | --- | --- |
| to the next step | 205 | {decode_step} | 13.5 | 17.2 |
| preprocess | 205 | 2.7 | 4.5 | 5.3 |
"""


def write_round(folder: Path, unint_p95_ms: float, rps: float, decode_step: float, gpu: int | None = 81) -> None:
    for sweep in ("closed-c1", "closed-burst-c8", "closed-burst-c32", "closed-c8", "closed-c32"):
        level = folder / sweep
        level.mkdir(parents=True)
        run = {
            "uninterrupted_s": {"p50": 0.05, "p95": unint_p95_ms / 1000},
            "ttfa_s": {"p50": 0.04, "p95": 0.06},
            "e2e_s": {"p50": 0.5},
            "ran_dry_share": 0.0,
            "throughput_rps": rps,
        }
        (level / "results.json").write_text(json.dumps({"runs": [run]}))
        if gpu is not None:
            (level / "gpu-util.md").write_text(
                "| GPU | samples | mean utilization % | samples at 90% or more |\n| --- | --- | --- | --- |\n"
                f"| 0 | 42 | {gpu} | 81% |\n"
            )
    bench = folder / "bench-first-c32"
    bench.mkdir()
    (bench / "c32-service.json").write_text(
        json.dumps({"request_throughput": rps + 1, "p50_audio_ttfp_ms": 125.0, "p95_audio_ttfp_ms": 242.0})
    )
    (folder / "timeline-c32.md").write_text(TIMELINE.format(prompt_step=13.7, decode_step=decode_step))


def table(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), str(root), *args], capture_output=True, text=True, timeout=60)


def test_each_round_is_a_column_and_each_lever_round_a_ratio_to_the_baselines_median(tmp_path: Path) -> None:
    write_round(tmp_path / "a1", 110, 20.0, 11.0)
    write_round(tmp_path / "s1", 100, 22.0, 10.0, gpu=None)
    write_round(tmp_path / "a2", 114, 21.0, 12.0)
    done = table(tmp_path, "--rounds", "a1", "s1", "a2", "--baseline", "a1", "a2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| figure | a1 | s1 | a2 |"
    assert "| steady c=32 uninterrupted p95 | 110 | 100 | 114 |" in lines
    assert "| steady c=32 req/s | 20.00 | 22.00 | 21.00 |" in lines
    assert "| steady c=32 GPU % | 81 | – | 81 |" in lines  # a measure a round lacks
    assert "| benchmark c=32, first req/s | 21.00 | 23.00 | 22.00 |" in lines
    assert "| decode step, to the next p50 ms | 11.0 | 10.0 | 12.0 |" in lines
    assert "| prompt step, prompt builder p50 ms | 5.4 | 5.4 | 5.4 |" in lines
    assert not [line for line in lines if line.startswith("| benchmark c=32, again")]  # no such sweep: no row
    ratios = lines[lines.index("| figure | s1 |") :]
    # the median of 110 and 114 is 112: 100 / 112, outside their range
    assert "| steady c=32 uninterrupted p95 | 0.89×* |" in ratios
    assert "| steady c=32 req/s | 1.07×* |" in ratios
    assert "| decode step, to the next p50 ms | 0.87×* |" in ratios
    assert "| prompt step, prompt builder p50 ms | 1.00× |" in ratios  # within the baseline's range: no star


def test_a_round_without_its_folder_or_a_baseline_not_among_the_rounds_is_refused(tmp_path: Path) -> None:
    write_round(tmp_path / "a1", 110, 20.0, 11.0)
    assert table(tmp_path, "--rounds", "a1", "s1").returncode == 2
    refused = table(tmp_path, "--rounds", "a1", "--baseline", "a2")
    assert refused.returncode == 2 and "a2" in refused.stderr


def test_steps_shows_each_phase_of_the_talkers_steps_at_one_stream_and_at_32_one_column_a_round(
    tmp_path: Path,
) -> None:
    """--steps: every phase of both step tables, p50 / p95 a round; a phase no round has is left out, a round without
    the table shows –."""
    write_round(tmp_path / "a1", 110, 20.0, 11.0)
    write_round(tmp_path / "s1", 100, 22.0, 10.0)
    (tmp_path / "a1" / "timeline-c1.md").write_text(TIMELINE.format(prompt_step=7.6, decode_step=4.7))
    done = table(tmp_path, "--rounds", "a1", "s1", "--steps")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    one = lines.index("At one stream (`timeline-c1.md`), ms p50 / p95:")
    burst = lines.index("In a burst of 32 (`timeline-c32.md`), ms p50 / p95:")
    assert one < burst
    assert lines[one + 2] == "| step: phase | a1 | s1 |"
    at_one = lines[one:burst]
    assert "| decode: to the next step | 4.7 / 13.5 | – |" in at_one  # s1 has no timeline at one stream
    assert "| prompt: to the next step | 7.6 / 29.8 | – |" in at_one
    at_32 = lines[burst:]
    assert "| decode: to the next step | 11.0 / 13.5 | 10.0 / 13.5 |" in at_32
    assert "| decode: preprocess | 2.7 / 4.5 | 2.7 / 4.5 |" in at_32
    assert "| prompt: prompt | 5.4 / 14.9 | 5.4 / 14.9 |" in at_32
    assert not [line for line in lines if "execute_model" in line]  # in no round's tables: no row
    assert "| decode: to the next step |" not in table(tmp_path, "--rounds", "a1", "s1").stdout  # only with --steps


def test_a_steady_64_is_a_level_of_its_own_where_a_round_ran_it(tmp_path: Path) -> None:
    """lever-starts.sh's steady-c64 (closed-c64) is tabled and judged like the other levels; without it, no row."""
    write_round(tmp_path / "a1", 110, 20.0, 11.0)
    write_round(tmp_path / "m1", 100, 22.0, 10.0)
    run = {"uninterrupted_s": {"p50": 0.1, "p95": 0.151}, "ran_dry_share": 0.01, "throughput_rps": 31.81}
    (tmp_path / "m1" / "closed-c64").mkdir()
    (tmp_path / "m1" / "closed-c64" / "results.json").write_text(json.dumps({"runs": [run]}))
    lines = table(tmp_path, "--rounds", "a1", "m1", "--baseline", "a1").stdout.splitlines()
    assert "| steady c=64 uninterrupted p95 | – | 151 |" in lines
    assert "| steady c=64 ran dry % | – | 1 |" in lines
    assert "| steady c=64 req/s | – | 31.81 |" in lines
    ratios = lines[lines.index("| figure | m1 |") :]
    assert not [line for line in ratios if "steady c=64" in line]  # the baseline lacks it: no ratio to show
    assert "steady c=64" not in table(tmp_path, "--rounds", "a1").stdout


def test_the_benchmark_at_one_stream_is_a_row_and_a_ratio_where_the_rounds_ran_it(tmp_path: Path) -> None:
    for name, rps, p95 in (("a1", 1.80, 40.0), ("x1", 1.95, 36.0), ("a2", 1.84, 44.0)):
        write_round(tmp_path / name, 110, 20.0, 11.0)
        bench = tmp_path / name / "bench-c1"
        bench.mkdir()
        (bench / "c1-service.json").write_text(
            json.dumps({"request_throughput": rps, "p50_audio_ttfp_ms": 30.0, "p95_audio_ttfp_ms": p95})
        )
    done = table(tmp_path, "--rounds", "a1", "x1", "a2", "--baseline", "a1", "a2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "| benchmark c=1 req/s | 1.80 | 1.95 | 1.84 |" in lines
    assert not [line for line in lines if line.startswith("| benchmark c=8")]  # no such sweep: no row
    ratios = lines[lines.index("| figure | x1 |") :]
    assert "| benchmark c=1 TTFP p95 | 0.86×* |" in ratios  # 36 against the median of 40 and 44


def test_the_share_of_the_hosts_cpu_time_stolen_over_a_level_is_a_row_where_it_was_read(tmp_path: Path) -> None:
    write_round(tmp_path / "a1", 110, 20.0, 11.0)
    write_round(tmp_path / "x1", 100, 22.0, 10.0)
    (tmp_path / "x1/closed-c32/host-cpu.md").write_text(
        "| host CPU busy % | iowait % | steal % |\n| --- | --- | --- |\n| 41 | 0.2 | 12.5 |\n"
    )
    done = table(tmp_path, "--rounds", "a1", "x1", "--baseline", "a1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "| steady c=32 host steal % | – | 12.5 |" in lines
    assert not [line for line in lines if line.startswith("| steady c=8 host steal %")]  # read nowhere: no row
