"""Metrics, logs, dashboard and alert rules, checked by a real Prometheus scraping a live server under load."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.prometheus import RunningPrometheus, ensure_installed, start_prometheus
from tests.support.server import RunningServer

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/speech-rules.yaml"
DASHBOARD = ROOT / "deploy/grafana/speech.json"
FAMILIES = {
    "speech_requests": "counter",
    "speech_ttfa_seconds": "histogram",
    "speech_ttfa_phase_seconds": "histogram",
    "speech_uninterrupted_seconds": "histogram",
    "speech_streams_ran_dry": "counter",
    "speech_e2e_seconds": "histogram",
    "speech_rtf": "histogram",
    "speech_audio_seconds": "counter",
    "speech_input_characters": "counter",
    "speech_in_flight": "gauge",
    "speech_queue_depth": "gauge",
    "speech_queue_wait_seconds": "histogram",
    "speech_rejected": "counter",
    "speech_aborted": "counter",
    "speech_stream_errors": "counter",
    "speech_build_info": "gauge",  # an info metric: exposed as a gauge of 1 carrying its labels
    "speech_start_seconds": "gauge",
    "speech_event_loop_lag_seconds": "histogram",
}


def load(server: RunningServer) -> None:
    """Streamed, non-streamed (the SDK's plain create), SSE, client errors, and a client that leaves."""
    body = {"model": "tts-1", "voice": "alloy", "input": "Observability under a little load."}
    for fmt in ("pcm", "mp3", "wav"):
        with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json={**body, "response_format": fmt}) as r:
            assert r.status_code == 200
            r.read()
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    assert client.audio.speech.create(model="tts-1", voice="alloy", input="Not streamed by the client.").content
    sse = httpx.post(f"{server.base_url}/v1/audio/speech", json={**body, "stream_format": "sse"}, timeout=60)
    assert sse.status_code == 200
    assert httpx.post(f"{server.base_url}/v1/audio/speech", json={**body, "voice": "nobody"}).status_code == 400
    assert httpx.post(f"{server.base_url}/v1/audio/speech", json={**body, "model": "nope"}).status_code == 404
    long = {
        **body,
        "input": " ".join(["A long text that the client will not wait for."] * 40),
        "response_format": "pcm",
    }
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=long) as r:
        next(r.iter_raw())


@pytest.fixture(scope="module")
def prometheus(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    running = start_prometheus(tmp_path_factory.mktemp("prometheus"), server.base_url.split("//")[1], RULES)
    load(server)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # two scrapes after the load, so that rates have two points
        result = running.query('sum(speech_requests_total{status="404"})')["data"]["result"]
        if result and float(result[0]["value"][1]) >= 1:
            time.sleep(2.5)
            break
        time.sleep(0.5)
    yield running
    running.stop()


def families(server: RunningServer) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.base_url}/metrics").text)}


def test_metric_families_exist_with_their_types(server: RunningServer, prometheus: RunningPrometheus) -> None:
    found = families(server)
    for name, kind in FAMILIES.items():
        assert name in found, name
        assert found[name].type == kind, (name, found[name].type)
    info = next(s for s in found["speech_build_info"].samples if s.name == "speech_build_info")
    assert info.labels["engine"] == "embedded" and info.labels["version"]


def test_the_start_is_exported_and_logged_phase_by_phase(server: RunningServer) -> None:
    """The embedded engine's one phase (its models loading) and the total from the service's first import: once the
    server is ready, in /metrics and in one "started" log line with the same figures."""
    load_s = server.metric("speech_start_seconds", phase="load")
    total_s = server.metric("speech_start_seconds", phase="total")
    assert 0 < load_s <= total_s
    (started,) = [e for e in server.log_events() if e.get("message") == "started"]
    assert started["engine"] == "embedded"
    assert (started["load_s"], started["total_s"]) == (load_s, total_s)


def test_the_event_loops_lag_is_sampled_all_along(server: RunningServer, prometheus: RunningPrometheus) -> None:
    """Sampled from the start until the server stops, 20 times a second (a busy machine may stretch that)."""
    count = server.metric("speech_event_loop_lag_seconds_count")
    time.sleep(0.5)
    assert server.metric("speech_event_loop_lag_seconds_count") >= count + 3
    assert server.metric("speech_event_loop_lag_seconds_sum") >= 0


