#!/usr/bin/env python3
"""One Markdown summary of PyTorch profiler traces (Chrome trace JSON, gzipped or not): where the GPU's time went and
what the host did around it, per trace, so that the traces themselves (hundreds of MB) need not leave the GPU host.

    python3 deploy/gpu/trace_summary.py PROFILER_DIR [--frames 100] [--top 15] > summary.md

Every `*.json` / `*.json.gz` under PROFILER_DIR is one trace (vllm-omni writes one per stage, sglang-omni one per
pipeline process; a gzip cut short, as sglang-omni 0.1.8's doubled export can leave, falls back to the `.json`
beside it). Per trace:
- the window (first to last GPU kernel), the GPU's busy time in it (kernels and copies, overlaps counted once) and
  the idle rest, which is where a stream waits on the host;
- the kernels by total time (count, total, mean), and how many ran inside CUDA graphs (a non-zero `graph id`);
- the host's launch calls (cudaLaunchKernel, cudaGraphLaunch, ...: count and time) and its annotated spans (vLLM's
  `execute_context_*` steps, `record_function` ranges), by total time.
With `--frames N` (the codec frames the profiled window made) each total is also given per frame.
Then the traces of one window on one clock (each trace's `baseTimeNanoseconds` plus its events' `ts`, both stages'
alike): each trace's first bursts of GPU activity (kernels less than BURST_GAP_US apart), in ms after the window's
first kernel: at one stream, the talker's prefill and first frames against code2wav's first window, which is where a
request's first audio is made. And on that clock each trace's first engine steps that scheduled tokens (vLLM's
`execute_context_*` spans on the host, named by their requests and tokens): the talker's step that made the first
frame against code2wav's first step with a window, and the steps with nothing scheduled counted between. Last, each
trace's first step with tokens: the GPU's busy time inside it and where its last kernel there ended, and its longest
host operations (PyTorch's ops, the CUDA runtime's calls, named ranges; nested ones each listed): where a prefill
step spends its time beside its kernels. And where the later steps with tokens spend their host time, a step on
average: the CUDA runtime's calls, PyTorch's outermost operations, and neither (Python, the engine's own code).
And what the trace's other threads did from its first step with tokens on (the first OTHER_WINDOW_US): their outermost
host operations and the GPU's copies to the host (a burst of them one row), in time order, each thread by its name
where the trace gives one: at one stream,
how the first frame leaves the talker (its output worker's copy to the host and wait for the GPU, the sender's write)
and how code2wav's receiver takes it in.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import re
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# longest names first: cudaLaunchKernelExC is not cudaLaunchKernel
LAUNCH = re.compile(
    r"^(cuda|cu)(LaunchKernelExC|LaunchKernelEx|LaunchKernel|LaunchCooperativeKernel|GraphLaunch|MemcpyAsync)"
)
# the host's ranges (gpu_user_annotation is each one's copy on the GPU's timeline: counted once, on the host)
SPAN_CATEGORIES = {"user_annotation"}
# vLLM names each engine step by its batch: execute_context_<n>(<tokens>)_generation_<m>(<tokens>)
STEP = re.compile(r"^execute_context_\d+\((\d+)\)_generation_\d+\((\d+)\)$")
BURST_GAP_US = 300.0  # idle longer than this ends a burst of GPU activity
BURSTS_SHOWN = 8
STEPS_SHOWN = 10
# host operations kept for the first step's table: shorter ones would be most of a trace's events and none of its time
HOST_CATEGORIES = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}
HOST_OP_MIN_US = 100.0
HOST_OPS_SHOWN = 15
# the other threads' table: operations from this long, within this long of the first step's start, at most so many
OTHER_OP_MIN_US = 20.0
OTHER_WINDOW_US = 60_000.0
OTHER_OPS_SHOWN = 30
OTHER_COPIES_SHOWN = 10  # bursts of copies to the host: about one a step, so that they leave the operations their rows
LATER_STEPS_NAMES = 4  # names shown per column of the later steps' table
# the profiler's own work on the host (Kineto's "overhead" events, such as CUPTI's "Activity Buffer Request"): recorded
# on a thread of its own, but it stalls whatever host operation it lands in, which then looks that much longer
PROFILER_CATEGORIES = {"overhead"}


@dataclass
class Totals:
    count: int = 0
    total_us: float = 0.0

    def add(self, duration_us: float) -> None:
        self.count += 1
        self.total_us += duration_us


@dataclass
class TraceSummary:
    path: Path
    window_us: float = 0.0
    busy_us: float = 0.0
    kernels: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    in_graphs: int = 0
    launches: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    spans: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    # the first bursts of GPU activity, (start, end) in µs on the host's clock (the trace's base time plus its ts)
    bursts: list[tuple[float, float]] = field(default_factory=list)
    # every engine step (start, end, name) on the host's clock, and whether it scheduled any tokens
    steps: list[tuple[float, float, str, bool]] = field(default_factory=list)
    # the first step with tokens: its span on the host's clock and, inside it, the GPU and the host (FirstStep)
    first_step: FirstStep | None = None
    # the later steps with tokens on the same thread: where their host time goes, a step on average (StepsHost)
    later_steps: StepsHost | None = None
    # the other threads' outermost host operations and the GPU's copies from the first step with tokens on, on the
    # host's clock: (start, end, name, category, thread)
    # start, end, name, kind, thread, how many (copies to the host less than BURST_GAP_US apart are one row)
    other_threads: list[tuple[float, float, str, str, str, int]] = field(default_factory=list)


@dataclass
class StepsHost:
    """Where a trace's steps with tokens after its first spend their host time, on the steps' own thread: means a
    step, µs."""

    steps: int
    span_us: float
    runtime_us: dict[str, float]  # the CUDA runtime's and driver's calls, by name
    ops_us: dict[str, float]  # PyTorch's outermost operations, by name (the runtime calls they make included)
    neither_us: float  # in no operation and no runtime call: Python (the engine's own code), the GIL, the OS
    profiler_us: float = 0.0  # the profiler's own work inside the steps (PROFILER_CATEGORIES), in any column above


@dataclass
class FirstStep:
    """A trace's first engine step that scheduled tokens, on the host's clock (µs)."""

    start: float
    end: float
    gpu_busy_us: float  # kernels and copies clipped to the step, overlaps counted once
    last_gpu_end: float | None  # the end of the last kernel or copy that started inside it (may lie past its end)
    # the step thread's host operations of at least HOST_OP_MIN_US inside it: (start, end, name, category, the
    # innermost Python function around it where the trace has Python stacks, else "", the profiler's own work inside
    # it in µs)
    host_ops: list[tuple[float, float, str, str, str, float]]
    profiler_us: float = 0.0  # the profiler's own work inside the step


def read_trace(path: Path) -> dict[str, Any] | list[Any]:
    """A trace's JSON; a gzip cut short falls back to the plain `.json` beside it when there is one."""
    if path.suffix == ".gz":
        try:
            return json.loads(gzip.decompress(path.read_bytes()))
        except (EOFError, OSError, zlib.error, json.JSONDecodeError):
            plain = path.with_suffix("")
            if plain.exists():
                return json.loads(plain.read_text())
            raise
    return json.loads(path.read_text())


