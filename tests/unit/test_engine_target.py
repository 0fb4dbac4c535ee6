"""speech-loadtest with an engine target (engine+http://…): the engine_alone control endpoint driven per level."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir
from loadtest.cli import build_targets, parse_args
from loadtest.engine_target import loop_run_from_answer, result_from_record, run_on_engine, split_engine_url
from loadtest.report import aggregate
from loadtest.runner import LevelRun, RunPlan, run_concurrency_sweep, run_rate_sweep
from loadtest.schedule import LoopRun, TextCycle
from loadtest.targets import Target, discover
from tests.fakes.vllm_omni_0_30 import SAMPLES_PER_FRAME
from tests.support.engine_alone import FRAMES, alone, control, fixed_length_omni, wait_ready
from tests.support.server import free_port

TEXTS = ["One.", "Two words.", "Three more words.", "Four words in all.", "Five."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("cv"), "custom_voice")


def plan(target: Target, **changes: object) -> RunPlan:
    fields: dict = {"requests": 8, "warmup": 2, "rounds": 2, "asr_sample": 0, "seed": 3, "duration_s": 1.0}
    fields.update(changes)
    return RunPlan([target], TEXTS, "pcm", "audio", **fields)


def test_engine_urls_are_recognised() -> None:
    assert split_engine_url("engine+http://127.0.0.1:8002") == ("http://127.0.0.1:8002", True)
    assert split_engine_url("http://127.0.0.1:8000") == ("http://127.0.0.1:8000", False)
    targets = build_targets(parse_args(["--target", "http://a:1/v1", "--target", "engine+http://b:2/"]))
    assert [(t.url, t.engine) for t in targets] == [("http://a:1", False), ("http://b:2", True)]
    assert targets[1].label == "B: engine+http://b:2" and targets[0].label == "A: http://a:1"


async def test_closed_loop_sweep_runs_each_level_on_the_engine(model_dir: Path) -> None:
    omni = fixed_length_omni()
    async with control(alone(model_dir, omni)) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        target = Target(0, url, engine=True)
        await discover(client, target)  # the control endpoint answers what speech-loadtest discovers
        assert (target.model, target.voice) == (model_dir.name, "serena")  # the first speaker listed
        before = len(omni.requests)
        ticks: list[int] = []
        runs = await run_concurrency_sweep(client, plan(target), [1, 4], lambda: ticks.append(1))
    # per level: a warm-up of max(2, level) requests, then 2 rounds of 4 measured ones
    assert len(omni.requests) - before == (2 + 8) + (4 + 8) == len(ticks)
    for run, level in zip(runs, [1, 4], strict=True):
        assert (run.mode, run.level, run.peak_in_flight) == ("concurrency", level, level)
        spoken = [r.text for r in run.results]
        in_order = [TEXTS[i % 5] for i in range(8)]  # one cycle, continued across the rounds
        assert spoken == in_order if level == 1 else sorted(spoken) == sorted(in_order)
        assert 0 < run.wall_s
        for result in run.results:
            assert result.ok and result.status == 200 and result.samples == FRAMES * SAMPLES_PER_FRAME
            assert result.ttfa_s is not None and result.e2e_s is not None and result.ttfa_s <= result.e2e_s
            # the modelled listener starts at the first audio; the fake outruns real time: never a stall
            assert (result.playback_start_s, result.stalls, result.stalled_s) == (result.ttfa_s, 0, 0.0)
        summary = aggregate(run, None)
        assert summary["ok"] == 8 and summary["ttfa_s"]["p50"] is not None and summary["throughput_rps"] > 0
        # the engine's steady windows: c=1 turns over in each round of 4; c=4's rounds are one wave each
        assert summary["throughput_basis"] == ("steady" if level == 1 else "wall")
        if level == 1:
            assert run.finished_while_held == 2 * 3 and 0 < run.held_s < run.wall_s  # the first answer opens it
            assert run.audio_s_while_held == pytest.approx(6 * FRAMES * 0.08)
        else:
            assert (run.held_s, run.finished_while_held, run.audio_s_while_held) == (0, 0, 0)


def test_the_engines_steady_window_comes_with_its_answer() -> None:
    answer = {"wall_s": 2.5, "held_s": 1.5, "finished_while_held": 12, "audio_s_while_held": 30.0, "records": []}
    assert loop_run_from_answer(answer) == LoopRun(2.5, 1.5, 12, None, 30.0)
    assert loop_run_from_answer({"wall_s": 2.5, "records": []}) == LoopRun(2.5)  # an engine from before the window


async def test_open_loop_sweep_sends_the_same_arrivals_and_texts(model_dir: Path) -> None:
    omni = fixed_length_omni()
    rate, duration, rounds = 30.0, 1.0, 2
    expected = 0
    for round_index in range(rounds):  # the arrival draws an HTTP target gets, round by round
        rng, at = random.Random(f"3-{rate}-{round_index}"), 0.0
        while (at := at + rng.expovariate(rate)) < duration / rounds:
            expected += 1
    async with control(alone(model_dir, omni)) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        target = Target(0, url, voice="vivian", engine=True)
        runs = await run_rate_sweep(client, plan(target, duration_s=duration), [rate], lambda: None)
    (run,) = runs
    assert run.mode == "rate" and len(run.results) == expected > 5
    assert [r.text for r in run.results] == [TEXTS[i % 5] for i in range(expected)]  # texts continue across rounds
    assert all(r.ok for r in run.results)
    assert {r["prompt"]["additional_information"]["speaker"][0] for r in omni.requests[-expected:]} == {"vivian"}


async def test_an_unreachable_engine_counts_failed_requests_and_the_sweep_goes_on() -> None:
    target = Target(0, f"http://127.0.0.1:{free_port()}", voice="vivian", engine=True)
    run = LevelRun(target, "concurrency", 4)
    async with httpx.AsyncClient(timeout=5) as client:
        loop = await run_on_engine(client, target, {"mode": "closed", "level": 4, "requests": 6}, run, lambda: None, 6)
    assert loop == LoopRun(0.0)  # no time, no steady window
    assert [r.error_code for r in run.results] == ["engine_run_ConnectError"] * 6
    assert run.results[0].error_message.startswith(f"engine control endpoint {target.url}/run: ConnectError")
    assert not any(r.ok for r in run.results)


async def test_a_refused_run_is_counted_with_its_status(model_dir: Path) -> None:
    async with control(alone(model_dir, fixed_length_omni())) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        target = Target(0, url, voice="nobody", engine=True)
        run = LevelRun(target, "concurrency", 2)
        texts = TextCycle(TEXTS)
        workload = {"mode": "closed", "level": 2, "requests": 2, "texts": [texts.take(), texts.take()]}
        await run_on_engine(client, target, workload, run, lambda: None, 2)
    assert [r.error_code for r in run.results] == ["engine_run_400"] * 2


def test_engine_records_are_played_like_a_servers_response() -> None:
    """80 ms of audio at 0.1 s, then 2 s more at 0.5 s: the listener runs dry at 0.18 s and waits 0.32 s."""
    record = {"text": "x", "ok": True, "ttfa_s": 0.1, "e2e_s": 0.5, "audio_s": 2.08, "samples": 26 * 1920}
    record |= {"sample_rate": 24_000, "chunks": [[0.1, 1920], [0.5, 25 * 1920]]}
    target = Target(1, "http://e:1", engine=True)
    result = result_from_record(target, record)
    assert (result.target, result.ok, result.status, result.bytes) == (1, True, 200, 26 * 1920 * 2)
    assert (result.playback_start_s, result.stalls) == (0.1, 1) and result.stalled_s == pytest.approx(0.32)
    buffered = result_from_record(target, record, playback_buffer_s=2.0)  # starts once 2 s are in hand: at 0.5 s
    assert (buffered.playback_start_s, buffered.stalls, buffered.stalled_s) == (0.5, 0, 0.0)
    failed = result_from_record(target, {"text": "x", "ok": False, "error_code": "engine_X", "error_message": "X: y"})
    assert (failed.ok, failed.status, failed.error_code, failed.error_message, failed.stalls) == (
        False,
        0,
        "engine_X",
        "X: y",
        None,
    )
