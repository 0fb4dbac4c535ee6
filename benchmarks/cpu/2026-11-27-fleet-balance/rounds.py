"""Per-round figures of an interleaved open-loop A/B run of speech-loadtest, and each replica's share of the work from
HAProxy's logs.

    python rounds.py RUN/results.json.xz [haproxy-lc.txt.xz haproxy-rr.txt.xz]

A run's `per_request` holds its rounds one after another; a round's size is its number of Poisson arrivals, which the
load tool draws from random.Random(f"{seed}-{rate}-{round}") over duration / rounds seconds (loadtest/runner.py,
loadtest/schedule.py): the same for every target. HAProxy's log lines are those of the run's time span (meta's
started_at .. finished_at), in the short form kept here: time, replica, status, bytes sent (each POST
/v1/audio/speech line's fields 2, 4, 6, 7); the bytes of pcm each replica sent stand for the audio it made.
"""

from __future__ import annotations

import json
import lzma
import random
import re
import sys
from collections import Counter
from datetime import datetime

import numpy as np


def load(path: str) -> dict:
    with (lzma.open if path.endswith(".xz") else open)(path, "rt") as f:
        return json.load(f)


def round_sizes(seed: int, rate: float, duration_s: float, rounds: int) -> list[int]:
    sizes = []
    for index in range(rounds):
        rng = random.Random(f"{seed}-{rate}-{index}")
        at, n = rng.expovariate(rate), 0
        while at < duration_s / rounds:
            n += 1
            at += rng.expovariate(rate)
        sizes.append(n)
    return sizes


def ms(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q) * 1000:.0f}" if values else "–"


def per_round(results: dict) -> None:
    meta = results["meta"]
    seed = meta.get("seed", 0)
    print("| round | target | requests | errors | uninterrupted p50 ms | p95 | TTFA p95 ms | ran dry |")
    print("|---|---|---|---|---|---|---|---|")
    for run in results["runs"]:
        sizes = round_sizes(seed, run["rate"], meta["duration_s"], meta["rounds"])
        assert sum(sizes) == len(run["per_request"]), (sizes, len(run["per_request"]))
        start = 0
        for index, size in enumerate(sizes):
            part = run["per_request"][start : start + size]
            start += size
            ok = [r for r in part if r["ok"]]
            unint = [r["uninterrupted_s"] for r in ok if r.get("uninterrupted_s") is not None]
            ttfa = [r["ttfa_s"] for r in ok if r.get("ttfa_s") is not None]
            dry = sum(1 for r in ok if (r.get("deficit_s") or 0) > 1e-6)
            label = meta["targets"][run["target"]]["label"].split(":")[0]
            print(
                f"| {index + 1} | {label} | {len(part)} | {len(part) - len(ok)} | {ms(unint, 50)} | {ms(unint, 95)} "
                f"| {ms(ttfa, 95)} | {dry} |"
            )


LINE = re.compile(r"^(\S+) (r\d+) (\d+) (\d+)$")


def shares(results: dict, logs: list[str]) -> None:
    meta = results["meta"]
    begin = datetime.fromisoformat(meta["started_at"].replace("Z", "+00:00")).replace(tzinfo=None)
    end = datetime.fromisoformat(meta["finished_at"].replace("Z", "+00:00")).replace(tzinfo=None)
    print("\n| target | replica | requests | share | pcm MB | share of the audio |")
    print("|---|---|---|---|---|---|")
    for target, path in zip(meta["targets"], logs, strict=True):
        count, size = Counter(), Counter()
        for line in (lzma.open if path.endswith(".xz") else open)(path, "rt", errors="replace"):
            m = LINE.search(line)
            if not m:
                continue
            when = datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S.%f")
            if begin <= when <= end and m.group(3) == "200":
                count[m.group(2)] += 1
                size[m.group(2)] += int(m.group(4))
        for replica in sorted(count):
            print(
                f"| {target['label'].split(':')[0]} | {replica} | {count[replica]} | "
                f"{count[replica] / sum(count.values()):.3f} | {size[replica] / 1e6:.0f} | "
                f"{size[replica] / sum(size.values()):.3f} |"
            )


if __name__ == "__main__":
    data = load(sys.argv[1])
    per_round(data)
    if len(sys.argv) > 2:
        shares(data, sys.argv[2:])