def traces_under(folder: Path) -> list[Path]:
    """Every trace under `folder`, a `.json.gz` left out where its `.json` is there too."""
    plain = {p for p in folder.rglob("*.json") if p.is_file()}
    packed = {p for p in folder.rglob("*.json.gz") if p.is_file() and p.with_suffix("") not in plain}
    return sorted(plain | packed)


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """The time covered by intervals (start, end), overlaps counted once."""
    covered, end_so_far = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= end_so_far:
            continue
        covered += end - max(start, end_so_far)
        end_so_far = end
    return covered


def within(start: float, end: float, intervals: list[tuple[float, float]]) -> float:
    """How much of [start, end] the intervals cover, overlaps counted once."""
    return union_us((max(a, start), min(b, end)) for a, b in intervals if a < end and b > start)


def summarize(path: Path, trace: dict[str, Any] | list[Any]) -> TraceSummary:
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    summary = TraceSummary(path)
    gpu: list[tuple[float, float]] = []
    steps_on: dict[tuple[float, float], object] = {}  # a step's (start, end), local clock: its thread
    host_ops: list[tuple[float, float, str, str, object]] = []  # local clock, with the thread
    copies: list[tuple[float, float, str]] = []  # the GPU's copies, local clock
    profiler: list[tuple[float, float]] = []  # the profiler's own work on the host, local clock
    thread_names: dict[object, str] = {}
    origin_us = float(trace.get("baseTimeNanoseconds", 0)) / 1000 if isinstance(trace, dict) else 0.0
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "thread_name":
            thread_names[event.get("tid")] = str((event.get("args") or {}).get("name", ""))
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        name, category = str(event.get("name", "")), str(event.get("cat", ""))
        start, duration = float(event.get("ts", 0.0)), float(event.get("dur", 0.0))
        if category in GPU_CATEGORIES:
            gpu.append((start, start + duration))
            if category == "gpu_memcpy":
                copies.append((start, start + duration, name))
            if category == "kernel":
                summary.kernels[name].add(duration)
                # kineto tags every kernel with its CUDA graph's id: 0 for one launched on its own
                if (event.get("args") or {}).get("graph id"):
                    summary.in_graphs += 1
        elif launch := LAUNCH.match(name):
            summary.launches[launch.group(0)].add(duration)
        elif category != "gpu_user_annotation" and (step := STEP.match(name)):  # the host's span, not its GPU copy
            summary.spans["execute_context_* (one engine step)"].add(duration)
            tokens = int(step.group(1)) + int(step.group(2))
            summary.steps.append((origin_us + start, origin_us + start + duration, name, tokens > 0))
            if tokens > 0:
                steps_on[(start, start + duration)] = event.get("tid")
        elif category in SPAN_CATEGORIES:
            summary.spans[name].add(duration)
        elif category in PROFILER_CATEGORIES:
            profiler.append((start, start + duration))
        if category in HOST_CATEGORIES and duration >= OTHER_OP_MIN_US and not STEP.match(name):
            host_ops.append((start, start + duration, name, category, event.get("tid")))
    summary.steps.sort()
    if gpu:
        summary.window_us = max(end for _, end in gpu) - min(start for start, _ in gpu)
        summary.busy_us = union_us(gpu)
        summary.bursts = [(origin_us + start, origin_us + end) for start, end in bursts_of(gpu, BURSTS_SHOWN)]
    if steps_on:
        span = min(steps_on)  # the earliest step with tokens
        thread = steps_on[span]
        summary.first_step = first_step(span, thread, gpu, host_ops, origin_us, profiler)
        summary.other_threads = other_threads(span[0], thread, host_ops, copies, thread_names, origin_us)
        later = sorted(other for other, tid in steps_on.items() if tid == thread and other != span)
        if later:
            summary.later_steps = steps_host(events, later, thread, profiler)
    return summary


