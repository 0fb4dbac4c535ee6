"""loadtest/engine_alone.py: AsyncOmni alone behind a control endpoint, on the fake of vllm-omni 0.30.0."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir
from loadtest.engine_alone import AloneEngine, default_texts
from tests.fakes.vllm_omni_0_30 import SAMPLES_PER_FRAME, WordTokenizer, estimate_prompt_len
from tests.support.engine_alone import FRAMES, PROFILE, alone, control, fake_helpers, fixed_length_omni, wait_ready
from tests.support.server import free_port
from tests.support.waiting import until


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("cv"), "custom_voice")


async def test_ready_only_after_start_and_warm_up(model_dir: Path) -> None:
    omni, gate = fixed_length_omni(), threading.Event()
    engine = alone(model_dir, omni, gate)
    async with control(engine, [1, 4]) as url, httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"{url}/ready")
        assert response.status_code == 503 and response.json() == {"status": "starting AsyncOmni"}
        early = await client.post(f"{url}/run", json={"mode": "closed", "level": 1, "requests": 1})
        assert early.status_code == 503 and early.json()["error"]["code"] == "not_ready"
        gate.set()
        await wait_ready(client, url)
        assert omni.kwargs == {
            "model": str(model_dir),
            "log_stats": True,
            "deploy_config": PROFILE,
            "load_format": "dummy",
            "stage_init_timeout": 900,  # the service's defaults: vllm-omni's own 300 s can run out on a cold start
            "init_timeout": 1200,
        }
        warm = [r for r in omni.requests if r["request_id"].startswith("warmup-")]
        assert len(warm) == 1 + 4
        # warm-up jobs ask for 16 tokens; min_tokens follows them down from the profile's fixed length
        assert {(r["params"][0].max_tokens, r["params"][0].min_tokens) for r in warm} == {(16, 16)}
        assert (await client.get(f"{url}/v1/models")).json()["data"][0]["id"] == model_dir.name
        voices = (await client.get(f"{url}/v1/audio/voices")).json()["voices"]
        assert "vivian" in voices
    assert omni.shut_down


def test_default_warm_up_covers_every_batch_up_to_the_talker(model_dir: Path) -> None:
    assert alone(model_dir, fixed_length_omni()).warmup_batch_sizes() == [1, 2, 4, 8, 16, 32, 64]


async def test_closed_loop_run_records_every_chunk(model_dir: Path) -> None:
    omni = fixed_length_omni()
    engine = alone(model_dir, omni)
    texts = ["First text here.", "Second one.", "Third text."]
    async with control(engine) as url, httpx.AsyncClient(timeout=60) as client:
        await wait_ready(client, url)
        before = len(omni.requests)
        body = {"mode": "closed", "level": 4, "requests": 10, "warmup": 3, "texts": texts, "text_offset": 1}
        response = await client.post(f"{url}/run", json={**body, "voice": "Ryan", "language": "English"})
        assert response.status_code == 200, response.text
        result = response.json()
    assert (result["mode"], result["level"], result["requests"], result["peak_in_flight"]) == ("closed", 4, 10, 4)
    assert result["voice"] == "Ryan"
    sent = omni.requests[before:]
    assert len(sent) == 3 + 10  # the warm-up requests, then the measured ones
    # built as the omni engine builds them: the talker's conditioning, placeholder prompt, DELTA fixed-length params
    info = sent[-1]["prompt"]["additional_information"]
    assert info["speaker"] == ["ryan"] and info["language"] == ["English"] and info["task_type"] == ["CustomVoice"]
    assert sent[-1]["prompt"]["prompt_token_ids"] == [1] * estimate_prompt_len(
        additional_information=info,
        task_type="CustomVoice",
        tokenize_prompt=lambda t: WordTokenizer()(t)["input_ids"],
        codec_language_id=None,
        spk_is_dialect=None,
    )
    assert {(r["params"][0].max_tokens, r["params"][0].min_tokens) for r in sent} == {(FRAMES + 1, FRAMES + 1)}
    assert all(r["params"][0].output_kind.name == "DELTA" for r in sent)
    records = result["records"]
    assert sorted(r["text"] for r in records) == sorted((texts * 4)[1:11])
    for record in records:
        assert record["ok"] and record["error_code"] is None
        # the shipped profile's ramp: windows of 1, 2, 4 and 8 frames, then what is left of the 30
        assert [n // SAMPLES_PER_FRAME for _, n in record["chunks"]] == [1, 2, 4, 8, 15]
        assert record["samples"] == FRAMES * SAMPLES_PER_FRAME and record["sample_rate"] == 24_000
        assert record["audio_s"] == pytest.approx(FRAMES * 0.08)
        times = [t for t, _ in record["chunks"]]
        assert record["ttfa_s"] == times[0] and times == sorted(times) and times[-1] <= record["e2e_s"]
        assert record["ttfa_s"] > 0
    assert max(r["sent_at_s"] for r in records) <= result["wall_s"]
    # the steady window, counted where its clock is: 10 requests for 4 workers, more than a full turnover
    assert 0 < result["held_s"] < result["wall_s"] and 4 <= result["finished_while_held"] < 10
    assert result["audio_s_while_held"] == pytest.approx(result["finished_while_held"] * FRAMES * 0.08)


async def test_a_staggered_closed_loop_starts_its_workers_apart(model_dir: Path) -> None:
    """As speech-loadtest's --stagger: worker i's first request leaves i * stagger / workers after the start."""
    engine = alone(model_dir, fixed_length_omni(step_delay_s=0.2))  # each request far longer than the stagger
    async with control(engine) as url, httpx.AsyncClient(timeout=60) as client:
        await wait_ready(client, url)
        response = await client.post(f"{url}/run", json={"mode": "closed", "level": 3, "requests": 3, "stagger": 0.6})
    assert response.status_code == 200, response.text
    sent = sorted(r["sent_at_s"] for r in response.json()["records"])
    assert sent[0] < 0.1 and sent[1] >= 0.2 and sent[2] >= 0.4, sent


async def test_open_loop_run_draws_the_load_tools_arrivals(model_dir: Path) -> None:
    """The arrivals are speech-loadtest's, to the millisecond, and the steady window runs from the first answer to
    the last arrival. Two seconds of arrivals: a first answer (about 30 ms of engine work) is inside them however busy
    the machine (in half a second, a busy one once answered after the last arrival, and the window was empty)."""
    omni = fixed_length_omni()
    engine = alone(model_dir, omni)
    rate, duration, seed = 20.0, 2.0, "0-20.0-0"
    rng, arrivals, at = random.Random(seed), [], 0.0
    while (at := at + rng.expovariate(rate)) < duration:
        arrivals.append(at)
    async with control(engine) as url, httpx.AsyncClient(timeout=60) as client:
        await wait_ready(client, url)
        body = {"mode": "open", "level": rate, "duration": duration, "seed": seed}
        result = (await client.post(f"{url}/run", json=body)).json()
    assert result["mode"] == "open" and result["requests"] == len(arrivals) > 5
    records = result["records"]
    assert [r["sent_at_s"] for r in records] == pytest.approx(arrivals, abs=0.02)
    assert [r["text"] for r in records] == [default_texts()[i % 10] for i in range(len(arrivals))]
    assert all(r["ok"] and r["samples"] == FRAMES * SAMPLES_PER_FRAME for r in records)
    assert 0 < result["held_s"] < duration and 0 < result["finished_while_held"] < len(records)
    assert result["audio_s_while_held"] == pytest.approx(result["finished_while_held"] * FRAMES * 0.08)


async def test_an_open_loop_with_a_label_labels_every_text_it_draws(model_dir: Path) -> None:
    """speech-loadtest --unique-texts against an engine+ target: the engine draws an open loop's texts itself, so it
    labels them as the load tool's text cycle would ("Take LABEL-N, " from the offset on): no prompt twice."""
    engine = alone(model_dir, fixed_length_omni())
    texts = ["First text here.", "Second one."]
    async with control(engine) as url, httpx.AsyncClient(timeout=60) as client:
        await wait_ready(client, url)
        body = {"mode": "open", "level": 40.0, "duration": 0.4, "seed": 3, "texts": texts, "text_offset": 5}
        result = (await client.post(f"{url}/run", json={**body, "label": "ab12-r40"})).json()
    drawn = [r["text"] for r in result["records"]]
    assert len(drawn) > 3
    assert drawn == [f"Take ab12-r40-{5 + i}, {texts[(5 + i) % 2]}" for i in range(len(drawn))]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"mode": "burst", "level": 1, "requests": 1}, "mode"),
        ({"mode": "closed", "level": 1.5, "requests": 1}, "level"),
        ({"mode": "closed", "level": 0, "requests": 1}, "level"),
        ({"mode": "closed", "level": 2}, "requests"),
        ({"mode": "open", "level": 2}, "duration"),
        ({"mode": "closed", "level": 2, "requests": "many"}, "requests"),
        ({"mode": "closed", "level": 2, "requests": 2, "concurrency": 3}, "concurrency"),
        ({"mode": "closed", "level": 2, "requests": 2, "texts": []}, "texts"),
        ({"mode": "closed", "level": 2, "requests": 2, "voice": "nobody"}, "voice"),
        ({"mode": "closed", "level": 2, "requests": 2, "seed": [1]}, "seed"),
        ({"mode": "closed", "level": 2, "requests": 2, "stagger": -1}, "stagger"),
        ({"mode": "open", "level": 2, "duration": 1, "label": ""}, "label"),
        ({"mode": "open", "level": 2, "duration": 1, "label": 7}, "label"),
        ([1, 2], "body"),
    ],
)
async def test_bad_runs_are_refused_with_an_openai_error(model_dir: Path, body: object, param: str) -> None:
    engine = alone(model_dir, fixed_length_omni())
    async with control(engine, []) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        response = await client.post(f"{url}/run", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


async def test_one_run_at_a_time(model_dir: Path) -> None:
    engine = alone(model_dir, fixed_length_omni(step_delay_s=0.05))
    async with control(engine, []) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        first = asyncio.create_task(client.post(f"{url}/run", json={"mode": "closed", "level": 1, "requests": 2}))
        await asyncio.sleep(0.05)
        second = await client.post(f"{url}/run", json={"mode": "closed", "level": 1, "requests": 1})
        assert second.status_code == 409 and second.json()["error"]["code"] == "busy"
        assert (await first).status_code == 200


async def test_a_failed_request_is_a_failed_record_not_a_failed_run(model_dir: Path) -> None:
    omni = fixed_length_omni()
    engine = alone(model_dir, omni)
    async with control(engine, []) as url, httpx.AsyncClient(timeout=30) as client:
        await wait_ready(client, url)
        omni.die_on_request = True
        result = (await client.post(f"{url}/run", json={"mode": "closed", "level": 2, "requests": 2})).json()
    assert [r["error_code"] for r in result["records"]] == ["engine_EngineDeadError"] * 2
    assert (result["held_s"], result["finished_while_held"], result["audio_s_while_held"]) == (0, 0, 0)
    assert result["records"][0]["error_message"] == "EngineDeadError: EngineCore encountered an issue"
    assert not any(r["ok"] for r in result["records"])


async def test_a_failed_start_is_reported(model_dir: Path) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("no GPU")

    failures: list[bool] = []
    engine = AloneEngine(str(model_dir), PROFILE, omni_factory=broken, helpers=fake_helpers)
    async with control(engine, [], on_failure=lambda: failures.append(True)) as url, httpx.AsyncClient() as client:
        await until(lambda: bool(failures), timeout_s=2)
        response = await client.get(f"{url}/ready")
    assert failures == [True]
    assert response.status_code == 503 and response.json() == {"status": "failed to start: no GPU"}


def test_command_line_exits_non_zero_when_the_engine_cannot_start(model_dir: Path) -> None:
    """Without vllm-omni (as here) AsyncOmni cannot start: the process must end, so a waiting script sees it."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.engine_alone", "--model", str(model_dir), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "the engine failed to start" in done.stdout and "vllm_omni" in done.stdout


def test_served_model_name_is_the_listed_model_id(model_dir: Path) -> None:
    engine = AloneEngine(str(model_dir), PROFILE, served_model_name="qwen3-tts", helpers=fake_helpers)
    assert engine.model_id == "qwen3-tts"


async def test_request_ids_are_unique_across_processes(model_dir: Path) -> None:
    """vllm-omni keys its /dev/shm windows by request id: two engines on one host must never share one."""
    first, second = fixed_length_omni(), fixed_length_omni()
    for omni in (first, second):
        await alone(model_dir, omni).start([1, 2])
    ids = [r["request_id"] for r in first.requests + second.requests]
    assert len(ids) == len(set(ids)) == 6
