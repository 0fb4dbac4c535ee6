"""The load tool's report: errors summarised one message per code, the listener's stalls per level, and per-target
request fields from the command line."""

from __future__ import annotations

import pytest

from loadtest.cli import build_targets, parse_args
from loadtest.measure import RequestResult, describe_exception
from loadtest.report import aggregate, summary_markdown
from loadtest.runner import LevelRun
from loadtest.targets import Target


def ok(stalls: int | None, stalled_s: float | None) -> RequestResult:
    return RequestResult(0, "t", 200, True, ttfa_s=0.1, e2e_s=1.0, audio_s=2.0, stalls=stalls, stalled_s=stalled_s)


def failed(status: int, code: str, message: str) -> RequestResult:
    return RequestResult(0, "t", status, False, code, e2e_s=0.01, error_message=message)


def level(results: list[RequestResult]) -> LevelRun:
    return LevelRun(Target(0, "http://a", "m", "v"), "concurrency", 8, results, wall_s=2.0, peak_in_flight=8)


def meta(buffer_ms: float = 0.0) -> dict[str, object]:
    return {
        "started_at": "now",
        "response_format": "pcm",
        "stream_format": "audio",
        "texts": "English/medium",
        "requests": 8,
        "warmup": 0,
        "playback_buffer_ms": buffer_ms,
        "targets": [{"index": 0, "label": "A: http://a", "model": "m", "voice": "v"}],
    }


def test_errors_are_summarised_one_message_per_code() -> None:
    results = [
        *(failed(429, "rate_limit_exceeded", f"queue full ({i})") for i in range(12)),
        failed(0, "ReadError", "ReadError <- ConnectionResetError: [Errno 104] Connection reset by peer"),
        ok(0, 0.0),
    ]
    run = aggregate(level(results), None)
    assert run["errors_by_code"] == {"rate_limit_exceeded": 12, "ReadError": 1}
    assert run["error_groups"] == [
        {"status": 429, "code": "rate_limit_exceeded", "count": 12, "message": "queue full (0)"},
        {
            "status": 0,
            "code": "ReadError",
            "count": 1,
            "message": "ReadError <- ConnectionResetError: [Errno 104] Connection reset by peer",
        },
    ]
    text = summary_markdown(meta(), [run])
    assert "  - 429 rate_limit_exceeded ×12: queue full (0)\n" in text
    assert "  - client ReadError ×1: ReadError <- ConnectionResetError: [Errno 104] Connection reset by peer\n" in text
    assert text.count("queue full") == 1


def test_stalls_per_level_percentiles_max_and_share() -> None:
    stalled = [0.0] * 6 + [0.2, 1.0]
    counts = [0] * 6 + [1, 3]
    results = [ok(c, s) for c, s in zip(counts, stalled, strict=True)]
    results.append(ok(None, None))  # a response the player could not map: not counted either way
    run = aggregate(level(results), None, playback_buffer_s=0.25)
    playback = run["playback"]
    assert playback["buffer_s"] == 0.25
    assert playback["requests"] == 8
    assert playback["stalled_share"] == pytest.approx(2 / 8)
    assert playback["stalls"]["p50"] == 0.0 and playback["stalls"]["max"] == 3.0
    assert playback["stalled_s"]["max"] == 1.0
    assert 0.2 < playback["stalled_s"]["p95"] < 1.0
    assert [r["stalls"] for r in run["per_request"]] == [*counts, None]
    text = summary_markdown(meta(250), [run])
    assert "## Playback (a listener who starts once 250 ms of audio have arrived" in text
    assert "| A: http://a | 8 | 8 | 25% | 0 | " in text
    assert "| 0 | 720 | 1000 |" in text  # stalled ms p50, p95, max


def test_no_mappable_response_reports_no_stall_figures_rather_than_zeros() -> None:
    playback = aggregate(level([ok(None, None)]), None)["playback"]
    assert playback["requests"] == 0 and playback["stalled_share"] is None
    assert playback["stalled_s"] == {"p50": None, "p95": None, "max": None}