HOST_TIME_CATEGORIES = {"cpu_op", "cuda_runtime", "cuda_driver"}


def steps_host(
    events: list[Any], spans: list[tuple[float, float]], thread: object, profiler: list[tuple[float, float]]
) -> StepsHost:
    """Where the steps `spans` (sorted, one thread's, the trace's clock) spend their host time on `thread`, and how
    much of it was the profiler's own work (`profiler`)."""
    starts = [start for start, _ in spans]
    inside: list[list[tuple[float, float, str, str]]] = [[] for _ in spans]
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X" or event.get("tid") != thread:
            continue
        category, name = str(event.get("cat", "")), str(event.get("name", ""))
        if category not in HOST_TIME_CATEGORIES or STEP.match(name):  # a step's own span is not inside it
            continue
        start = float(event.get("ts", 0.0))
        end = start + float(event.get("dur", 0.0))
        at = bisect.bisect_right(starts, start) - 1
        if at >= 0 and end <= spans[at][1]:
            inside[at].append((start, end, name, category))
    runtime: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    neither = 0.0
    for (start, end), events_in in zip(spans, inside, strict=True):
        covered: list[tuple[float, float]] = []
        outer_end = float("-inf")
        for op_start, op_end, name, category in sorted(events_in, key=lambda op: (op[0], -op[1])):
            if category == "cpu_op":
                if op_start >= outer_end:  # not inside the operation before it: an outermost one
                    ops[name] += op_end - op_start
                    covered.append((op_start, op_end))
                    outer_end = op_end
            else:
                runtime[name] += op_end - op_start
                covered.append((op_start, op_end))
        neither += (end - start) - union_us(covered)
    count = len(spans)
    return StepsHost(
        steps=count,
        span_us=sum(end - start for start, end in spans) / count,
        runtime_us={name: total / count for name, total in runtime.items()},
        ops_us={name: total / count for name, total in ops.items()},
        neither_us=neither / count,
        profiler_us=sum(within(start, end, profiler) for start, end in spans) / count,
    )


