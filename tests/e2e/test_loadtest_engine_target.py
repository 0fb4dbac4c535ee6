"""speech-loadtest sweeping a live server and an engine_alone control endpoint interleaved, as side-by-side.sh does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir
from loadtest.cli import load_texts, parse_args, run
from loadtest.report import write_outputs
from tests.support.engine_alone import FRAMES, alone, control, fixed_length_omni, wait_ready
from tests.support.server import RunningServer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("cv"), "custom_voice")


async def test_server_and_engine_swept_in_one_run(server: RunningServer, model_dir: Path, tmp_path: Path) -> None:
    omni = fixed_length_omni()
    async with control(alone(model_dir, omni)) as url:
        args = parse_args(
            [
                "--target", server.base_url, "--target", f"engine+{url}",
                "--voice", "alloy", "--voice", "vivian",
                "--texts", "short", "--concurrency", "1,2", "--requests", "4", "--warmup", "1", "--no-progress",
            ]
        )  # fmt: skip
        async with httpx.AsyncClient() as client:
            await wait_ready(client, url)
        result = await run(args)
    meta, runs = result["meta"], result["runs"]
    assert [(t["engine"], t["label"]) for t in meta["targets"]] == [
        (False, f"A: {server.base_url}"),
        (True, f"B: engine+{url}"),
    ]
    assert [(r["target"], r["concurrency"]) for r in runs] == [(0, 1), (1, 1), (0, 2), (1, 2)]
    for summary in runs:
        assert summary["requests"] == summary["ok"] == 4 and summary["ttfa_s"]["p50"] > 0
    engine_runs = [r for r in runs if r["target"] == 1]
    assert all(p["samples"] == FRAMES * 1920 for r in engine_runs for p in r["per_request"])
    assert all(r["playback"]["requests"] == 4 and r["playback"]["stalled_share"] == 0 for r in engine_runs)
    # nothing ran dry: a listener could start at the first audio
    assert all(r["ran_dry_share"] == 0 and r["uninterrupted_s"]["p50"] > 0 for r in engine_runs)
    assert all(p["deficit_s"] == 0 for r in engine_runs for p in r["per_request"])
    # per level, a warm-up of max(1, level) requests, then the measured ones: the texts an HTTP target gets
    spoken = [r["prompt"]["additional_information"]["text"][0] for r in omni.requests if "alone" in r["request_id"]]
    texts = load_texts("English", "short", None)
    assert spoken[:5] == [texts[0], *texts[:4]]
    assert sorted(spoken[5:]) == sorted([*texts[:2], *texts[:4]])
    paths = await asyncio.to_thread(write_outputs, meta, runs, tmp_path / "out")  # tables and plots take it too
    written = json.loads(await asyncio.to_thread(paths["results"].read_text))
    assert written["meta"]["targets"][1]["engine"] is True and "engine+" in paths["summary"].read_text()