def test_ttfa_is_observed_for_streamed_plain_and_sse_requests(server: RunningServer, prometheus) -> None:
    assert server.metric("speech_ttfa_seconds_count", stream="audio", response_format="pcm") >= 1
    assert server.metric("speech_ttfa_seconds_count", stream="audio", response_format="mp3") >= 2  # + the SDK's
    assert server.metric("speech_ttfa_seconds_count", stream="sse") >= 1
    assert server.metric("speech_queue_wait_seconds_count") >= 5
    assert server.metric("speech_audio_seconds_total") > 5


def test_ttfa_phases_are_observed_once_per_request_that_sent_audio(server: RunningServer, prometheus) -> None:
    found = families(server)
    ttfa = sum(s.value for s in found["speech_ttfa_seconds"].samples if s.name == "speech_ttfa_seconds_count")
    counts = {
        s.labels["phase"]: s.value
        for s in found["speech_ttfa_phase_seconds"].samples
        if s.name == "speech_ttfa_phase_seconds_count"
    }
    sums = {
        s.labels["phase"]: s.value
        for s in found["speech_ttfa_phase_seconds"].samples
        if s.name == "speech_ttfa_phase_seconds_sum"
    }
    assert set(counts) == {"validate", "queue", "prepare", "engine", "encode_write"}
    assert ttfa >= 5 and all(count == ttfa for count in counts.values())  # every phase of every TTFA observed
    ttfa_sum = sum(s.value for s in found["speech_ttfa_seconds"].samples if s.name == "speech_ttfa_seconds_sum")
    assert sum(sums.values()) == pytest.approx(ttfa_sum, rel=1e-6)  # the phases add up to TTFA
    assert sums["engine"] > 0  # the embedded engine synthesizes the first sentence before any audio exists


def by_labels(server: RunningServer, family: str, sample: str) -> dict[tuple[str, str], float]:
    """A family's sample values per (response_format, stream)."""
    found = families(server)[family]
    return {(s.labels["response_format"], s.labels["stream"]): s.value for s in found.samples if s.name == sample}


def test_time_to_uninterrupted_audio_is_observed_once_per_completed_stream(server: RunningServer, prometheus) -> None:
    """Every stream the load completed (plain, the SDK's, SSE; a WebSocket utterance too) is observed once, at or past
    its TTFA; the client that left after its first bytes has a TTFA but is not observed."""
    from websockets.sync.client import connect

    with connect(server.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream") as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "pcm"}))
        ws.send(json.dumps({"type": "input.text", "text": "Two sentences over a socket. Heard back to back."}))
        ws.send(json.dumps({"type": "input.done"}))
        while not (isinstance(m := ws.recv(timeout=60), str) and json.loads(m)["type"] == "session.done"):
            pass
    ttfa_count = by_labels(server, "speech_ttfa_seconds", "speech_ttfa_seconds_count")
    ttfa_sum = by_labels(server, "speech_ttfa_seconds", "speech_ttfa_seconds_sum")
    count = by_labels(server, "speech_uninterrupted_seconds", "speech_uninterrupted_seconds_count")
    total = by_labels(server, "speech_uninterrupted_seconds", "speech_uninterrupted_seconds_sum")
    dry = by_labels(server, "speech_streams_ran_dry", "speech_streams_ran_dry_total")
    for labels in [("mp3", "audio"), ("wav", "audio"), ("mp3", "sse"), ("pcm", "websocket")]:
        assert count.get(labels, 0) >= 1, labels
    # the server is shared by the whole session: compare what this test's own two plain pcm streams added, one
    # completed and a long one whose client left after the first bytes (a TTFA, no uninterrupted)
    pcm = ("pcm", "audio")
    ttfa_before, count_before = ttfa_count[pcm], count[pcm]
    body = {"model": "tts-1", "voice": "alloy", "response_format": "pcm"}
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json={**body, "input": "Heard to the end."}) as r:
        assert r.status_code == 200
        r.read()
    long = {**body, "input": " ".join(["A long text that the client will not wait for."] * 40)}
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=long) as r:
        next(r.iter_raw())
    ttfa_after = by_labels(server, "speech_ttfa_seconds", "speech_ttfa_seconds_count")[pcm]
    assert ttfa_after - ttfa_before == 2
    assert by_labels(server, "speech_uninterrupted_seconds", "speech_uninterrupted_seconds_count")[pcm] == (
        count_before + 1
    )
    for labels, observed in count.items():
        assert observed <= ttfa_count[labels] and dry[labels] <= observed, labels
        if observed == ttfa_count[labels]:  # the same streams: each at or past its own TTFA
            assert total[labels] >= ttfa_sum[labels], labels
    assert set(dry) >= {(f, s) for f in ("mp3", "opus", "aac", "flac", "wav", "pcm") for s in ("audio", "sse")}
    assert all(0 < total[labels] / count[labels] < 30 for labels in count)