def first_step(
    span: tuple[float, float],
    thread: object,
    gpu: list[tuple[float, float]],
    host_ops: list[tuple[float, float, str, str, object]],
    origin_us: float,
    profiler: list[tuple[float, float]],
) -> FirstStep:
    """The GPU and the step's own thread inside the step `span` (all on the trace's clock), given on the host's
    (`origin_us`, the trace's base time, added), with the profiler's own work (`profiler`) inside each operation."""
    start, end = span
    last = max((b for a, b in gpu if start <= a < end), default=None)
    mine = [(a, b, name, kind) for a, b, name, kind, tid in host_ops if tid == thread and a < end and b > start]
    python = [(a, b, name) for a, b, name, kind in mine if kind == "python_function"]  # a trace with stacks
    ops = [
        (a, b, name, kind)
        for a, b, name, kind in mine
        if kind != "python_function" and a >= start and b <= end and b - a >= HOST_OP_MIN_US
    ]
    ops.sort(key=lambda op: op[0] - op[1])  # longest first
    return FirstStep(
        start + origin_us,
        end + origin_us,
        within(start, end, gpu),
        None if last is None else last + origin_us,
        [
            (a + origin_us, b + origin_us, name, kind, caller(a, b, python), within(a, b, profiler))
            for a, b, name, kind in ops[:HOST_OPS_SHOWN]
        ],
        within(start, end, profiler),
    )


def caller(start: float, end: float, python: list[tuple[float, float, str]]) -> str:
    """The innermost Python function of the code's own (a trace recorded with stacks) around [start, end], or "".
    PyTorch's Python tracer also records each call into C (`<built-in method empty of type object at 0x...>`), the
    innermost frame around nearly every operation, which names the operation again: those are passed over."""
    around = [(b - a, name) for a, b, name in python if a <= start and b >= end and is_code(name)]
    return min(around)[1] if around else ""


def is_code(frame: str) -> bool:
    """A Python tracer's frame of a function in a source file (`path.py(line): name`) or a module (`nn.Module: X`)."""
    return ".py(" in frame or frame.startswith("nn.Module:")


def other_threads(
    start: float,
    thread: object,
    host_ops: list[tuple[float, float, str, str, object]],
    copies: list[tuple[float, float, str]],
    thread_names: dict[object, str],
    origin_us: float,
) -> list[tuple[float, float, str, str, str, int]]:
    """From `start` (the first step with tokens, the trace's clock) for OTHER_WINDOW_US: every thread's but `thread`'s
    outermost host operations (one inside another on its thread left out), the first OTHER_OPS_SHOWN, and the GPU's
    copies to the host (a frame's codes leaving; the copies to the GPU and within it are the steps' own inputs), those
    less than BURST_GAP_US apart as one row with their count, the first OTHER_COPIES_SHOWN; in time order, on the
    host's clock, each with its thread's name (its id where the trace names none)."""
    end = start + OTHER_WINDOW_US
    rows: list[tuple[float, float, str, str, str, int]] = []
    outer_end: dict[object, float] = {}
    for a, b, name, kind, tid in sorted(host_ops, key=lambda op: (op[0], -op[1])):
        # a trace with Python stacks: its frames would stand as the outermost of every operation below them
        if kind == "python_function" or tid == thread or not start <= a < end or a < outer_end.get(tid, float("-inf")):
            continue
        outer_end[tid] = b
        rows.append((a + origin_us, b + origin_us, name, kind, thread_names.get(tid) or f"thread {tid}", 1))
    rows = rows[:OTHER_OPS_SHOWN]
    bursts: list[list] = []  # start, end, name, count
    for a, b, name in sorted(copy for copy in copies if start <= copy[0] < end and "DtoH" in copy[2]):
        if bursts and a - bursts[-1][1] < BURST_GAP_US:
            bursts[-1][1], bursts[-1][3] = max(bursts[-1][1], b), bursts[-1][3] + 1
        else:
            bursts.append([a, b, name, 1])
    rows += [
        (a + origin_us, b + origin_us, name, "gpu_memcpy", "GPU", n) for a, b, name, n in bursts[:OTHER_COPIES_SHOWN]
    ]
    rows.sort(key=lambda row: row[0])
    return rows


