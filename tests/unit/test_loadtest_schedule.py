"""loadtest/schedule.py: the steady window of the closed and the open loop (the load held, ramp-up and drain left out),
and how the runner and the report use it. Requests are fake: a sleep of a set length, so that Little's law gives the
rate a held load must show (concurrency / latency); the tolerances are generous, the differences they test are not."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx
import pytest

from loadtest import runner
from loadtest.measure import RequestResult
from loadtest.report import aggregate, summary_markdown
from loadtest.runner import LevelRun, RunPlan, run_concurrency_sweep
from loadtest.schedule import LoopRun, arrivals_window, closed_loop, open_loop
from loadtest.targets import Target

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py


class FakeRequests:
    """`send` for a loop: each request takes `latency_s`; those whose text is in `failing` fail. Keeps each request's
    measured latency and, for the successful ones, when it was answered."""

    def __init__(self, latency_s: float, failing: frozenset[str] = frozenset(), answer: bool | None = True) -> None:
        self.latency_s, self.failing, self.answer = latency_s, failing, answer
        self.latencies: list[float] = []
        self.ok_at: list[float] = []

    async def send(self, text: str) -> bool | None:
        started = time.perf_counter()
        await asyncio.sleep(self.latency_s)
        self.latencies.append(time.perf_counter() - started)
        if text in self.failing:
            return False
        self.ok_at.append(time.perf_counter())
        return self.answer

    def littles_law_rps(self, concurrency: int) -> float:
        """What `concurrency` requests held in flight answer per second: concurrency / their mean latency."""
        return concurrency / (sum(self.latencies) / len(self.latencies))


def texts(count: int) -> list[str]:
    return [f"text {i}" for i in range(count)]


async def test_a_staggered_closed_loop_measures_the_held_load_where_the_wall_clock_reads_low() -> None:
    """8 workers started over 0.25 s, 8 requests each of 50 ms: the ramp-up and the drain are a third of the run."""
    fake = FakeRequests(0.05)
    loop = await closed_loop(texts(64), 8, fake.send, stagger_s=0.25)
    expected = fake.littles_law_rps(8)
    steady, wall = loop.finished_while_held / loop.held_s, 64 / loop.wall_s
    assert steady == pytest.approx(expected, rel=0.1)
    assert wall < 0.85 * steady
    assert loop.finished_while_held >= 8 and 0 < loop.held_s < loop.wall_s
    assert loop.window is not None and loop.window[1] - loop.window[0] == pytest.approx(loop.held_s)


async def test_workers_that_start_together_are_measured_in_whole_turnovers() -> None:
    """Without a stagger the answers come in cohorts of 8: a window from one answer to another spans whole cohorts."""
    fake = FakeRequests(0.05)
    loop = await closed_loop(texts(32), 8, fake.send)
    assert loop.finished_while_held / loop.held_s == pytest.approx(fake.littles_law_rps(8), rel=0.1)
    assert loop.finished_while_held == 3 * 8  # cohorts 2 to 4, counted from the first answer of the first


async def test_a_closed_loop_of_one_wave_has_no_full_turnover() -> None:
    """12 requests for 8 workers: after all 8 are in flight, 4 more go out; the window holds fewer than 8 answers."""
    loop = await closed_loop(texts(12), 8, FakeRequests(0.02).send)
    assert loop.finished_while_held < 8


async def test_failed_requests_are_not_counted_and_a_silent_send_counts_as_a_success() -> None:
    failing = frozenset(texts(40)[1::2])
    fake = FakeRequests(0.02, failing)
    loop = await closed_loop(texts(40), 4, fake.send)
    inside = sum(loop.holds(at) for at in fake.ok_at)  # each stamped before the loop saw its answer
    assert loop.finished_while_held == inside > 0
    assert loop.finished_while_held <= 20 - 1  # the successful ones only, the opening answer aside
    assert (await closed_loop(texts(8), 2, FakeRequests(0.01, frozenset(texts(8))).send)).window is None
    silent = await closed_loop(texts(16), 2, FakeRequests(0.01, answer=None).send)
    assert silent.finished_while_held >= 2 and silent.held_s > 0


async def test_an_open_loops_wall_clock_runs_from_its_first_send_not_from_the_wait_before_it() -> None:
    """The wall-clock fallback is every answer over the time from the first send to the last answer: a seed whose
    first arrival comes late had counted the idle wait before it (one arrival 0.4 s in, answered 0.1 s later: 0.5 s
    of wall clock, not 0.1)."""
    seed = next(s for s in range(1000) if 0.4 <= random.Random(s).expovariate(2.0) < 0.6)
    first = random.Random(seed).expovariate(2.0)
    fake = FakeRequests(0.1)

    async def send(planned: float) -> bool | None:
        return await fake.send("text")

    loop = await open_loop(random.Random(seed), 2.0, first + 0.001, send)  # that one arrival alone
    assert len(fake.latencies) == 1
    assert loop.wall_s < first  # about 0.1 s: the answer's time, not the wait before the send
    assert loop.wall_s >= 0.1 - 0.001  # the answer's 0.1 s, a millisecond for the loop's clock (a wait may end early)


async def test_an_open_loop_counts_from_its_first_answer_to_the_end_of_arrivals() -> None:
    rate, duration, latency = 80.0, 0.6, 0.05
    rng, arrivals, at = random.Random(7), [], 0.0
    while (at := at + rng.expovariate(rate)) < duration:
        arrivals.append(at)
    fake = FakeRequests(latency)
    sent: list[float] = []

    async def send(planned: float) -> bool | None:
        sent.append(planned)
        return await fake.send("text")

    loop = await open_loop(random.Random(7), rate, duration, send)
    assert len(sent) == len(arrivals) > 20
    first = min(sent)
    assert loop.held_s == pytest.approx(duration - arrivals[0] - latency, abs=0.03)
    assert loop.window is not None and loop.window[0] == pytest.approx(first + latency, abs=0.03)
    # answered within the arrivals, after the first answer: those sent at least a latency before the end
    expected = sum(a + latency <= duration for a in arrivals) - 1
    assert abs(loop.finished_while_held - expected) <= 2
    assert loop.wall_s > duration  # the wall clock also runs through the answers after the last arrival


def test_an_open_loop_window_opens_at_its_first_success() -> None:
    assert arrivals_window([1.2, 1.0, 1.5, 2.5], end=2.0, wall_s=1.6) == LoopRun(1.6, 1.0, 2, (1.0, 2.0))
    assert arrivals_window([2.5], end=2.0, wall_s=1.6) == LoopRun(1.6)  # none before the end: no window
    assert arrivals_window([], end=2.0, wall_s=1.6) == LoopRun(1.6)


def test_a_round_without_a_full_turnover_adds_only_its_wall_time() -> None:
    run = LevelRun(Target(0, "http://a"), "concurrency", 8)
    run.add(LoopRun(2.0, 1.0, 16, audio_s=32.0))
    run.add(LoopRun(1.0, 0.000_01, 4, audio_s=8.0))  # a wave: 4 answers in microseconds would read 400 000 req/s
    assert (run.wall_s, run.held_s, run.finished_while_held, run.audio_s_while_held) == (3.0, 1.0, 16, 32.0)
    rate = LevelRun(Target(0, "http://a"), "rate", 4.0)
    rate.add(LoopRun(2.0, 1.0, 1))
    rate.add(LoopRun(2.0, 1.5, 2))
    assert (rate.held_s, rate.finished_while_held) == (1.5, 2)


def report_meta(requests: int, warmup: int) -> dict[str, Any]:
    """A closed-loop run's meta, as the report reads it, for one target A."""
    return {
        "started_at": "now",
        "response_format": "pcm",
        "stream_format": "audio",
        "texts": "t",
        "requests": requests,
        "warmup": warmup,
        "targets": [{"index": 0, "label": "A: http://a", "model": "m", "voice": "v"}],
    }


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request of a sweep takes 40 ms and answers 2 s of audio."""

    async def measure(self: runner._Sender, text: str, keep: bool, scheduled_at: float | None) -> RequestResult:
        await asyncio.sleep(0.04)
        return RequestResult(self.target.index, text, 200, True, ttfa_s=0.01, e2e_s=0.04, audio_s=2.0)

    monkeypatch.setattr(runner._Sender, "measure", measure)


@pytest.mark.usefixtures("fake_measure")
async def test_a_sweep_reports_steady_throughput_and_falls_back_to_the_wall_clock_for_a_wave() -> None:
    target = Target(0, "http://a", "m", "v")
    plan = RunPlan([target], ["text"], "pcm", "audio", requests=24, warmup=0, rounds=1, asr_sample=0, stagger_s=0.1)
    async with httpx.AsyncClient() as client:
        runs = await run_concurrency_sweep(client, plan, [4, 16], lambda: None)
    steady, wave = (aggregate(run, None) for run in runs)
    # c=4: 6 requests per worker, held; Little's law: 4 / 0.04 s
    assert steady["throughput_basis"] == "steady"
    assert steady["throughput_rps"] == pytest.approx(100, rel=0.15)
    assert steady["throughput_rps"] > steady["throughput_wall_rps"]
    assert steady["throughput_finished_while_held"] >= 4 and 0 < steady["throughput_held_s"] < steady["wall_s"]
    # the audio of exactly the answers counted: 2 s each
    assert steady["audio_throughput"] == pytest.approx(2.0 * steady["throughput_rps"])
    assert steady["audio_throughput_wall"] == pytest.approx(2.0 * steady["throughput_wall_rps"])
    # c=16: 24 requests are one wave and a half; no full turnover
    assert wave["throughput_basis"] == "wall"
    assert wave["throughput_rps"] == wave["throughput_wall_rps"] == pytest.approx(24 / wave["wall_s"])
    assert wave["audio_throughput"] == wave["audio_throughput_wall"]
    meta = report_meta(requests=24, warmup=0)
    text = summary_markdown(meta, [steady, wave])
    assert f"| {steady['throughput_rps']:.2f} | {steady['audio_throughput']:.1f} |" in text
    assert f"| {wave['throughput_rps']:.2f}* | {wave['audio_throughput']:.1f}* |" in text
    assert "req/s and audio s/s: answers that finished while the level's concurrency was held" in text
    assert "* = too short a window, wall clock" in text


async def test_unique_texts_never_repeat_a_prompt_on_a_server_yet_every_target_speaks_the_same_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--unique-texts`: a server that caches prompt prefixes (sglang's radix cache) meets no prompt twice, warm-up,
    levels and rounds included, while A and B still get the same text for the same request of a round."""
    sent: list[tuple[int, str]] = []

    async def measure(self: runner._Sender, text: str, keep: bool, scheduled_at: float | None) -> RequestResult:
        sent.append((self.target.index, text))
        await asyncio.sleep(0.001)
        return RequestResult(self.target.index, text, 200, True, ttfa_s=0.001, e2e_s=0.001, audio_s=1.0)

    monkeypatch.setattr(runner._Sender, "measure", measure)
    targets = [Target(0, "http://a", "m", "v"), Target(1, "http://b", "m", "v")]
    shipped = ["Hello there.", "Good morning."]
    plan = RunPlan(targets, shipped, "pcm", "audio", requests=6, warmup=2, rounds=2, asr_sample=0, unique_label="x1")
    async with httpx.AsyncClient() as client:
        await run_concurrency_sweep(client, plan, [1, 2, 1], lambda: None)  # a level twice: new prompts again
    texts = {index: [text for i, text in sent if i == index] for index in (0, 1)}
    assert len(texts[0]) == len(texts[1]) == 3 * (2 + 6)  # each level: its warm-up (2), then 6 in two rounds
    for index in (0, 1):
        assert len(set(texts[index])) == len(texts[index])  # never the same prompt twice on one server
        # one clause before the text, not a sentence of its own: the first sentence is still the text's
        assert all(text.startswith("Take x1-") and ", " in text for text in texts[index])
        assert all(text.split(", ", 1)[1] in shipped and "." not in text.split(", ", 1)[0] for text in texts[index])
    measured = [[t for t in texts[index] if "-w" not in t.split(",")[0]] for index in (0, 1)]
    assert measured[0] == measured[1]  # the same words on A and B, request by request
    plain = RunPlan(targets, shipped, "pcm", "audio", requests=2, warmup=0, rounds=1, asr_sample=0)
    sent.clear()
    async with httpx.AsyncClient() as client:
        await run_concurrency_sweep(client, plain, [1], lambda: None)
    assert [text for _, text in sent] == ["Hello there.", "Good morning.", "Hello there.", "Good morning."]


