"""speech-loadtest against live embedded servers: an A/B sweep with ASR, and the consistency of what it reports."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import RunningServer, start_server

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("server-b") / "server.log")
    yield running
    running.stop()


def loadtest(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "speech-loadtest"
    return subprocess.run([str(script), "--no-progress", *args], capture_output=True, text=True, timeout=600)


def percentiles_ordered(stats: dict[str, float | None]) -> bool:
    values = [stats[k] for k in ("p50", "p90", "p95", "p99")]
    return all(a is not None and b is not None and a <= b for a, b in itertools.pairwise(values))


def test_ab_sweep_with_asr(server: RunningServer, second_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "ab"
    done = loadtest(
        "--target",
        server.base_url,
        "--target",
        second_server.base_url,
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--warmup",
        "1",
        "--asr",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "| target | concurrency |" in done.stdout  # the summary table is printed at the end
    results = json.loads((out / "results.json").read_text())
    assert (out / "summary.md").read_text().count("A/B ratios") == 1
    for png in ("ttfa.png", "throughput.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    meta, runs = results["meta"], results["runs"]
    assert [t["model"] for t in meta["targets"]] == ["hibari", "hibari"]  # discovered from /v1/models
    assert [t["voice"] for t in meta["targets"]] == ["heart", "heart"]  # discovered from /v1/audio/voices
    assert sorted((r["target"], r["concurrency"]) for r in runs) == [(0, 1), (0, 4), (1, 1), (1, 4)]
    for run in runs:
        assert run["requests"] == 8 and run["ok"] == 8 and run["errors"] == 0
        assert run["concurrency_achieved"] == run["concurrency"]  # the level really ran that many at once
        assert set(run["ttfa_s"]) == {"mean", "p50", "p90", "p95", "p99"}
        for key in ("ttfa_s", "e2e_s", "rtf"):
            assert percentiles_ordered(run[key]), (key, run[key])
        for request in run["per_request"]:
            assert 0 < request["ttfa_s"] <= request["e2e_s"]
            assert request["audio_s"] == pytest.approx(request["samples"] / request["sample_rate"])
            assert request["bytes"] == 2 * request["samples"]  # pcm: two bytes a sample, nothing else
        assert run["audio_seconds_total"] == pytest.approx(sum(r["audio_s"] for r in run["per_request"]))
        assert run["throughput_rps"] > 0 and run["audio_throughput"] > 0
        assert run["wer"] is not None and run["wer"] <= 0.2
    assert {r["target"] for r in results["ab_ratios"]} == {1}


def test_server_errors_are_counted_by_status(server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "errors"
    done = loadtest(
        "--target",
        server.base_url,
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--warmup",
        "0",
        "--extra-body",
        '{"speed": 9}',
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["ok"] == 0 and run["errors"] == 4
    assert run["errors_by_status"] == {"400": 4}
    assert run["ttfa_s"]["p50"] is None and run["throughput_rps"] == 0
    # why they failed: the server's own message, per code, in results.json and in the printed summary
    ((code, message),) = run["error_messages"].items()
    assert run["errors_by_code"] == {code: 4} and "speed" in message
    assert f"- {code}: {message}" in done.stdout


def test_open_loop_sse(server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "open"
    done = loadtest(
        "--target",
        server.base_url,
        "--rate",
        "4",
        "--duration",
        "2",
        "--stream-format",
        "sse",
        "--format",
        "mp3",
        "--texts",
        "short",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["rate"] == 4
    assert run["requests"] >= 1 and run["ok"] == run["requests"]
    assert all(0 < r["ttfa_s"] <= r["e2e_s"] for r in run["per_request"])