def test_extra_body_once_for_all_or_once_per_target() -> None:
    both = build_targets(parse_args(["--target", "http://a", "--target", "http://b", "--extra-body", '{"seed": 1}']))
    assert [t.extra_body for t in both] == [{"seed": 1}, {"seed": 1}]
    each = build_targets(
        parse_args(
            [
                "--target",
                "http://a",
                "--target",
                "http://b",
                "--extra-body",
                '{"max_new_tokens": 101}',
                "--extra-body",
                '{"stream_format": "audio"}',
            ]
        )
    )
    assert [t.extra_body for t in each] == [{"max_new_tokens": 101}, {"stream_format": "audio"}]
    assert [t.extra_body for t in build_targets(parse_args(["--target", "http://a"]))] == [{}]
    with pytest.raises(SystemExit):  # two for three targets: ambiguous
        build_targets(
            parse_args(["--target", "a", "--target", "b", "--target", "c", "--extra-body", "{}", "--extra-body", "{}"])
        )
    with pytest.raises(SystemExit):
        build_targets(parse_args(["--target", "a", "--extra-body", "[1]"]))
    with pytest.raises(SystemExit):
        build_targets(parse_args(["--target", "a", "--extra-body", "{nope"]))
    with pytest.raises(SystemExit):
        parse_args(["--target", "a", "--playback-buffer-ms", "-1"])
    with pytest.raises(SystemExit):
        parse_args(["--target", "a", "--keepalive-expiry", "-1"])
    assert parse_args(["--target", "a"]).keepalive_expiry == 1.0


def test_where_each_stream_first_ran_dry_is_kept_per_request_and_summarised() -> None:
    from loadtest.measure import heard_fields
    from loadtest.playback import simulate_playback

    # 0.16 s of audio at 0.1 s, the next window at 0.5 s: dry at 0.16 s of audio for 0.24 s; then in time
    early = simulate_playback([(0.1, 0.16), (0.5, 0.48), (0.7, 2.0)])
    # in time until 1.0 s of audio, then dry there
    late = simulate_playback([(0.1, 1.0), (1.5, 2.0)])
    assert early is not None and late is not None
    results = [RequestResult(0, "t", 200, True, ttfa_s=0.1, e2e_s=1.0, audio_s=2.0, **heard_fields(p))
               for p in (early, late, simulate_playback([(0.1, 2.0)]))]  # fmt: skip
    assert heard_fields(None) == dict.fromkeys(
        (
            "playback_start_s",
            "stalls",
            "stalled_s",
            "stalls_at_audio_s",
            "audio_arrivals",
            "least_in_hand_s",
            "uninterrupted_s",
            "deficit_s",
        )
    )
    run = aggregate(level(results), None)
    assert [r["stalls_at_audio_s"] for r in run["per_request"]] == [[pytest.approx(0.16)], [pytest.approx(1.0)], []]
    assert run["per_request"][0]["audio_arrivals"] == [[0.1, 0.16], [0.5, 0.48], [0.7, 2.0]]  # which window was late
    first = run["playback"]["first_stall_at_audio_s"]
    assert first["max"] == pytest.approx(1.0) and first["p50"] == pytest.approx(0.58)  # of the two that ran dry
    assert run["playback"]["first_stall_places"] == [
        {"at_audio_s": 0.16, "streams": 1},
        {"at_audio_s": 1.0, "streams": 1},
    ]
    text = summary_markdown(meta(), [run])
    assert "| first ran dry at audio ms p50 | p95 | most often at ms (streams) |" in text
    assert f"| {first['p50'] * 1000:.0f} | {first['p95'] * 1000:.0f} | 160 (1), 1000 (1) |" in text


def test_how_close_streams_came_to_running_dry_is_kept_per_request_and_summarised() -> None:
    from loadtest.measure import heard_fields
    from loadtest.playback import simulate_playback

    # in time with 60 ms then 80 ms to spare; in time with 400 ms to spare; dry for 240 ms; all at once (no margin)
    close = simulate_playback([(0.1, 0.16), (0.2, 0.48), (0.5, 1.12)])
    ample = simulate_playback([(0.1, 1.0), (0.7, 2.0)])
    dry = simulate_playback([(0.1, 0.16), (0.5, 0.48), (0.7, 2.0)])
    once = simulate_playback([(0.1, 2.0)])
    results = [RequestResult(0, "t", 200, True, ttfa_s=0.1, e2e_s=1.0, audio_s=2.0, **heard_fields(p))
               for p in (close, ample, dry, once)]  # fmt: skip
    run = aggregate(level(results), None)
    assert [r["least_in_hand_s"] for r in run["per_request"]] == [
        pytest.approx(0.06),
        pytest.approx(0.4),
        pytest.approx(-0.24),
        None,
    ]
    least = run["playback"]["least_in_hand_s"]
    assert least["min"] == pytest.approx(-0.24) and least["p50"] == pytest.approx(0.06)  # of the three with a margin
    assert -0.24 < least["p5"] < 0.06
    text = summary_markdown(meta(), [run])
    assert "| least in hand ms p50 | p5 |" in text
    assert f"| 60 | {least['p5'] * 1000:.0f} | 0 | " in text  # then the largest deficit: none for most


