"""`speech-loadtest --ws` against the real server (embedded engine): text streamed word by word into
WS /v1/audio/speech/stream, closed and open loop, and the report's figures checked against what was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_loadtest import PNG_MAGIC, loadtest, percentiles_ordered
from tests.support.server import RunningServer

# three sentences each, the first of 5 words: it is spoken while the other two are still being written
TEXTS = [
    "The train was late again. Everyone waited on the cold platform with a cup of coffee in their hands. "
    "When it finally arrived, the doors opened slowly and nobody said a word.",
    "Our garden has many tomatoes. We carry baskets of them to the neighbours every evening after dinner. "
    "Nobody seems to mind, and the children love to help pick the ripest ones.",
]
SENTENCES = 3
RATE = 20.0


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ws-texts") / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


def ws_loadtest(server: RunningServer, text_file: Path, out: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """`speech-loadtest --ws` on the texts above against `server`, which must succeed: its stdout and results.json."""
    done = loadtest("--target", server.base_url, "--ws", "--text-file", str(text_file), *args, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((out / "results.json").read_text())


def check_utterances(run: dict[str, object], requests: int) -> None:
    assert (run["requests"], run["ok"], run["errors"]) == (requests, requests, 0), run["error_groups"]
    for request in run["per_request"]:
        words = min(len(text.split()) for text in TEXTS)
        assert request["status"] == 101
        assert 0 < request["ttfa_s"] < request["text_send_s"], request
        # sent on schedule: the first sentence (5 words) ends 4 token intervals in, the text some 30 words later
        assert request["first_sentence_sent_s"] == pytest.approx(4 / RATE, abs=0.15)
        assert request["text_send_s"] >= (words - 1) / RATE - 0.1
        assert request["sentences"] == SENTENCES
        assert len(request["gaps_s"]) == SENTENCES - 1 and all(gap >= 0 for gap in request["gaps_s"])
        assert request["stalls"] >= 0 and request["stalled_s"] >= 0
        # the listener starts at the first sentence's audio, which came ttfa_s after its last word was sent
        assert request["playback_start_s"] >= request["first_sentence_sent_s"] + request["ttfa_s"] - 1e-6
        # time to uninterrupted audio counts from TTFA's origin, and every wait, the gaps between sentences included
        assert request["uninterrupted_s"] >= request["ttfa_s"] - 1e-6
        assert request["uninterrupted_s"] + request["first_sentence_sent_s"] >= request["playback_start_s"] - 1e-6
        assert request["deficit_s"] == pytest.approx(request["stalled_s"] + sum(request["gaps_s"]), abs=1e-4)
        assert request["audio_s"] > 5 and request["e2e_s"] >= request["text_send_s"]
    stream = run["text_stream"]
    assert stream["utterances"] == requests
    assert stream["sentences"] == SENTENCES * requests  # every sentence sent was spoken, once
    assert stream["joins"] == (SENTENCES - 1) * requests
    assert stream["gap_s"]["p50"] >= 0 and stream["gap_s"]["max"] >= stream["gap_s"]["p95"] >= stream["gap_s"]["p50"]
    assert percentiles_ordered(run["ttfa_s"]) and percentiles_ordered(run["uninterrupted_s"])
    assert run["uninterrupted_s"]["p50"] >= run["ttfa_s"]["p50"] - 1e-6 and run["ran_dry_share"] is not None


def test_closed_loop_streamed_text(server: RunningServer, text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws"
    stdout, results = ws_loadtest(
        server, text_file, out, "--text-rate", f"{RATE:g}", "--concurrency", "1,2", "--requests", "2", "--warmup", "1",
        "--asr",
    )  # fmt: skip
    assert "## Sentence gaps" in stdout
    meta, runs = results["meta"], results["runs"]
    assert (meta["transport"], meta["text_rate"], meta["response_format"]) == ("websocket", RATE, "pcm")
    assert [run["concurrency"] for run in runs] == [1, 2]
    for run in runs:
        check_utterances(run, 2)
        assert run["concurrency_achieved"] == run["concurrency"]
        assert run["wer"] is not None and run["wer"] <= 0.2  # each utterance's sentences, joined, say the text
    for png in ("ttfa.png", "stalls.png", "gaps.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC


def test_open_loop_streamed_text_in_a_compressed_format(server: RunningServer, text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws-open"
    # two arrivals with the default seed
    _, results = ws_loadtest(server, text_file, out, "--rate", "1", "--duration", "4", "--format", "opus")
    (run,) = results["runs"]
    assert run["rate"] == 1 and run["requests"] == 2
    check_utterances(run, run["requests"])
    assert run["playback"]["requests"] == run["ok"]  # opus mapped packet by packet: every utterance was heard


def test_refused_utterances_are_counted_by_code(server: RunningServer, text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws-refused"
    _, results = ws_loadtest(
        server, text_file, out, "--concurrency", "1", "--requests", "2", "--warmup", "0",
        "--voice", "nobody-by-this-name",
    )  # fmt: skip
    (run,) = results["runs"]
    assert (run["ok"], run["errors"], run["errors_by_code"]) == (0, 2, {"voice_not_found": 2})
    (group,) = run["error_groups"]
    assert group["status"] == 101 and "nobody-by-this-name" in group["message"]
    assert run["text_stream"]["utterances"] == 0
    assert f"  - 101 voice_not_found ×2: {group['message']}" in (out / "summary.md").read_text()


def test_word_timestamps_audio_comes_as_json_frames(server: RunningServer, text_file: Path, tmp_path: Path) -> None:
    """With word_timestamps the audio travels base64 in audio.chunk frames: measured and heard as binary frames are,
    and every sentence brought its words' timestamps."""
    out = tmp_path / "ws-timestamps"
    _, results = ws_loadtest(
        server, text_file, out, "--concurrency", "1", "--requests", "2", "--warmup", "0",
        "--extra-body", '{"word_timestamps": true}', "--asr",
    )  # fmt: skip
    assert results["meta"]["extra_body"] == {"word_timestamps": True}
    (run,) = results["runs"]
    check_utterances(run, 2)
    assert [r["timestamped_sentences"] for r in run["per_request"]] == [SENTENCES, SENTENCES]
    assert run["text_stream"]["timestamped_sentences"] == SENTENCES * 2
    assert run["wer"] is not None and run["wer"] <= 0.2  # the base64 audio, decoded, says the text
