"""Where the service's start on its omni engine (vllm-omni) went, from its log: the milestones the server, the talker's
stage process and code2wav's stage process log on their way to ready, each with its time since the server started and
since the milestone before it on the same track (server, talker, code2wav: with parallel stage init the two stages'
milestones interleave, and a track's own gaps are what each spent).

The service logs JSON lines with milliseconds; vLLM logs `INFO 11-29 10:48:14 [file.py:123] ...` (to the second, no
year: the year is the first JSON line's), a stage process's lines prefixed `(StageEngineCoreProc_stage<N>_... pid=..)`.
A milestone not in the log (a start that failed, another vllm-omni) is left out, and so said.

    python3 deploy/gpu/omni_start_phases.py LOG     (a gzipped log reads as a plain one)
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, whether run as a script or loaded by path
from sglang_timeline import read_lines

# (track, milestone, what the line holds): the first line of its track that matches; "" as the pattern is the track's
# first line at all (a stage process's: it has been spawned and has imported what it logs with)
MILESTONES: tuple[tuple[str, str, str], ...] = (
    ("server", "the server's process started", '"message": "Started server process'),
    ("server", "the omni engine starting", '"message": "omni engine starting"'),
    ("server", "the stages' models inspected (vLLM's model info)", '"message": "stage models inspected"'),
    ("server", "vllm-omni's orchestrator launched", "Launching Orchestrator thread"),
    ("talker", "the talker's process logging (spawned, imported)", ""),
    ("talker", "its engine configured", "Initializing a V1 LLM engine"),
    ("talker", "its weights loaded", "Model loading took"),
    ("talker", "its model compiled (torch.compile)", "torch.compile took"),
    # vLLM logs the size in tokens whether it measured the memory or was given it (the service sizes it to start
    # both stages at once)
    ("talker", "its KV cache sized", "GPU KV cache size:"),
    ("talker", "its CUDA graphs captured", "Graph capturing finished"),
    ("talker", "its code predictor warmed up and captured", "Captured MRv2 mtp graphs"),
    ("talker", "the talker ready", "init engine (profile, create kv cache, warmup model) took"),
    ("code2wav", "code2wav's process logging (spawned, imported)", ""),
    ("code2wav", "its engine configured", "Initializing a V1 LLM engine"),
    ("code2wav", "its weights and decoder graphs loaded", "Model loading took"),
    ("code2wav", "code2wav ready", "init engine (profile, create kv cache, warmup model) took"),
    ("server", "both stages up (AsyncOmni built)", "AsyncOmniEngine initialized"),
    ("server", "the engine started", '"message": "omni engine started"'),
    ("server", "the engine warmed up (ready)", '"message": "omni engine ready"'),
    ("server", "the server serving", '"message": "started"'),
)
STAGE_TRACKS = {"0": "talker", "1": "code2wav"}
STAGE = re.compile(r"^\(StageEngineCoreProc_stage(\d+)\S* pid=\d+\) ")
VLLM_STAMP = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) ")


@dataclass(frozen=True)
class Milestone:
    track: str
    name: str
    at: datetime


def stamp(line: str, year: int | None) -> datetime | None:
    """A line's time: its JSON `ts`, else vLLM's month-day time in `year`; None for a line with neither."""
    if line.startswith("{"):
        try:
            ts = json.loads(line).get("ts")
        except ValueError:
            return None
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=None) if ts else None
    found = VLLM_STAMP.match(line)
    if found is None or year is None:
        return None
    return datetime.strptime(f"{year}-{found.group(1)}", "%Y-%m-%d %H:%M:%S")


def milestones(lines: Iterable[str]) -> list[Milestone]:
    """Each milestone's first line, in the log's order of them (a track's milestones in their order: one is looked for
    only after the line of the one found before it on its track)."""
    found: list[Milestone] = []
    next_of: dict[str, int] = {}  # track -> index into its milestones still to find
    by_track: dict[str, list[tuple[str, str]]] = {}
    for track, name, pattern in MILESTONES:
        by_track.setdefault(track, []).append((name, pattern))
    year: int | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        stage = STAGE.match(line)
        track = STAGE_TRACKS.get(stage.group(1), "") if stage else "server"
        if stage:
            line = line[stage.end() :]
        if year is None and line.startswith("{"):  # vLLM's lines have none: the service's first JSON line's
            first = stamp(line, None)
            year = first.year if first else None
        wanted, start = by_track.get(track, []), next_of.get(track, 0)
        # the first milestone still to come that this line is (one never logged is passed over, and left out)...
        index = next((i for i in range(start, len(wanted)) if wanted[i][1] in line), None)
        at = stamp(line, year) if index is not None else None
        if index is None or at is None:
            continue
        # ...and those right after it that it is too (a stage process's first line is often its engine's config)
        while index < len(wanted) and wanted[index][1] in line:
            found.append(Milestone(track, wanted[index][0], at))
            index += 1
        next_of[track] = index
    return found


def table(found: list[Milestone]) -> list[str]:
    """A markdown table: each milestone, its seconds since the first, and since the one before it on its track (a
    stage's first: since the one before it on any track, which is what spawning its process and its imports took)."""
    if not found:
        return ["no milestone of the omni engine's start in this log"]
    start = found[0].at
    rows = ["| track | milestone | at s | since the one before on its track, s |", "| --- | --- | --- | --- |"]
    last: dict[str, datetime] = {}
    latest = start
    for milestone in sorted(found, key=lambda m: m.at):
        before = last.get(milestone.track, latest)
        at, since = (milestone.at - start).total_seconds(), (milestone.at - before).total_seconds()
        rows.append(f"| {milestone.track} | {milestone.name} | {at:.1f} | {since:.1f} |")
        last[milestone.track] = latest = milestone.at
    seen = {(m.track, m.name) for m in found}
    missing = [f"{track}: {name}" for track, name, _ in MILESTONES if (track, name) not in seen]
    if missing:
        rows.append("")
        rows.append("not in the log: " + "; ".join(missing))
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print("\n".join(table(milestones(read_lines(Path(argv[0]))))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