def test_the_most_common_places_streams_first_ran_dry_are_counted_to_10_ms() -> None:
    from loadtest.report import common_places

    # three streams dry after a 160 ms first window, two after 480 ms, one late
    positions = [0.1601, 0.16, 0.1598, 0.48, 0.4803, 3.2]
    assert common_places(positions) == [
        {"at_audio_s": 0.16, "streams": 3},
        {"at_audio_s": 0.48, "streams": 2},
        {"at_audio_s": 3.2, "streams": 1},
    ]
    assert common_places(positions, most=1) == [{"at_audio_s": 0.16, "streams": 3}]
    assert common_places([]) == []


def test_a_level_whose_rounds_give_each_worker_one_request_is_called_a_wave() -> None:
    from loadtest.runner import closed_loop_rounds, runs_as_waves

    # 64 requests in 2 rounds: c=8 and c=16 sustain (4 and 2 per worker per round); c=32 (2 rounds of 32) and c=64
    # (1 round of 64) give each worker one request per round
    assert [closed_loop_rounds(c, 64, 2) for c in (8, 16, 32, 64)] == [2, 2, 2, 1]
    assert [runs_as_waves(c, 64, 2) for c in (8, 16, 32, 64)] == [False, False, True, True]
    assert not runs_as_waves(32, 256, 2)
    runs = [aggregate(LevelRun(Target(0, "http://a", "m", "v"), "concurrency", c, [ok(0, 0.0)], 1.0, c), None)
            for c in (8, 16, 32, 64)]  # fmt: skip
    text = summary_markdown(meta() | {"requests": 64, "rounds": 2}, runs)
    assert "- concurrency 32, 64: fewer than two requests per worker and round" in text
    assert "concurrency 8" not in text and "concurrency 16" not in text
    assert "fewer than two requests per worker" not in summary_markdown(meta() | {"requests": 256, "rounds": 2}, runs)


def test_arrivals_a_few_milliseconds_apart_are_kept_as_one() -> None:
    from loadtest.measure import grouped_arrivals

    # one window read from the socket in three pieces, then the next window
    timeline = [(0.100, 0.05), (0.101, 0.10), (0.103, 0.16), (0.400, 0.48)]
    assert grouped_arrivals(timeline) == [(0.103, 0.16), (0.400, 0.48)]
    assert grouped_arrivals([]) == []


def test_time_to_uninterrupted_audio_is_the_headline_beside_ttfa() -> None:
    from loadtest.measure import heard_fields
    from loadtest.playback import simulate_playback

    # in time from 0.1 s; dry for 0.24 s after a 160 ms first window (uninterrupted at 0.34 s); dry for 0.5 s at 1 s
    # (0.6 s); a compressed response the player could not map (no figure, not counted either way)
    heard = [
        simulate_playback([(0.1, 1.0), (0.7, 2.0)]),
        simulate_playback([(0.1, 0.16), (0.5, 0.48), (0.7, 2.0)]),
        simulate_playback([(0.1, 1.0), (1.6, 2.0)]),
        None,
    ]
    results = [RequestResult(0, "t", 200, True, ttfa_s=0.1, e2e_s=1.0, audio_s=2.0, **heard_fields(p)) for p in heard]
    results.append(failed(429, "rate_limit_exceeded", "full"))  # a refused request counts in none of it
    run = aggregate(level(results), None)
    assert [r["uninterrupted_s"] for r in run["per_request"]] == [
        pytest.approx(0.1),
        pytest.approx(0.34),
        pytest.approx(0.6),
        None,
        None,
    ]
    assert [r["deficit_s"] for r in run["per_request"]][:3] == [0.0, pytest.approx(0.24), pytest.approx(0.5)]
    assert run["uninterrupted_s"]["p50"] == pytest.approx(0.34) and run["uninterrupted_s"]["mean"] == pytest.approx(
        (0.1 + 0.34 + 0.6) / 3
    )
    assert run["ran_dry_share"] == pytest.approx(2 / 3)
    assert run["playback"]["deficit_s"]["max"] == pytest.approx(0.5)
    for request in run["per_request"][:3]:
        assert request["uninterrupted_s"] >= request["ttfa_s"]
        assert request["uninterrupted_s"] == pytest.approx(request["ttfa_s"] + request["deficit_s"])  # pcm-like
    text = summary_markdown(meta(), [run])
    assert "| uninterrupted p50 ms | p95 | ran dry | TTFA mean ms |" in text
    p95 = run["uninterrupted_s"]["p95"] * 1000
    assert f"| A: http://a | 8 | 4 | 1 | 340 | {p95:.0f} | 67% | 100 |" in text  # 4 ok, 3 of them heard
    assert "| largest deficit ms p50 | p95 | max |" in text