def test_errors_are_counted_under_their_status(server: RunningServer, prometheus) -> None:
    assert server.metric("speech_requests_total", status="400") >= 1
    assert server.metric("speech_requests_total", status="404") >= 1
    assert server.metric("speech_requests_total", status="200") >= 6
    assert server.metric("speech_aborted_total", reason="client_gone") >= 1


def test_one_json_log_line_per_request(server: RunningServer, prometheus) -> None:
    request_id = "log-line-check"
    httpx.post(
        f"{server.base_url}/v1/audio/speech",
        headers={"X-Request-Id": request_id},
        json={"model": "tts-1", "voice": "alloy", "input": "One line.", "response_format": "wav"},
    )
    httpx.post(
        f"{server.base_url}/v1/audio/speech",
        headers={"X-Request-Id": request_id + "-bad"},
        json={"model": "tts-1", "voice": "nobody", "input": "One line."},
    )
    time.sleep(0.3)
    lines = [e for e in server.log_events() if e.get("message") == "speech request"]
    ok = [e for e in lines if e.get("request_id") == request_id]
    bad = [e for e in lines if e.get("request_id") == request_id + "-bad"]
    assert len(ok) == 1 and len(bad) == 1
    for key in (
        "model",
        "voice",
        "response_format",
        "stream_format",
        "chars",
        "ttfa_s",
        "e2e_s",
        "audio_s",
        "status",
        "outcome",
    ):
        assert key in ok[0], key
    assert ok[0]["status"] == 200 and ok[0]["ttfa_s"] <= ok[0]["e2e_s"]
    assert bad[0]["status"] == 400
    assert bad[0]["error"] == {"type": "invalid_request_error", "code": "voice_not_found", "param": "voice"}
    assert "error" not in ok[0]
    phases = ok[0]["ttfa_phases_s"]
    assert list(phases) == ["validate", "queue", "prepare", "engine", "encode_write"]
    assert all(value >= 0 for value in phases.values()) and phases["engine"] > 0
    assert sum(phases.values()) == pytest.approx(ok[0]["ttfa_s"], abs=0.0005 * 6)  # each rounded to 0.1 ms
    timeline = ok[0]["timeline_s"]
    assert list(timeline) == ["queued", "admitted", "submitted", "first_chunk", "first_byte"]
    assert list(timeline.values()) == sorted(timeline.values())
    assert timeline["first_byte"] == pytest.approx(ok[0]["ttfa_s"], abs=0.0002)
    assert "ttfa_phases_s" not in bad[0] and "first_byte" not in bad[0].get("timeline_s", {})


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m")
            expr = re.sub(r"\$\{?(namespace|pod|model)\}?", ".*", expr)
            out.append((panel["title"], expr))
    return out


def test_every_dashboard_query_evaluates(prometheus: RunningPrometheus) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    empty = []
    for title, expr in queries:
        answer = prometheus.query(expr)
        assert answer["status"] == "success", (title, expr, answer)
        if not answer["data"]["result"]:
            empty.append(title)
    # the service's own panels have data; engine (vllm-omni) and GPU (DCGM) panels have none on the CPU engine
    must_have = [
        "Time to first audio",
        "Time to uninterrupted audio",
        "Streams that ran dry",
        "TTFA by phase (p50",
        "TTFA by phase (p95",
        "TTFA by phase (mean",
        "Requests / s by status",
        "End-to-end time",
        "Audio seconds / s",
        "In flight",
        "Queue wait",
        "Aborts / s by reason",
        "Real-time factor",
        "Start by phase",
    ]
    for title in must_have:
        assert any(t.startswith(title) for t, _ in queries), title  # the panel exists
        assert not [t for t in empty if t.startswith(title)], (title, empty)