def bursts_of(intervals: Iterable[tuple[float, float]], count: int) -> list[tuple[float, float]]:
    """The first `count` stretches of activity: intervals merged where less than BURST_GAP_US lies between them."""
    bursts: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if bursts and start - bursts[-1][1] < BURST_GAP_US:
            bursts[-1] = (bursts[-1][0], max(bursts[-1][1], end))
        elif len(bursts) == count:
            break
        else:
            bursts.append((start, end))
    return bursts


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _per_frame(us: float, frames: int | None) -> str:
    return f" | {us / frames / 1000:.3f}" if frames else ""


def escaped(name: str) -> str:
    """`name` for a Markdown table's cell: its pipes escaped."""
    return name.replace("|", "\\|")


def cell(name: str) -> str:
    """`name` for a Markdown table's cell, cut to 90 characters."""
    return escaped(name if len(name) <= 90 else name[:87] + "...")


def table(title: str, rows: dict[str, Totals], top: int, frames: int | None) -> list[str]:
    if not rows:
        return []
    head = f"| {title} | count | total ms | mean µs" + (" | ms a frame" if frames else "") + " |"
    lines = [head, "| --- | --- | --- | ---" + (" | ---" if frames else "") + " |"]
    for name, totals in sorted(rows.items(), key=lambda item: -item[1].total_us)[:top]:
        shown = cell(name)
        mean = totals.total_us / totals.count
        lines.append(
            f"| `{shown}` | {totals.count} | {_ms(totals.total_us)} | {mean:.1f}{_per_frame(totals.total_us, frames)} |"
        )
    return [*lines, ""]


def report(summaries: list[TraceSummary], root: Path, top: int, frames: int | None) -> str:
    lines = [f"# Profiler traces under `{root}`", ""]
    if frames:
        lines += [f"Per frame: divided by the {frames} codec frames the window made.", ""]
    for summary in summaries:
        idle = summary.window_us - summary.busy_us
        share = 100 * summary.busy_us / summary.window_us if summary.window_us else 0.0
        kernels = sum(t.count for t in summary.kernels.values())
        lines += [
            f"## `{summary.path.relative_to(root)}`",
            "",
            f"GPU window {_ms(summary.window_us)} ms: busy {_ms(summary.busy_us)} ms ({share:.0f}%), idle "
            f"{_ms(idle)} ms; {kernels} kernels, {summary.in_graphs} of them in CUDA graphs"
            + (f"; busy {summary.busy_us / frames / 1000:.3f} ms a frame" if frames else "")
            + ".",
            "",
        ]
        lines += table("kernel", summary.kernels, top, frames)
        lines += table("host launch call", summary.launches, top, frames)
        lines += table("host span", summary.spans, top, frames)
    lines += on_one_clock(summaries, root)
    lines += later_steps_table(summaries, root)
    if not summaries:
        lines.append("No traces found.")
    return "\n".join(lines) + "\n"


