"""The alert rules evaluated by Prometheus's own rule engine (`promtool test rules`) over series written here: what
must page does, what must not does not."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.prometheus import ensure_installed

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/speech-rules.yaml"

# 20 requests a minute, all answered 200 (a stream cut after its audio began keeps the status it started with)
ANSWERED = {"series": 'speech_requests_total{status="200"}', "values": "0+20x30"}


def promtool_passes(tmp_path: Path, series: list[dict[str, str]], **checks: list[dict[str, object]]) -> None:
    """`promtool test rules` over the rules and `series` (one value a minute, rules evaluated every 30 s), passing
    `checks` (promtool's `promql_expr_test`, `alert_rule_test`)."""
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "30s",
        "tests": [{"interval": "1m", "input_series": series, **checks}],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    ensure_installed()
    run = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", str(path)], capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def promtool_test(tmp_path: Path, series: list[dict[str, str]], expected_ratio: float, fires: bool) -> None:
    """`speech:error_ratio:rate5m` at 20 minutes is `expected_ratio`, and SpeechHighErrorRatio fires then, or not."""
    rule = next(
        r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]
        if r.get("alert") == "SpeechHighErrorRatio"
    )  # fmt: skip
    annotations = {**rule["annotations"]}
    annotations["description"] = annotations["description"].replace("{{ $value | humanizePercentage }}", "10%")
    alerts = [{"exp_labels": {"severity": "page"}, "exp_annotations": annotations}] if fires else []
    promtool_passes(
        tmp_path,
        series,
        promql_expr_test=[
            {
                "expr": "round(speech:error_ratio:rate5m, 0.001)",  # rates are floats: 0.0999… is 10%
                "eval_time": "20m",
                "exp_samples": [{"labels": "{}", "value": expected_ratio}],
            }
        ],
        alert_rule_test=[{"eval_time": "20m", "alertname": "SpeechHighErrorRatio", "exp_alerts": alerts}],
    )


def test_streams_cut_by_an_error_after_their_audio_began_count_as_errors(tmp_path: Path) -> None:
    """Two of every 20 requests a minute are streams cut by an error after their 200 (`speech_stream_errors_total`;
    `speech_aborted_total{reason="error"}` counts them too, and also whole files that then answered 5xx): 10% fail,
    and the error alert pages as it would for 10% answered 5xx."""
    cut = {"series": 'speech_stream_errors_total{stream="audio"}', "values": "0+2x30"}
    aborted = {"series": 'speech_aborted_total{reason="error"}', "values": "0+2x30"}
    promtool_test(tmp_path, [ANSWERED, cut, aborted], 0.1, fires=True)


def test_a_server_error_before_audio_counts_once(tmp_path: Path) -> None:
    """A 5xx is counted once, also where its synthesis was aborted with an error (a whole file that failed after its
    first audio): 2 of 20 is 10%, not 20%."""
    failed = {"series": 'speech_requests_total{status="500"}', "values": "0+2x30"}
    answered = {"series": 'speech_requests_total{status="200"}', "values": "0+18x30"}
    aborted = {"series": 'speech_aborted_total{reason="error"}', "values": "0+2x30"}
    promtool_test(tmp_path, [answered, failed, aborted], 0.1, fires=True)


def test_clients_that_leave_are_not_errors(tmp_path: Path) -> None:
    gone = {"series": 'speech_aborted_total{reason="client_gone"}', "values": "0+5x30"}
    drained = {"series": 'speech_aborted_total{reason="drain"}', "values": "0+1x30"}
    promtool_test(tmp_path, [ANSWERED, gone, drained], 0.0, fires=False)


def test_websocket_utterances_that_fail_with_a_server_error_count_beside_the_requests(tmp_path: Path) -> None:
    """A WebSocket utterance is served like a request, so one that fails with an error of the server's own
    (`speech_ws_utterances_total{outcome="error"}`) counts as a 5xx would, and every utterance counts among what was
    served: 20 requests and 20 utterances a minute, 4 utterances failed, is 10%, and pages; a WebSocket-only replica
    whose utterances fail pages too."""
    utterances = [
        {"series": 'speech_ws_utterances_total{outcome="completed"}', "values": "0+16x30"},
        {"series": 'speech_ws_utterances_total{outcome="error"}', "values": "0+4x30"},
    ]
    promtool_test(tmp_path, [ANSWERED, *utterances], 0.1, fires=True)
    alone = [
        {"series": 'speech_ws_utterances_total{outcome="completed"}', "values": "0+9x30"},
        {"series": 'speech_ws_utterances_total{outcome="error"}', "values": "0+1x30"},
    ]
    promtool_test(tmp_path, alone, 0.1, fires=True)


