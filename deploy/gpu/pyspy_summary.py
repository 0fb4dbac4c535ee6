#!/usr/bin/env python3
"""One Markdown summary of py-spy's raw recordings (`py-spy record -f raw`, one file per process, gzipped or not):
which Python held each server process's time, so that a step bound by the host, not the GPU, says where.

    python3 deploy/gpu/pyspy_summary.py PYSPY_DIR [--rate 200] [--seconds 8] [--names cpu-after-c32.txt] > pyspy.md

`deploy/gpu/lever-starts.sh` records each process of the server with `--gil --idle` (a sample only where one of the
process's threads holds the GIL, idle-looking frames included) at `--rate` samples a second for `--seconds`: a
process's samples over rate x seconds is then the share of the window its GIL was held, near 1 where its Python is
the bottleneck. Samples py-spy failed to read (`--nonblocking`; its log beside the recording, `<pid>.log`, says
`Errors: N`) are left out of that window. Per process:
- the samples and that share; by thread where the recording names threads;
- the samples by where their innermost frame is (vllm-omni, vLLM, torch, the service, asyncio...), which library's
  code the time was spent in;
- the functions by their own samples (the innermost frame), and by the samples they are on the stack of, leaving
  out a thread's start (threading's, runpy's) and what is on nearly every stack, which say nothing of where the
  time went.
`--names` reads each pid's command line from lever-starts.sh's thread table (`# pid N: command`).

With `--wall`, a recording of every thread (`--idle` without `--gil`) of a process and the processes it started
(`--subprocesses`, one file): each stack goes to the innermost process py-spy names on it, and a sample is 1/rate s of
one thread's time, so a function's samples over the rate are the seconds threads spent in it, as lever-starts.sh's
START_PYSPY records a start.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# a frame py-spy writes: "function (path:line)"; a thread or process py-spy puts first: "thread (0x7f..)" or
# "thread (1234): name", "process 1234:"python3 ...""
FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
PROCESS = re.compile(r'^process (?P<pid>\d+):"(?P<command>.*)"$', re.DOTALL)
# a process py-spy puts first (`--subprocesses`): its command line unescaped, `;` and all (a spawned child's is
# `python3 -c from multiprocessing.spawn import spawn_main; spawn_main(...)`), so it ends where the next process or
# thread begins, or else at the first `";`
PROCESS_FIRST = re.compile(r'process \d+:".*?";(?=process \d+:"|thread \()|process \d+:"[^"]*";')
META = re.compile(r"^(thread|process) ")
# where a frame's file is, by the first of these its path holds (site-packages paths and a checkout's alike)
AREAS = (
    ("vllm_omni/", "vllm-omni"),
    ("vllm/", "vLLM"),
    ("torch/", "torch"),
    ("triton/", "Triton"),
    ("app/", "the service"),
    ("asyncio/", "asyncio"),
    ("threading.py", "threading"),
    ("queue.py", "queue"),
    ("multiprocessing/", "multiprocessing"),
    ("zmq/", "pyzmq"),
    ("msgspec/", "msgspec"),
    ("uvicorn/", "uvicorn"),
)
EVERYWHERE = 0.95  # a function on at least this share of a process's stacks is left out of the inclusive table
# frames under every thread's own code (a thread's start, runpy's, a spawned process's start): on every stack of
# their thread, left out of that table
SCAFFOLD = ("threading.py", "<frozen runpy>", "multiprocessing/spawn.py", "multiprocessing/process.py", "<string>")


@dataclass
class Recording:
    """One process's samples: each distinct stack (outermost first) with its count, and the thread it was on."""

    stacks: Counter[tuple[str, tuple[str, ...]]] = field(default_factory=Counter)

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())


def read_by_process(lines: Iterable[str]) -> dict[str, Recording]:
    """py-spy's raw format (`frame;frame;...;frame COUNT` a line, the outermost frame first) by process: with
    `--subprocesses` each stack begins with its processes, the recorded one first, so a stack is the last one's
    (`process 123:"command"`); without, every stack is the recorded process's (key "")."""
    recordings: dict[str, Recording] = defaultdict(Recording)
    for line in lines:
        line = line.rstrip("\n")
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        process = ""
        while match := PROCESS_FIRST.match(stack):
            process, stack = match[0][:-1], stack[match.end() :]
        frames = stack.split(";")
        thread = ""
        while frames and META.match(frames[0]):
            thread = frames[0] if frames[0].startswith("thread ") else thread
            frames = frames[1:]
        recordings[process].stacks[(thread, tuple(frames))] += int(count)
    return dict(recordings)


def merged(recordings: dict[str, Recording]) -> Recording:
    """Every stack of a recording, whichever process it was in."""
    every = Recording()
    for recording in recordings.values():
        every.stacks.update(recording.stacks)
    return every


def load_by_process(path: Path) -> dict[str, Recording]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as lines:
        return read_by_process(lines)


def load(path: Path) -> Recording:
    return merged(load_by_process(path))


def function_of(frame: str) -> tuple[str, str]:
    """(function, path) of a frame, the line left out: a function's samples add up over its lines."""
    match = FRAME.match(frame)
    return (match["function"], match["path"]) if match else (frame, "")


def area_of(path: str) -> str:
    for marker, area in AREAS:
        if marker in path:
            return area
    return "other" if path else "native or unknown"