def on_one_clock(summaries: list[TraceSummary], root: Path) -> list[str]:
    """The traces on one clock, in ms after the earliest kernel of them all: each trace's first bursts of GPU activity,
    then its first engine steps that scheduled tokens, with the steps that scheduled nothing between them counted
    (where a stage waited)."""
    timed = [summary for summary in summaries if summary.bursts]
    if not timed:
        return []
    first = min(summary.bursts[0][0] for summary in timed)

    def ms(start: float, end: float) -> str:
        return f"{(start - first) / 1000:.1f}–{(end - first) / 1000:.1f}"

    lines = section(
        "The first GPU activity of each trace, on one clock",
        f"Bursts of kernels less than {BURST_GAP_US / 1000:g} ms apart, start–end in ms after the first kernel of the "
        f"traces above (the first {BURSTS_SHOWN}).",
        "bursts",
        {f"`{summary.path.relative_to(root)}`": ", ".join(ms(*burst) for burst in summary.bursts) for summary in timed},
    )
    steps: dict[str, str] = {}
    for summary in timed:
        shown: list[str] = []
        idle = 0
        for start, end, name, busy in summary.steps:
            if not busy:
                idle += 1
                continue
            shown.append(f"{f'+{idle} idle, ' if idle else ''}`{name}` {ms(start, end)}")
            idle = 0
            if len(shown) == STEPS_SHOWN:
                break
        if shown:
            steps[f"`{summary.path.relative_to(root)}`"] = "; ".join(shown)
    if steps:
        lines += section(
            "The first engine steps of each trace, on one clock",
            f"vLLM's steps that scheduled tokens (the first {STEPS_SHOWN}), start–end in ms on the clock above; "
            "`+n idle` counts the steps with nothing scheduled before each.",
            "steps",
            steps,
        )
    lines += first_step_host(timed, root, first)
    return lines


def first_step_host(summaries: list[TraceSummary], root: Path, first: float) -> list[str]:
    """Each trace's first engine step that scheduled tokens, on the clock above (ms after `first`): the GPU's busy
    time inside it and where the last GPU work it started ended, then the step thread's longest host operations."""

    def at(time_us: float) -> str:
        return f"{(time_us - first) / 1000:.1f}"

    gpu_rows: dict[str, str] = {}
    host_rows: list[str] = []
    for summary in summaries:
        step = summary.first_step
        if step is None:
            continue
        trace = f"`{summary.path.relative_to(root)}`"
        last = "none" if step.last_gpu_end is None else at(step.last_gpu_end)
        profiled = f"; the profiler's own work {step.profiler_us / 1000:.1f} ms of it" if step.profiler_us else ""
        gpu_rows[trace] = (
            f"{at(step.start)}–{at(step.end)}: GPU busy {step.gpu_busy_us / 1000:.1f} ms of its "
            f"{(step.end - step.start) / 1000:.1f}; the last GPU work started inside it ended at {last}{profiled}"
        )
        for start, end, name, category, where, profiler_us in step.host_ops:
            host_rows.append(
                f"| {trace} | `{cell(name)}` | {category} | {at(start)}–{at(end)} | {(end - start) / 1000:.2f} | "
                f"{f'{profiler_us / 1000:.2f}' if profiler_us else '–'} | {f'`{cell(where)}`' if where else '–'} |"
            )
    lines = section(
        "The GPU inside each trace's first step with tokens",
        "The step's start–end in ms on the clock above; the GPU's busy time inside it (kernels and copies clipped to "
        "the step, overlaps counted once, whoever launched them); where the last kernel or copy that started inside "
        "it ended, after the step's end where the GPU ran on past the host.",
        "first step",
        gpu_rows,
    )
    if host_rows:
        lines += titled_table(
            "The longest host operations inside each trace's first step with tokens",
            f"The step's own thread, operations of at least {HOST_OP_MIN_US / 1000:g} ms that lie within the step (the "
            f"first {HOST_OPS_SHOWN}, longest first; an operation and those inside it each listed), start–end in ms "
            "on the clock above; of that, the profiler's own work (CUPTI's buffer requests and the like, on a thread "
            "of its own, stalling the operation), not the operation's; in a trace recorded with Python stacks "
            "(vLLM's `torch_profiler_with_stack`), the innermost Python function around each.",
            ("trace", "operation", "kind", "start–end ms", "ms", "the profiler's own, ms", "in (Python)"),
            host_rows,
        )
    other_rows = [
        f"| `{summary.path.relative_to(root)}` | {escaped(label)} | `{cell(name)}`{f' ×{count}' if count > 1 else ''} "
        f"| {category} | {at(a)}–{at(b)} | {(b - a) / 1000:.2f} |"
        for summary in summaries
        for a, b, name, category, label, count in summary.other_threads
    ]
    if other_rows:
        lines += titled_table(
            "The other threads from each trace's first step with tokens on",
            f"Every thread's but the steps' own: its outermost operations of at least {OTHER_OP_MIN_US / 1000:g} ms "
            f"(the first {OTHER_OPS_SHOWN}), and the GPU's copies to the host, those less than "
            f"{BURST_GAP_US / 1000:g} ms apart as one row with their count (the first {OTHER_COPIES_SHOWN}), that "
            f"started in the {OTHER_WINDOW_US / 1000:g} ms from the first step's start, in time order, start–end in ms "
            "on the clock above.",
            ("trace", "thread", "operation", "kind", "start–end ms", "ms"),
            other_rows,
        )
    return lines if gpu_rows or host_rows or other_rows else []