async def test_unique_texts_reach_an_engine_target_drawing_its_own_open_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine+ target draws an open loop's texts itself: it is handed the part's label with the offset, and a rate
    run twice gets a label of its own each time."""
    workloads: list[dict[str, Any]] = []

    async def run_on_engine(client: Any, target: Target, workload: dict[str, Any], record: Any, *_: Any) -> LoopRun:
        workloads.append(workload)
        record.results.append(RequestResult(target.index, "t", 200, True, ttfa_s=0.001, e2e_s=0.001, audio_s=1.0))
        return LoopRun(wall_s=0.1)

    monkeypatch.setattr(runner, "run_on_engine", run_on_engine)
    plan = RunPlan([Target(0, "http://a", engine=True)], ["Hi."], "pcm", "audio", 0, 0, 2, 0, unique_label="x1")
    plan.duration_s = 1.0
    async with httpx.AsyncClient() as client:
        await runner.run_rate_sweep(client, plan, [4.0, 4.0], lambda: None)
    # two rounds of one rate: one label, the offset moved on by the first round's request
    assert [(w["label"], w["text_offset"]) for w in workloads[:2]] == [
        (workloads[0]["label"], 0),
        (workloads[0]["label"], 1),
    ]
    assert workloads[0]["label"].startswith("x1-") and workloads[2]["label"] != workloads[0]["label"]
    plain = RunPlan([Target(0, "http://a", engine=True)], ["Hi."], "pcm", "audio", 0, 0, 1, 0)
    plain.duration_s = 1.0
    workloads.clear()
    async with httpx.AsyncClient() as client:
        await runner.run_rate_sweep(client, plain, [4.0], lambda: None)
    assert "label" not in workloads[0]


async def test_a_warm_up_the_server_refused_is_reported_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up is there so that every batch size pays its first-time costs before it is measured: a level whose
    warm-up the full server refused in part was measured cold, and the report says so (its results stay out of the
    level's figures, as a warm-up's always do)."""

    async def measure(self: runner._Sender, text: str, keep: bool, scheduled_at: float | None) -> RequestResult:
        await asyncio.sleep(0.001)
        if "-w" in text.split(",")[0] and text.startswith("Take x2-w4") and self.in_flight > 2:
            return RequestResult(self.target.index, text, 429, False, "rate_limit_exceeded", error_message="full")
        return RequestResult(self.target.index, text, 200, True, ttfa_s=0.001, e2e_s=0.001, audio_s=1.0)

    monkeypatch.setattr(runner._Sender, "measure", measure)
    target = Target(0, "http://a", "m", "v")
    plan = RunPlan([target], ["Hello there."], "pcm", "audio", requests=8, warmup=1, rounds=1, asr_sample=0,
                   unique_label="x2")  # fmt: skip
    async with httpx.AsyncClient() as client:
        runs = await run_concurrency_sweep(client, plan, [1, 4], lambda: None)
    one, four = (aggregate(run, None) for run in runs)
    assert (one["requests"], one["errors"], four["requests"], four["errors"]) == (8, 0, 8, 0)
    assert one["warmup"] == {"requests": 1, "failed": 0, "error_groups": []}
    assert four["warmup"]["requests"] == 4 and four["warmup"]["failed"] == 2
    assert four["warmup"]["error_groups"][0]["code"] == "rate_limit_exceeded"
    meta = report_meta(requests=8, warmup=1)
    text = summary_markdown(meta, [one, four])
    assert "## Warm-up errors" in text
    assert "- A: http://a at concurrency 4: 2 of its 4 warm-up requests failed" in text
    assert "429 rate_limit_exceeded ×2: full" in text
    assert "at concurrency 1:" not in text.split("## Warm-up errors")[1]