def test_utterances_refused_for_their_request_or_cut_by_their_client_are_not_errors(tmp_path: Path) -> None:
    """Refused (a field, a full server) and cut short by the session's end are not the server failing: 0%, no page."""
    utterances = [
        {"series": f'speech_ws_utterances_total{{outcome="{outcome}"}}', "values": "0+3x30"}
        for outcome in ("completed", "refused", "client_gone", "client_stalled", "stopped")
    ]
    promtool_test(tmp_path, [ANSWERED, *utterances], 0.0, fires=False)


def run_promtool(tmp_path: Path, series: list[dict[str, str]], alerts: dict[str, list[dict[str, object]]]) -> None:
    """`promtool test rules` over `series` (one value a minute), expecting `alerts` at 7 hours: alert -> alerts."""
    checks = [{"eval_time": "7h", "alertname": name, "exp_alerts": expected} for name, expected in alerts.items()]
    promtool_passes(tmp_path, series, alert_rule_test=checks)


def ttfa_series(stream: str, values: str, fast: str) -> list[dict[str, str]]:
    """A replica's TTFA histogram for one `stream` kind: `values` requests in all (promtool's notation), `fast` of
    them within 500 ms."""
    labels = f'response_format="mp3",stream="{stream}"'
    return [
        {"series": f'speech_ttfa_seconds_bucket{{{labels},le="0.5"}}', "values": fast},
        {"series": f'speech_ttfa_seconds_bucket{{{labels},le="+Inf"}}', "values": values},
        {"series": f"speech_ttfa_seconds_count{{{labels}}}", "values": values},
    ]


def latency_series(values: str, fast: str) -> list[dict[str, str]]:
    """A replica's TTFA and uninterrupted histograms of audio streams: `values` requests in all (promtool's
    notation), `fast` of them within each objective (500 ms, 1 s)."""
    labels = 'response_format="mp3",stream="audio"'
    return [
        *ttfa_series("audio", values, fast),
        {"series": f'speech_uninterrupted_seconds_bucket{{{labels},le="1.0"}}', "values": fast},
        {"series": f'speech_uninterrupted_seconds_bucket{{{labels},le="+Inf"}}', "values": values},
        {"series": f"speech_uninterrupted_seconds_count{{{labels}}}", "values": values},
        {"series": "speech_ready", "values": "1x430"},
    ]


LATENCY_ALERTS = ("SpeechTTFABudgetBurnFast", "SpeechTTFABudgetBurnSlow", "SpeechUninterruptedAudioSlow")


def test_a_replica_with_no_requests_is_not_slow(tmp_path: Path) -> None:
    """Ten busy minutes, all fast, then seven quiet hours (a night; the histograms' series stay, unchanged): with no
    request in any window nothing was slow. Counted as 1 less the fast share, the quiet read as 100% slow, and both
    TTFA burn alerts and the uninterrupted one fired ("100% of requests waited over 500 ms") on a replica nobody
    called."""
    quiet = "0+20x10 200x420"
    run_promtool(tmp_path, latency_series(quiet, quiet), {name: [] for name in LATENCY_ALERTS})


def test_slow_requests_still_page(tmp_path: Path) -> None:
    """Seven hours with every request over both objectives: each latency alert fires, saying 100%."""
    rules = {r.get("alert"): r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}

    def fired(name: str) -> list[dict[str, object]]:
        annotations = {**rules[name]["annotations"]}
        annotations["description"] = annotations["description"].replace("{{ $value | humanizePercentage }}", "100%")
        return [{"exp_labels": rules[name]["labels"], "exp_annotations": annotations}]

    run_promtool(tmp_path, latency_series("0+20x430", "0x430"), {name: fired(name) for name in LATENCY_ALERTS})


