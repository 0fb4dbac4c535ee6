"""Which code2wav windows run in the next decoding step: first audio first, and no listener left to run dry.

Pure bookkeeping, no engine imports: the code2wav scheduler (`code2wav_scheduler` beside it) feeds it the windows it
schedules and asks it which streams may wait. Every stream has a deadline: its next audio is due when its
listener's buffer runs out, and a stream that has produced no audio yet is due now. A step that carries a first
window should be short, so the steady windows of streams that hold plenty of audio wait (for as many steps as the
scheduler's bound allows: with none, until they are down to the margin). A step may also be capped: beyond the cap,
the windows of the streams furthest ahead of their listeners wait. Everything else keeps vllm-omni's order.

The audio a listener holds is counted from the windows actually scheduled, not from a predicted schedule, so it
follows whatever sizes the talker chose (a fixed first window, `codec_chunk_ramp`, or `codec_chunk_adaptive`, which
picks each size at run time from the buffer depth).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FRAME_SECONDS = 0.08  # Qwen3-TTS-12Hz: one codec frame is 1920 samples at 24 kHz
CODE_GROUPS = 16  # Qwen3-TTS-12Hz: a frame is 16 codec tokens (num_code_groups), flattened into the window's prompt


def window_frames(scheduled_tokens: int, left_context_frames: int = 0) -> float:
    """New audio frames in a step's part of a window: its codec tokens over the 16 code groups, less the frames
    decoded only as context (vllm-omni 0.30's decoder is stateful, so only the first window of a request with
    reference codes carries any: `left_context_size` in the window's meta). A window cut by the token budget counts
    the part scheduled."""
    return max(0.0, scheduled_tokens / CODE_GROUPS - left_context_frames)


@dataclass
class StreamClock:
    """How much audio one stream has been given, and since when its listener has been playing."""

    first_at: float  # when its first window was scheduled (its listener starts about one step later)
    frames: float  # audio frames its scheduled windows carry (new frames, not context)

    def buffered_s(self, now: float) -> float:
        """Audio its listener holds at `now`, assuming playback began when the first window was scheduled."""
        return self.frames * FRAME_SECONDS - (now - self.first_at)


class FirstAudioFirst:
    """Decides which streams' windows may wait a step so that new streams' first windows run in a short step.

    `margin_s`: a stream may wait only while its listener holds more than this much audio, checked again at every
    step. One step of code2wav takes tens of milliseconds (~200 ms at p95, measured under load on 0.26), so a margin
    of a second leaves a stream that waits far from a stall."""

    def __init__(self, margin_s: float = 1.0) -> None:
        self.margin_s = margin_s
        self._clocks: dict[str, StreamClock] = {}

    def has_started(self, request_id: str) -> bool:
        return request_id in self._clocks

    def may_wait(self, request_id: str, now: float) -> bool:
        """True for a stream whose listener can spare one step: a stream not yet started never waits."""
        clock = self._clocks.get(request_id)
        return clock is not None and clock.buffered_s(now) > self.margin_s

    def furthest_ahead(self, request_ids: Iterable[str], count: int, now: float) -> list[str]:
        """Up to `count` of these streams, those whose listeners hold the most audio first; only streams that may
        wait are chosen, so the most urgent windows always run."""
        spare = [(self._clocks[r].buffered_s(now), r) for r in request_ids if self.may_wait(r, now)]
        spare.sort(key=lambda held: held[0], reverse=True)
        return [request_id for _, request_id in spare[: max(count, 0)]]

    def scheduled(self, frames: Mapping[str, float], now: float) -> int:
        """Record one step's windows (stream -> new audio frames); returns how many of them were first windows."""
        firsts = 0
        for request_id, new_frames in frames.items():
            clock = self._clocks.get(request_id)
            if clock is None:
                self._clocks[request_id] = StreamClock(first_at=now, frames=new_frames)
                firsts += 1
            else:
                clock.frames += new_frames
        return firsts

    def forget_all_but(self, live: Iterable[str]) -> None:
        """Drop the clocks of streams that ended (finished or aborted)."""
        keep = set(live)
        for request_id in [r for r in self._clocks if r not in keep]:
            del self._clocks[request_id]

    def __len__(self) -> int:
        return len(self._clocks)


def percentile(values: list[float] | list[int], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class StepProbe:
    """Counts of what a busy stage did, summed over an interval and reported as one line (logging only)."""

    interval_s: float
    started: float = field(default_factory=time.monotonic)
    steps: int = 0
    windows: int = 0
    max_windows: int = 0
    first_windows: int = 0
    deferred: int = 0
    fill_holds: int = 0  # schedules held back whole to fill the step (code2wav_fill_windows)
    first_waits_s: list[float] = field(default_factory=list)
    results_s: list[float] = field(default_factory=list)
    first_results_s: list[float] = field(default_factory=list)  # steps that carried a first window
    streams: list[int] = field(default_factory=list)  # requests the stage held (running + waiting) at each step

    def step(self, windows: int, first_windows: int, deferred: int, streams: int = 0, filling: bool = False) -> None:
        self.fill_holds += filling
        if windows:
            self.steps += 1
            self.windows += windows
            self.max_windows = max(self.max_windows, windows)
            self.streams.append(streams)
        self.first_windows += first_windows
        self.deferred += deferred

    def first_wait(self, seconds: float) -> None:
        self.first_waits_s.append(seconds)

    def result(self, seconds: float, first: bool = False) -> None:
        self.results_s.append(seconds)
        if first:
            self.first_results_s.append(seconds)

    def due(self, now: float) -> bool:
        return self.interval_s > 0 and now - self.started >= self.interval_s

    def report(self, now: float) -> dict[str, float | int]:
        """The interval's numbers; starts the next interval."""
        elapsed = max(now - self.started, 1e-9)
        line: dict[str, float | int] = {
            "seconds": round(elapsed, 1),
            "steps": self.steps,
            "windows_per_step": round(self.windows / self.steps, 2) if self.steps else 0,
            "max_windows": self.max_windows,
            "first_windows": self.first_windows,
            "deferred_windows": self.deferred,
            "fill_holds": self.fill_holds,
            "first_wait_p50_ms": round(percentile(self.first_waits_s, 0.5) * 1000, 1),
            "first_wait_p95_ms": round(percentile(self.first_waits_s, 0.95) * 1000, 1),
            "step_result_p50_ms": round(percentile(self.results_s, 0.5) * 1000, 1),
            "step_result_p95_ms": round(percentile(self.results_s, 0.95) * 1000, 1),
            "first_step_result_p50_ms": round(percentile(self.first_results_s, 0.5) * 1000, 1),
            "first_step_result_p95_ms": round(percentile(self.first_results_s, 0.95) * 1000, 1),
            "streams_p50": percentile(self.streams, 0.5),
            "streams_max": max(self.streams, default=0),
        }
        self.started = now
        self.steps = self.windows = self.max_windows = self.first_windows = self.deferred = self.fill_holds = 0
        self.first_waits_s, self.results_s, self.first_results_s, self.streams = [], [], [], []
        return line