def later_steps_table(summaries: list[TraceSummary], root: Path) -> list[str]:
    """Where each trace's steps with tokens after its first spend their host time, a step on average."""

    def top(totals: dict[str, float]) -> str:
        ranked = sorted(totals.items(), key=lambda item: -item[1])[:LATER_STEPS_NAMES]
        named = ", ".join(f"`{escaped(name)}` {us / 1000:.2f}" for name, us in ranked)
        return f"{sum(totals.values()) / 1000:.2f}" + (f": {named}" if named else "")

    rows = [
        f"| `{summary.path.relative_to(root)}` | {steps.steps} | {steps.span_us / 1000:.2f} | {top(steps.runtime_us)} "
        f"| {top(steps.ops_us)} | {steps.neither_us / 1000:.2f} | {steps.profiler_us / 1000:.2f} |"
        for summary in summaries
        if (steps := summary.later_steps) is not None
    ]
    if not rows:
        return []
    return titled_table(
        "Where the later steps' host time goes",
        "Each trace's steps with tokens after its first (at one stream, the talker's frames), on their own thread, "
        "ms a step on average: in the CUDA runtime's and driver's calls (launches, copies, waits for the GPU); in "
        "PyTorch's outermost operations (the runtime calls they make included); and in neither — Python between "
        f"them, the engine's own code, waiting for the GIL. The {LATER_STEPS_NAMES} largest of each by name. Last, "
        "how much of the step was the profiler's own work (in any of the three).",
        (
            "trace",
            "steps",
            "ms a step",
            "CUDA runtime calls, ms",
            "PyTorch operations, ms",
            "neither, ms",
            "the profiler's own, ms",
        ),
        rows,
    )


def titled_table(title: str, note: str, columns: tuple[str, ...], rows: list[str]) -> list[str]:
    """A titled Markdown table: its heading, the note under it, the header and the rows (already formatted)."""
    return [
        f"## {title}",
        "",
        note,
        "",
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
        *rows,
        "",
    ]


def section(title: str, note: str, column: str, rows: dict[str, str]) -> list[str]:
    """A titled Markdown table of one row a trace."""
    return titled_table(title, note, ("trace", column), [f"| {trace} | {shown} |" for trace, shown in rows.items()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where the traces are (searched recursively)")
    parser.add_argument("--frames", type=int, help="codec frames the profiled window made: totals per frame too")
    parser.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    args = parser.parse_args(argv)
    summaries = []
    for path in traces_under(args.folder):
        try:
            summaries.append(summarize(path, read_trace(path)))
        except (OSError, ValueError, EOFError, zlib.error) as exc:
            print(f"{path}: not read ({exc})", file=sys.stderr)
    sys.stdout.write(report(summaries, args.folder, args.top, args.frames))
    return 0


if __name__ == "__main__":
    sys.exit(main())
