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
    assert "| uninterrupted p50 ms | p95 | ran dry | TTFA mean ms |" in done.stdout  # the headline, before TTFA
    results = json.loads((out / "results.json").read_text())
    assert (out / "summary.md").read_text().count("A/B ratios") == 1
    for png in ("uninterrupted.png", "ttfa.png", "throughput.png", "stalls.png", "stalled_share.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    meta, runs = results["meta"], results["runs"]
    assert [t["model"] for t in meta["targets"]] == ["hibari", "hibari"]  # discovered from /v1/models
    assert [t["voice"] for t in meta["targets"]] == ["heart", "heart"]  # discovered from /v1/audio/voices
    assert sorted((r["target"], r["concurrency"]) for r in runs) == [(0, 1), (0, 4), (1, 1), (1, 4)]
    for run in runs:
        assert run["requests"] == 8 and run["ok"] == 8 and run["errors"] == 0
        assert run["concurrency_achieved"] == run["concurrency"]  # the level really ran that many at once
        assert set(run["ttfa_s"]) == {"mean", "p50", "p90", "p95", "p99"}
        for key in ("uninterrupted_s", "ttfa_s", "e2e_s", "rtf"):
            assert percentiles_ordered(run[key]), (key, run[key])
        for request in run["per_request"]:
            assert 0 < request["ttfa_s"] <= request["e2e_s"]
            assert request["audio_s"] == pytest.approx(request["samples"] / request["sample_rate"])
            assert request["bytes"] == 2 * request["samples"]  # pcm: two bytes a sample, nothing else
            assert request["playback_start_s"] == request["ttfa_s"]  # pcm plays from its first sample
            assert request["stalls"] >= 0 and request["stalled_s"] >= 0
            assert (request["stalls"] > 0) == (request["stalled_s"] > 0)
            # time to uninterrupted audio: TTFA plus the largest deficit, which a listener without a buffer spends
            # waiting; the same as TTFA where the stream never ran dry
            assert request["uninterrupted_s"] >= request["ttfa_s"] and request["deficit_s"] >= 0
            assert request["uninterrupted_s"] == pytest.approx(request["ttfa_s"] + request["deficit_s"])
            assert (request["uninterrupted_s"] == request["ttfa_s"]) == (request["deficit_s"] == 0)
            assert request["deficit_s"] == pytest.approx(request["stalled_s"], abs=1e-4)
            assert (request["deficit_s"] > 0) == (request["stalls"] > 0)
        playback = run["playback"]
        assert playback["requests"] == 8 and playback["buffer_s"] == 0
        assert playback["stalled_share"] == sum(r["stalls"] > 0 for r in run["per_request"]) / 8
        assert playback["stalled_s"]["max"] == max(r["stalled_s"] for r in run["per_request"])
        assert run["ran_dry_share"] == playback["stalled_share"]  # the listener without a buffer: one and the same
        assert (
            run["uninterrupted_s"]["p50"] >= run["ttfa_s"]["p50"]
            and run["uninterrupted_s"]["p95"] >= run["ttfa_s"]["p95"]
        )
        assert run["audio_seconds_total"] == pytest.approx(sum(r["audio_s"] for r in run["per_request"]))
        assert run["throughput_rps"] > 0 and run["audio_throughput"] > 0
        assert run["wer"] is not None and run["wer"] <= 0.2
    assert {r["target"] for r in results["ab_ratios"]} == {1}


def test_server_errors_are_counted_by_status_with_one_message(server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "errors"
    done = loadtest(
        "--target",
        server.base_url,
        "--target",
        server.base_url,
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--warmup",
        "0",
        "--extra-body",  # one per target: only the first asks for what the server refuses
        '{"speed": 9}',
        "--extra-body",
        '{"speed": 1.5}',
        "--playback-buffer-ms",
        "60000",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert [t["extra_body"] for t in results["meta"]["targets"]] == [{"speed": 9}, {"speed": 1.5}]
    refused, served = sorted(results["runs"], key=lambda r: r["target"])
    assert refused["ok"] == 0 and refused["errors"] == 4
    assert refused["errors_by_status"] == {"400": 4}
    assert refused["ttfa_s"]["p50"] is None and refused["throughput_rps"] == 0
    ((group),) = refused["error_groups"]
    assert (group["status"], group["code"], group["count"]) == (400, "invalid_value", 4)
    assert "speed" in group["message"]
    summary = (out / "summary.md").read_text()
    assert f"  - 400 invalid_value ×4: {group['message']}\n" in summary
    assert served["ok"] == 4 and served["errors"] == 0
    # a buffer longer than any clip: every listener starts once all of it is in, and never waits after that
    assert served["playback"]["buffer_s"] == 60
    assert served["playback"]["stalled_share"] == 0 and served["playback"]["stalls"]["max"] == 0
    for request in served["per_request"]:
        assert request["ttfa_s"] < request["playback_start_s"] <= request["e2e_s"]
        # the stream's own figure, whatever the listener's buffer: at or after its first audio
        assert request["ttfa_s"] <= request["uninterrupted_s"] <= request["e2e_s"]
    assert served["ran_dry_share"] is not None and refused["uninterrupted_s"]["p50"] is None
    assert refused["ran_dry_share"] is None


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
        "--unique-texts",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    (run,) = results["runs"]
    assert results["meta"]["texts"] == "English/short (unique)"  # every prompt labelled: the server served them all
    assert len(results["meta"]["unique_label"]) == 4
    assert run["rate"] == 4
    assert run["requests"] >= 1 and run["ok"] == run["requests"]
    assert all(0 < r["ttfa_s"] <= r["e2e_s"] for r in run["per_request"])
    # mp3 inside SSE deltas: the player maps bytes to time by the packets PyAV demuxes
    assert run["playback"]["requests"] == run["ok"]
    assert all(r["ttfa_s"] <= r["playback_start_s"] <= r["e2e_s"] for r in run["per_request"])
    # a listener of mp3 starts at the first complete packet, at or after TTFA (its first byte), and may not start
    # before it: the time to uninterrupted audio is at least that
    assert all(r["playback_start_s"] <= r["uninterrupted_s"] for r in run["per_request"])
    assert percentiles_ordered(run["uninterrupted_s"]) and 0 <= run["ran_dry_share"] <= 1