def test_results_written_before_the_uninterrupted_figures_still_report_and_plot(tmp_path) -> None:
    from loadtest.report import ab_ratios, plot

    runs = [aggregate(level([ok(0, 0.0)]), None), aggregate(level([ok(0, 0.0)]), None)]
    runs[1]["target"] = 1
    for run in runs:  # as a results.json of an earlier version has them
        del run["uninterrupted_s"], run["ran_dry_share"], run["playback"]["deficit_s"]
    old = {**meta(), "targets": [*meta()["targets"], {"index": 1, "label": "B: http://b", "model": "m", "voice": "v"}]}
    text = summary_markdown(old, runs)
    assert "| A: http://a | 8 | 1 | 0 | – | – | – | 100 |" in text
    assert ab_ratios(runs)[0]["uninterrupted_p95"] is None and ab_ratios(runs)[0]["ttfa_p95"] == 1.0
    paths = plot(old, runs, tmp_path)
    assert paths["uninterrupted_plot"].read_bytes()[:4] == b"\x89PNG" and paths["ttfa_plot"].exists()


def test_throughput_is_the_steady_figure_where_the_window_allows_and_ratios_compare_like_with_like() -> None:
    from loadtest.report import ab_ratios

    # 16 answers of 2 s audio in 2.0 s of wall clock, 12 of them in a 1.0 s window with the level (8) held
    held = level([ok(0, 0.0) for _ in range(16)])
    held.held_s, held.finished_while_held, held.audio_s_while_held = 1.0, 12, 24.0
    steady = aggregate(held, None)
    assert (steady["throughput_rps"], steady["audio_throughput"], steady["throughput_basis"]) == (12.0, 24.0, "steady")
    assert (steady["throughput_wall_rps"], steady["audio_throughput_wall"]) == (8.0, 16.0)
    assert (steady["throughput_held_s"], steady["throughput_finished_while_held"]) == (1.0, 12)
    short = level([ok(0, 0.0) for _ in range(16)])
    short.held_s, short.finished_while_held = 0.5, 7  # fewer than the level (8): not one full turnover
    wall = aggregate(short, None)
    assert (wall["throughput_rps"], wall["audio_throughput"], wall["throughput_basis"]) == (8.0, 16.0, "wall")
    second = {**steady, "target": 1, "throughput_rps": 6.0, "throughput_wall_rps": 3.0}
    assert [(r["throughput"], r["throughput_basis"]) for r in ab_ratios([steady, second])] == [(0.5, "steady")]
    mixed = {**wall, "target": 1, "throughput_wall_rps": 2.0}
    assert [(r["throughput"], r["throughput_basis"]) for r in ab_ratios([steady, mixed])] == [(0.25, "wall")]
    two = {**meta(), "targets": [*meta()["targets"], {"index": 1, "label": "B: http://b", "model": "m", "voice": "v"}]}
    text = summary_markdown(two, [steady, mixed])
    assert "| 12.00 | 24.0 |" in text and "| 8.00* | 16.0* |" in text
    assert "| 0.25* |\n" in text  # the ratio of the wall-clock figures, 2.0 / 8.0
    assert "* = wall clock for both, where either window was too short" in text


def test_results_written_before_the_steady_window_read_as_wall_clock() -> None:
    run = aggregate(level([ok(0, 0.0)]), None)
    for name in ("throughput_basis", "throughput_wall_rps", "audio_throughput_wall"):
        del run[name]
    text = summary_markdown(meta(), [run])
    assert f"| {run['throughput_rps']:.2f}* |" in text


def test_an_open_loop_is_described_by_its_arrivals_not_a_warm_up_it_never_sends() -> None:
    run = aggregate(LevelRun(Target(0, "http://a", "m", "v"), "rate", 4.0, [ok(0, 0.0)], wall_s=5.0), None)
    text = summary_markdown({**meta(), "mode": "rate", "duration_s": 5.0, "warmup": 2, "requests": 32}, [run])
    assert "Poisson arrivals for 5 s per target and rate, no warm-up" in text
    assert "warm-up: 2" not in text and "requests per level" not in text


def test_an_error_raised_again_by_each_layer_is_described_once() -> None:
    """httpx re-raises httpcore's error, which re-raises h11's, each with the same name and words."""
    try:
        try:
            try:
                raise ConnectionResetError("peer closed connection")
            except ConnectionResetError as exc:
                raise OSError("peer closed connection") from exc
        except OSError as exc:
            raise OSError("peer closed connection") from exc
    except OSError as exc:
        assert (
            describe_exception(exc) == "OSError: peer closed connection <- ConnectionResetError: peer closed connection"
        )
