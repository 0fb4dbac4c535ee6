"""deploy/gpu/batch_compare.py against the real server (embedded engine): one batch sent to each target, interleaved,
every item decoded and its usage as the server reported it, compared field by field between targets; a second target
answers as vllm-omni 0.30 does (its output tokens count the end token: one more per item, measured on the GPU; an
item's error as a bare message), as `vllm serve --omni` would on the GPU host, so that the comparison meets counts
that differ."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer

TOOL = Path(__file__).resolve().parents[2] / "deploy/gpu/batch_compare.py"
ITEMS = 6


def vllm_omni_shaped(answer: dict[str, Any]) -> dict[str, Any]:
    """The service's batch answer as vllm-omni 0.30 words it: the end token counted among the output tokens, an error
    as its message alone."""
    for result in answer["results"]:
        if "usage" in result:
            result["usage"]["output_tokens"] += 1
            result["usage"]["total_tokens"] += 1
        if "error" in result:
            result["error"] = result["error"]["message"]
    return answer


@pytest.fixture(scope="module")
def omni_shaped(server: RunningServer) -> Iterator[str]:
    """A stand-in for `vllm serve --omni` on a loopback port: the real server's batch, answered in vllm-omni's shape."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            upstream = httpx.post(
                f"{server.base_url}{self.path}", content=body, headers={"content-type": "application/json"}, timeout=60
            )
            answer = upstream.json()
            data = json.dumps(vllm_omni_shaped(answer) if upstream.status_code == 200 else answer).encode()
            self.send_response(upstream.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join()


def compare(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--voice", "heart", "--items", str(ITEMS), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (out / "results.json").exists(), done.stderr
    return done, json.loads((out / "results.json").read_text()), (out / "README.md").read_text()


def test_one_batch_per_target_interleaved_decoded_and_its_usage_compared(
    server: RunningServer, omni_shaped: str, tmp_path: Path
) -> None:
    soundfile = pytest.importorskip("soundfile", reason="its lengths are checked with a decoder other than the tool's")
    targets = ["--target", f"service={server.base_url}", "--target", f"again={server.base_url}"]
    done, results, table = compare(tmp_path / "out", *targets, "--target", f"omni={omni_shaped}", "--repeat", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert table in done.stdout  # printed as written

    # one body for all: the shared defaults and each item's own format, of texts of several lengths
    body = results["request"]
    assert {k: v for k, v in body.items() if k != "items"} == {"voice": "heart", "response_format": "wav"}
    formats = [item.get("response_format", "wav") for item in body["items"]]
    assert formats == ["wav", "pcm", "flac"] * (ITEMS // 3)
    assert len({len(item["input"]) for item in body["items"]}) == ITEMS

    # interleaved: A, B, C, A, B, C; every item decoded, of some length
    runs = results["runs"]
    assert [(r["target"], r["repeat"]) for r in runs] == [(t, k) for k in (0, 1) for t in ("service", "again", "omni")]
    for run in runs:
        assert (run["http_status"], run["total"], run["succeeded"], run["failed"], run["anomalies"]) == (
            200,
            ITEMS,
            ITEMS,
            0,
            [],
        )
        assert [i["index"] for i in run["items"]] == list(range(ITEMS)) and run["wall_s"] > 0
        for item, fmt in zip(run["items"], formats, strict=True):
            assert item["status"] == "success" and item["response_format"] == fmt
            assert item["sample_rate"] == 24_000 and item["duration_s"] > 0.5 and "decode_error" not in item
    for summary in results["summaries"]:
        assert summary["items_ok"] == [ITEMS, ITEMS] and summary["items_failed"] == [0, 0]
        assert summary["wall_s_p50"] > 0 and summary["audio_s_per_wall_s_p50"] > 0
        first = summary["usage_totals"][0]
        assert first["total_tokens"] == first["input_tokens"] + first["output_tokens"] > 0

    # what the tool recorded is what the server answers for the same body: usage as sent, the audio's length
    answer = httpx.post(f"{server.base_url}/v1/audio/speech/batch", json=body, timeout=60).json()
    service = runs[0]["items"]
    for mine, theirs, fmt in zip(service, answer["results"], formats, strict=True):
        assert mine["usage"] == theirs["usage"] and set(mine["usage"]) == {
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "input_token_details",
        }
        data = base64.b64decode(theirs["audio_data"])
        samples = len(data) // 2 if fmt == "pcm" else len(soundfile.read(io.BytesIO(data))[0])
        assert abs(mine["samples"] - samples) <= 0.05 * samples
    omni = runs[2]["items"]
    assert (
        omni[0]["usage"]["input_token_details"]
        == service[0]["usage"]["input_token_details"]
        == {
            "text_tokens": service[0]["usage"]["input_tokens"],
            "audio_tokens": 0,
        }
    )

    # the comparison: the same server under two names agrees; vllm-omni's count differs by its end token, the rest
    # (its fields and the input's) agree
    same, shaped = results["usage_comparisons"]
    fields = ("input_tokens", "output_tokens", "total_tokens", "input_token_details.text_tokens")
    fields += ("input_token_details.audio_tokens",)
    assert (same["reference"], same["other"], same["items_differing"]) == ("service", "again", 0)
    assert same["fields"] == {f: {"equal": ITEMS, "differ": 0, "only_reference": 0, "only_other": 0} for f in fields}
    assert (shaped["other"], shaped["items_differing"]) == ("omni", ITEMS)
    for field in ("input_tokens", "input_token_details.text_tokens", "input_token_details.audio_tokens"):
        assert shaped["fields"][field] == {"equal": ITEMS, "differ": 0, "only_reference": 0, "only_other": 0}
    for field in ("output_tokens", "total_tokens"):
        assert shaped["fields"][field] == {"equal": 0, "differ": ITEMS, "only_reference": 0, "only_other": 0}
    assert "| service |" in table and "| omni |" in table and "None: every item succeeded." in table
    assert "## Usage per item: omni against service" in table
    assert table.count("output_tokens: ") == ITEMS and "only from omni" not in table


def test_lengths_other_than_asked_are_each_reported_and_fail_the_run(server: RunningServer, tmp_path: Path) -> None:
    """`--frames 10` (the length fields left out: the embedded engine has no token budget): the embedded engine's
    lengths follow the text, so every item is listed with its length and the run exits 1."""
    target = f"service={server.base_url}"
    done, results, table = compare(tmp_path / "out", "--target", target, "--frames", "10", "--no-length-fields")
    assert done.returncode == 1
    assert "max_new_tokens" not in results["request"] and "ignore_eos" not in results["request"]
    items = results["runs"][0]["items"]
    assert all(i["status"] == "success" and i["expected_samples"] == 19_200 and i["length_ok"] is False for i in items)
    assert results["summaries"][0]["length_mismatches"] == ITEMS
    assert table.count("expected 19200 at 24000") == ITEMS


def test_failed_items_keep_each_servers_error_and_fail_the_run(
    server: RunningServer, omni_shaped: str, tmp_path: Path
) -> None:
    """Every item fails (an unknown voice for the batch): the error object here, the bare message from vllm-omni's
    shape, the same message from both; and a second run into the same folder is refused, never overwriting."""
    targets = ["--target", f"service={server.base_url}", "--target", f"omni={omni_shaped}"]
    out = tmp_path / "out"
    done, results, table = compare(out, *targets, "--extra-body", '{"voice": "nobody"}')
    assert done.returncode == 1
    service, omni = (run["items"] for run in results["runs"])
    assert all(i["status"] == "error" and i["usage"] is None for i in service + omni)
    assert all(isinstance(i["error"], dict) and isinstance(j["error"], str) for i, j in zip(service, omni, strict=True))
    assert (
        [i["error_message"] for i in service]
        == [j["error_message"] for j in omni]
        == [service[0]["error"]["message"]] * ITEMS
    )
    assert results["summaries"][0]["items_failed"] == [ITEMS] and table.count("failed: ") == 2 * ITEMS
    again = subprocess.run([sys.executable, str(TOOL), *targets, "--out", str(out)], capture_output=True, text=True)
    assert again.returncode == 2 and "already holds results" in again.stderr
