"""The tests that assert on wall-clock time (`-m timing`), run again and again while every core of the machine is
kept busy by another process, so that a bound that holds only on an idle machine shows itself here rather than in CI.

    python -m tests.support.timing_stress [--runs 20] [--burners N] [--until HH:MM] [-- pytest args]

Each run is one pytest process over `-m timing` (its own servers, as `make test` starts them); the burners are plain
Python busy loops at the default priority, one a core unless said. Prints one line a run and a Markdown summary.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pytest's last line, with or without -q's rules around it: "82 passed, 1780 deselected in 220.13s (0:03:40)"
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|error).*?) in [0-9.]+s", re.MULTILINE)


def burn() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1, help="busy processes (default: one a core)")
    parser.add_argument("--until", help="start no run after this local time (HH:MM)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    deadline = None
    if args.until:
        hour, minute = (int(part) for part in args.until.split(":"))
        deadline = datetime.datetime.now().replace(hour=hour, minute=minute, second=0, microsecond=0)
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for burner in burners:
        burner.start()
    rows: list[str] = []
    failed = 0
    try:
        for run in range(1, args.runs + 1):
            if deadline is not None and datetime.datetime.now() >= deadline:
                print(f"stopped before run {run}: past {args.until}", flush=True)
                break
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "timing", *args.pytest_args],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            seconds = time.monotonic() - started
            outcome = SUMMARY.findall(done.stdout)
            line = outcome[-1] if outcome else f"exit {done.returncode}"
            if done.returncode != 0:
                failed += 1
                failures = [text for text in done.stdout.splitlines() if text.startswith(("FAILED", "ERROR"))]
                line += "; " + "; ".join(failures)
            rows.append(f"| {run} | {seconds:.0f} | {line} |")
            print(f"run {run}: {seconds:.0f} s, {line}", flush=True)
    finally:
        for burner in burners:
            burner.terminate()
    print(f"\n{len(rows)} runs with {args.burners} busy processes beside them, {failed} failed\n")
    print("| run | seconds | pytest's summary |\n| --- | --- | --- |")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