def short(path: str) -> str:
    """A path from its package on (site-packages and a checkout's root dropped)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def table(rows: list[tuple[str, int]], total: int, head: str, top: int) -> list[str]:
    out = [f"| {head} | samples | share |", "| --- | --- | --- |"]
    for name, count in rows[:top]:
        cell = name.replace("|", "\\|")
        out.append(f"| {cell} | {count} | {count / total:.0%} |")
    return out


def summary(name: str, recording: Recording, window_samples: float, top: int, failed: int = 0) -> list[str]:
    total = recording.samples
    lines = [f"## {name}", ""]
    if not total:
        return [*lines, "No samples.", ""]
    window = window_samples - failed
    share = f", {total / window:.0%} of the window's {window:.0f}" if window > 0 else ""
    missed = f" ({failed} py-spy failed to read, left out of the window)" if failed else ""
    lines += [f"{total} samples{share}{missed}.", ""]
    threads: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    own: Counter[str] = Counter()
    on_stack: Counter[str] = Counter()
    for (thread, frames), count in recording.stacks.items():
        threads[thread or "(threads not named)"] += count
        if not frames:
            areas["native or unknown"] += count
            continue
        function, path = function_of(frames[-1])
        areas[area_of(path)] += count
        own[f"`{function}` ({short(path)})"] += count
        for label in {f"`{f}` ({short(p)})" for f, p in map(function_of, frames) if not p.endswith(SCAFFOLD)}:
            on_stack[label] += count
    if len(threads) > 1 or "(threads not named)" not in threads:
        lines += [*table(threads.most_common(), total, "thread", top), ""]
    lines += [*table(areas.most_common(), total, "where the innermost frame is", top), ""]
    lines += [*table(own.most_common(), total, "function, by its own samples", top), ""]
    inclusive = [(label, count) for label, count in on_stack.most_common() if count < EVERYWHERE * total]
    lines += [*table(inclusive, total, f"function, by the samples it is on the stack of (under {EVERYWHERE:.0%})", top)]
    return [*lines, ""]


def failed_samples(log: Path) -> int:
    """The samples py-spy could not read, from its log (`Errors: N`); 0 where it says none or there is no log."""
    if not log.is_file():
        return 0
    counts = re.findall(r"Errors: (\d+)", log.read_text(encoding="utf-8", errors="replace"))
    return int(counts[-1]) if counts else 0


def names_from(table_path: Path | None) -> dict[str, str]:
    """pid -> command line, from lever-starts.sh's thread table (`# pid 123: python3 -m ...`)."""
    if table_path is None or not table_path.is_file():
        return {}
    names = {}
    for line in table_path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = re.match(r"^# pid (\d+): (.*)$", line)
        if match:
            names[match[1]] = match[2].strip()
    return names


def titled(pid: str, command: str) -> str:
    """A process's heading: its pid, and its command line (the first 100 characters) where known."""
    return f"pid {pid}" + (f": `{command[:100]}`" if command else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="py-spy's raw recordings, <pid>.txt or <pid>.txt.gz")
    parser.add_argument("--rate", type=float, default=200.0, help="samples a second it was recorded at")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long it recorded")
    parser.add_argument("--names", type=Path, help="lever-starts.sh's thread table, for each pid's command line")
    parser.add_argument("--top", type=int, default=15, help="rows a table")
    parser.add_argument("--wall", action="store_true", help="every thread recorded, by process (--subprocesses)")
    args = parser.parse_args(argv)
    paths = sorted(p for p in args.folder.glob("*.txt*") if p.suffix in (".txt", ".gz") and p.is_file())
    if not paths:
        print(f"no py-spy recordings under {args.folder}", file=sys.stderr)
        return 1
    if args.wall:
        return wall(paths, args.folder, args.rate, args.top)
    names = names_from(args.names)
    recordings = [(path, load(path)) for path in paths]
    recordings.sort(key=lambda item: -item[1].samples)
    window = args.rate * args.seconds
    print(f"# Where each process's Python spent its time (py-spy, `{args.folder}`)\n")
    print(f"{args.rate:g} samples a second for {args.seconds:g} s: {window:.0f} samples are a GIL held throughout.\n")
    for path, recording in recordings:
        pid = path.name.split(".", 1)[0]
        failed = failed_samples(path.parent / f"{pid}.log")
        print("\n".join(summary(titled(pid, names.get(pid, "")), recording, window, args.top, failed)))
    return 0


def wall(paths: list[Path], folder: Path, rate: float, top: int) -> int:
    """Each process of every recording (`--wall`), the one with the most thread time first."""
    processes: list[tuple[str, Recording]] = []
    for path in paths:
        for label, recording in load_by_process(path).items():
            match = PROCESS.match(label)
            title = titled(match["pid"], match["command"]) if match else titled(path.name.split(".", 1)[0], "")
            processes.append((title, recording))
    processes.sort(key=lambda item: -item[1].samples)
    print(f"# Where each process's threads spent their time (py-spy, `{folder}`)\n")
    print(f"{rate:g} samples a second of every thread, idle or not: a sample is {1000 / rate:g} ms of one thread.\n")
    for title, recording in processes:
        seconds = f"{recording.samples / rate:.1f} s of its threads' time"
        print("\n".join(summary(f"{title} ({seconds})", recording, 0, top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
