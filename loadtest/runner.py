"""Closed-loop (fixed concurrency) and open-loop (Poisson arrivals) runs, targets interleaved per level."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import httpx

from loadtest.engine_target import run_on_engine
from loadtest.measure import RequestResult, describe_exception, measure
from loadtest.schedule import LoopRun, TextCycle, closed_loop, open_loop
from loadtest.targets import Target
from loadtest.ws import UtteranceResult, measure_utterance

WARM_UP = "warm-up"  # the mode of a level's warm-up, recorded apart from it


@dataclass
class LevelRun:
    """All requests of one target at one level (a concurrency or an arrival rate), over all its rounds."""

    target: Target
    mode: str  # "concurrency" or "rate" (WARM_UP: a level's warm-up)
    level: float
    results: list[RequestResult] = field(default_factory=list)
    wall_s: float = 0.0
    peak_in_flight: int = 0
    # the rounds' steady windows (loadtest.schedule), those long enough to count (steady_minimum)
    held_s: float = 0.0
    finished_while_held: int = 0
    audio_s_while_held: float = 0.0
    # the warm-up sent before the level: how many, and those that failed (the level was then measured cold)
    warmup_sent: int = 0
    warmup_failures: list[RequestResult] = field(default_factory=list)

    def add(self, loop: LoopRun) -> None:
        """One round's times. Its steady window counts only if it is long enough: a sum of windows too short to
        measure a rate (a wave's few microseconds) would read as an absurd one."""
        self.wall_s += loop.wall_s
        if loop.held_s > 0 and loop.finished_while_held >= steady_minimum(self.mode, self.level):
            self.held_s += loop.held_s
            self.finished_while_held += loop.finished_while_held
            self.audio_s_while_held += loop.audio_s


def steady_minimum(mode: str, level: float) -> int:
    """The answers a steady window must count to give a rate: one full turnover of a closed loop's workers (fewer
    come only from a round that is one wave), two for an open loop."""
    return int(level) if mode == "concurrency" else 2


@dataclass
class RunPlan:
    targets: list[Target]
    texts: list[str]
    response_format: str
    stream_format: str
    requests: int
    warmup: int
    rounds: int
    asr_sample: int | None  # keep audio of this many ok requests per target and level; None = all; 0 = none
    seed: int = 0
    duration_s: float = 0.0
    playback_buffer_s: float = 0.0  # the listener's jitter buffer before playback starts
    text_rate: float | None = None  # WebSocket: each text an utterance sent at this many tokens/s; None: HTTP
    timeout_s: float = 300.0  # per request (WebSocket: per utterance)
    stagger_s: float = 0.0  # closed loop: the workers start evenly over this many seconds
    unique_label: str | None = None  # every text made unique ("Take LABEL-PART-N, "): no prompt twice on a server

    def cycle(self, part: str) -> TextCycle:
        """The texts of one part of the run (a level's warm-up or measured requests, a rate): with `unique_label`,
        labelled by the part, so that no two parts send the same prompt."""
        return TextCycle(self.texts, label=None if self.unique_label is None else f"{self.unique_label}-{part}")


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _keep(plan: RunPlan, run: LevelRun) -> bool:
    if run.mode == WARM_UP:  # nothing of a warm-up is judged
        return False
    if plan.asr_sample is None:
        return True
    return sum(r.kept_audio for r in run.results) < plan.asr_sample


class _Sender:
    """Sends one request at a time on behalf of a loop: counts what is in flight, records the result (a warm-up's in
    a record of its own, kept out of the level's figures), and turns a client-side failure into one failed request
    rather than the end of the sweep."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        plan: RunPlan,
        target: Target,
        record: LevelRun | None,
        tick: Callable[[], None],
    ) -> None:
        self.client, self.plan, self.target, self.record, self.tick = client, plan, target, record, tick
        self.in_flight = 0

    async def send(self, text: str, scheduled_at: float | None = None) -> bool:
        """Measure one request; answers whether it succeeded."""
        plan, record = self.plan, self.record
        keep = record is not None and _keep(plan, record)
        self.in_flight += 1
        if record is not None:
            record.peak_in_flight = max(record.peak_in_flight, self.in_flight)
        try:
            result = await self.measure(text, keep, scheduled_at)
        except Exception as exc:
            result = (UtteranceResult if plan.text_rate else RequestResult)(
                self.target.index,
                text,
                0,
                False,
                f"client_{type(exc).__name__}",
                error_message=describe_exception(exc),
            )
        finally:
            self.in_flight -= 1
        result.finished_at = time.perf_counter()  # before the loop sees the answer: LoopRun.holds
        if record is not None:
            record.results.append(result)
        self.tick()
        return result.ok

    async def measure(self, text: str, keep: bool, scheduled_at: float | None) -> RequestResult:
        plan = self.plan
        if plan.text_rate:
            return await measure_utterance(
                self.target,
                text,
                plan.response_format,
                plan.text_rate,
                keep,
                scheduled_at,
                plan.playback_buffer_s,
                plan.timeout_s,
            )
        return await measure(
            self.client,
            self.target,
            text,
            plan.response_format,
            plan.stream_format,
            keep,
            scheduled_at,
            plan.playback_buffer_s,
            plan.timeout_s,
        )


async def _closed_loop(
    client: httpx.AsyncClient,
    plan: RunPlan,
    target: Target,
    concurrency: int,
    count: int,
    texts: TextCycle,
    record: LevelRun | None,
    tick: Callable[[], None],
) -> LoopRun:
    """`count` requests with `concurrency` in flight: the wall time from first send to last answer, and the steady
    window with the audio of `record`'s results answered inside it."""
    if target.engine:  # the engine runs the same requests in its own process
        workload = {
            "mode": "closed",
            "level": concurrency,
            "requests": count,
            "texts": texts.take_many(count),
            "stagger": plan.stagger_s,
        }
        return await run_on_engine(client, target, workload, record, tick, count, plan.playback_buffer_s)
    sender = _Sender(client, plan, target, record, tick)
    before = len(record.results) if record is not None else 0
    loop = await closed_loop(texts.take_many(count), concurrency, sender.send, plan.stagger_s)
    return _with_audio(loop, record.results[before:] if record is not None else [])


async def _open_loop(
    client: httpx.AsyncClient,
    plan: RunPlan,
    target: Target,
    rate: float,
    duration_s: float,
    texts: TextCycle,
    record: LevelRun,
    rng: random.Random,
    tick: Callable[[], None],
) -> LoopRun:
    """Poisson arrivals at `rate` per second for `duration_s`: the wall time until the last answer, and the steady
    window with the audio of the results answered inside it."""
    sender = _Sender(client, plan, target, record, tick)
    before = len(record.results)
    loop = await open_loop(rng, rate, duration_s, lambda planned: sender.send(texts.take(), planned))
    return _with_audio(loop, record.results[before:])


def _with_audio(loop: LoopRun, results: list[RequestResult]) -> LoopRun:
    """The loop's run with the audio seconds of the successful results answered inside its steady window."""
    audio = sum(r.audio_s or 0.0 for r in results if r.ok and loop.holds(r.finished_at))
    return replace(loop, audio_s=audio)


def closed_loop_rounds(level: int, requests: int, rounds: int) -> int:
    """How many interleaved rounds a closed-loop level runs: a round must fill the level's concurrency."""
    return max(1, min(rounds, requests // level))


def runs_as_waves(level: int, requests: int, rounds: int) -> bool:
    """True where a closed-loop round gives its workers fewer than two requests each on average: the round is then
    mostly one wave of arrivals onto an idle server (each worker's first request), not a sustained load."""
    return requests // closed_loop_rounds(level, requests, rounds) < 2 * level


async def run_concurrency_sweep(
    client: httpx.AsyncClient, plan: RunPlan, levels: list[int], tick: Callable[[], None]
) -> list[LevelRun]:
    runs: list[LevelRun] = []
    for position, level in enumerate(levels):  # a level may come twice: its parts are named by place too
        level_runs = [LevelRun(target, "concurrency", level) for target in plan.targets]
        for target, run in zip(plan.targets, level_runs, strict=True):
            if plan.warmup:  # every batch size pays its first-time costs here: at least one full batch of it
                warmup = LevelRun(target, WARM_UP, level)  # kept apart from the level's figures
                count = max(plan.warmup, level)
                await _closed_loop(client, plan, target, level, count, plan.cycle(f"w{level}-{position}"), warmup, tick)
                run.warmup_sent = len(warmup.results)
                run.warmup_failures = [result for result in warmup.results if not result.ok]
        # the same texts for every target: one cycle per target, all starting at the same place
        cycles = [plan.cycle(f"c{level}-{position}") for _ in plan.targets]
        rounds = closed_loop_rounds(level, plan.requests, plan.rounds)
        for round_requests in _split(plan.requests, rounds):  # A, B, A, B: drift hits every target alike
            for target, run, texts in zip(plan.targets, level_runs, cycles, strict=True):
                if round_requests:
                    run.add(await _closed_loop(client, plan, target, level, round_requests, texts, run, tick))
        runs.extend(level_runs)
    return runs


async def run_rate_sweep(
    client: httpx.AsyncClient, plan: RunPlan, rates: list[float], tick: Callable[[], None]
) -> list[LevelRun]:
    runs: list[LevelRun] = []
    for position, rate in enumerate(rates):
        level_runs = [LevelRun(target, "rate", rate) for target in plan.targets]
        cycles = [plan.cycle(f"r{rate:g}-{position}") for _ in plan.targets]
        for round_index in range(plan.rounds):
            for target, run, texts in zip(plan.targets, level_runs, cycles, strict=True):
                seed = f"{plan.seed}-{rate}-{round_index}"  # the same arrival times for every target
                duration = plan.duration_s / plan.rounds
                if target.engine:
                    workload = {"mode": "open", "level": rate, "duration": duration, "seed": seed}
                    workload |= {"texts": texts.texts, "text_offset": texts.next}
                    if texts.label is not None:  # the engine draws the texts: it labels them as this cycle would
                        workload["label"] = texts.label
                    count_before = len(run.results)
                    run.add(await run_on_engine(client, target, workload, run, tick, None, plan.playback_buffer_s))
                    texts.next += len(run.results) - count_before
                    continue
                rng = random.Random(seed)
                run.add(await _open_loop(client, plan, target, rate, duration, texts, run, rng, tick))
        runs.extend(level_runs)
    return runs