def test_the_dashboard_breaks_ttfa_down_by_phase() -> None:
    panels = {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}
    for title in ("TTFA by phase (p50, stacked)", "TTFA by phase (p95, stacked)", "TTFA by phase (mean, stacked)"):
        panel = panels[title]
        assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
        exprs = [t["expr"] for t in panel["targets"]]
        assert all("speech_ttfa_phase_seconds" in e for e in exprs)
        phases = [re.search(r'phase="(\w+)"', e).group(1) for e in exprs]
        assert phases == ["validate", "queue", "prepare", "engine", "encode_write"]  # stacked in request order


def test_uninterrupted_audio_sits_beside_ttfa_on_the_dashboard_and_in_the_rules() -> None:
    panels = {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}
    ttfa, heard = (
        panels["Time to first audio (p50 / p95 / p99)"],
        panels["Time to uninterrupted audio (p50 / p95 / p99)"],
    )
    assert heard["gridPos"]["y"] == ttfa["gridPos"]["y"]
    assert heard["gridPos"]["x"] == ttfa["gridPos"]["x"] + ttfa["gridPos"]["w"]  # right of it
    assert all("speech_uninterrupted_seconds_bucket" in t["expr"] for t in heard["targets"])
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    alerts = [rule["alert"] for rule in rules if "alert" in rule]
    assert alerts.index("SpeechUninterruptedAudioSlow") == alerts.index("SpeechTTFABudgetBurnSlow") + 1


def test_every_service_metric_the_dashboard_and_rules_read_is_exported(server: RunningServer, prometheus) -> None:
    """A panel or an alert on a metric the service does not export would show nothing, or never fire."""
    exported = set(families(server))
    rules = [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    used = {name for expr in [e for _, e in dashboard_queries()] + rules for name in re.findall(r"\bspeech_\w+", expr)}
    assert {"speech_uninterrupted_seconds_bucket", "speech_streams_ran_dry_total"} <= used
    families_used = {re.sub(r"_(bucket|count|sum|total)$", "", name) for name in used}
    assert families_used - exported == set()


def test_dashboard_variables(prometheus: RunningPrometheus) -> None:
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert {"datasource", "namespace", "pod", "model"} <= set(variables)
    for name in ("namespace", "pod", "model"):
        query = variables[name]["query"]["query"]
        metric = re.search(r"label_values\((\w+)", query).group(1)
        assert prometheus.query(metric)["data"]["result"], name


def test_every_rule_expression_evaluates(prometheus: RunningPrometheus) -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert sum("alert" in r for r in rules) >= 5 and sum("record" in r for r in rules) >= 5
    for rule in rules:
        answer = prometheus.query(rule["expr"])
        assert answer["status"] == "success", (rule, answer)
        if "alert" in rule:
            assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
            anchor = rule["annotations"]["runbook_url"].split("#")[1]
            assert f"## {rule['alert']}".lower() == f"## {anchor}" or anchor == rule["alert"].lower()
            assert f"## {rule['alert']}" in (ROOT / "deploy/RUNBOOK.md").read_text()

    def recorded() -> float:
        result = prometheus.query("speech:ttfa_seconds:p95_5m")["data"]["result"]
        return float(result[0]["value"][1]) if result else float("nan")

    # the first evaluations may precede two scrapes with TTFA data (then the quantile is NaN): wait for a number
    deadline = time.monotonic() + 20
    while (value := recorded()) != value:
        assert time.monotonic() < deadline, "the recording rule never produced a value"
        time.sleep(0.5)
    assert 0 < value < 30  # the recording rule itself has run on the scraped data


def test_rules_loaded_healthy_and_promtool_passes(prometheus: RunningPrometheus) -> None:
    ensure_installed()
    checked = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    groups = httpx.get(f"{prometheus.url}/api/v1/rules").json()["data"]["groups"]
    health = [rule["health"] for group in groups for rule in group["rules"]]
    assert health and all(h in ("ok", "unknown") for h in health)