def test_whole_files_and_batch_items_are_not_held_to_the_first_audio_objective(tmp_path: Path) -> None:
    """A whole file (`stream: false`, the `file` label) or a batch item (`batch`) is sent once all of it exists, so its
    first byte comes with its last: its TTFA is its synthesis time, seconds for a long text, never the 500 ms a
    listener of a stream is promised. Seven hours of them, twice as many as the streams and all over 500 ms, beside
    streams all within it: nothing pages and the TTFA median is the streams'. Slow streams beside fast whole files:
    their share is all of them, not diluted."""
    slow_whole = ttfa_series("file", "0+20x430", "0x430") + ttfa_series("batch", "0+20x430", "0x430")
    streams_fast = latency_series("0+20x430", "0+20x430")
    run_promtool(tmp_path, streams_fast + slow_whole, {name: [] for name in LATENCY_ALERTS})
    fast_whole = ttfa_series("file", "0+20x430", "0+20x430") + ttfa_series("batch", "0+20x430", "0+20x430")
    promtool_passes(
        tmp_path,
        streams_fast + slow_whole,
        promql_expr_test=[  # every stream within 500 ms: the median halfway into the first bucket, not in the files'
            {
                "expr": "speech:ttfa_seconds:p50_5m",
                "eval_time": "7h",
                "exp_samples": [{"labels": "speech:ttfa_seconds:p50_5m", "value": 0.25}],
            }
        ],
    )
    promtool_passes(
        tmp_path,
        latency_series("0+20x430", "0x430") + fast_whole,
        promql_expr_test=[  # the streams' share alone: all slow, not a third
            {
                "expr": "speech:ttfa_slow_ratio:rate1h",
                "eval_time": "7h",
                "exp_samples": [{"labels": "speech:ttfa_slow_ratio:rate1h", "value": 1}],
            }
        ],
    )


def test_the_first_audio_objective_counts_the_metrics_stream_kinds() -> None:
    """The objective's streams are the metrics' (app/metrics.py STREAM_KINDS, the kinds a ran-dry share is counted
    for): every TTFA selector of the rules and of the dashboard names exactly those."""
    from app.metrics import STREAM_KINDS

    matcher = f'stream=~"{"|".join(STREAM_KINDS)}"'
    rules = RULES.read_text()
    selectors = re.findall(r"speech_ttfa_seconds_(?:bucket|count)\{([^}]*)\}", rules)
    assert selectors and all(matcher in selector for selector in selectors)
    dashboard = (ROOT / "deploy/grafana/speech.json").read_text().replace('\\"', '"')
    panels = re.findall(r"speech_ttfa_seconds_bucket\{([^}]*)\}", dashboard)
    assert panels and all(matcher in selector for selector in panels)


def test_only_refusals_for_want_of_a_slot_fire_the_capacity_alert(tmp_path: Path) -> None:
    """SpeechSustainedRejections says the server turns work away for want of capacity: a full queue, or no slot in
    time (`queue_full`, `queue_timeout`). A batch's items that ran out of their batch's own time while they waited on
    the batch (`batch_timeout`), a drain's refusals, and keys refused are no such sign: a second of each, for twenty
    minutes, pages nobody; a second of `queue_timeout` does."""
    rule = next(
        r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]
        if r.get("alert") == "SpeechSustainedRejections"
    )  # fmt: skip
    others = [
        {"series": f'speech_rejected_total{{reason="{reason}"}}', "values": "0+60x30"}
        for reason in ("batch_timeout", "draining", "unauthorized", "per_key_limit")
    ]
    check = {"eval_time": "20m", "alertname": "SpeechSustainedRejections"}
    promtool_passes(tmp_path, others, alert_rule_test=[{**check, "exp_alerts": []}])
    annotations = {**rule["annotations"]}
    annotations["description"] = annotations["description"].replace("{{ $value | humanize }}", "1")
    fired = [{"exp_labels": rule["labels"], "exp_annotations": annotations}]
    full = {"series": 'speech_rejected_total{reason="queue_timeout"}', "values": "0+60x30"}
    promtool_passes(tmp_path, [*others, full], alert_rule_test=[{**check, "exp_alerts": fired}])
