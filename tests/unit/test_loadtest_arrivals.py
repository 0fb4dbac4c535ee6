"""`python3 -m loadtest.arrivals`: when a stream's later windows came, read back from a results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.arrivals import gaps_markdown, main, window_gaps


def run(target: int, concurrency: int, arrivals: list[list[list[float]] | None]) -> dict[str, Any]:
    return {"target": target, "concurrency": concurrency, "per_request": [{"audio_arrivals": a} for a in arrivals]}


RESULTS: dict[str, Any] = {
    "meta": {"targets": [{"label": "A: http://a"}, {"label": "B: http://b"}]},
    "runs": [
        # second windows 0.05 s and 0.25 s after 0.16 s of first audio; a third stream got all its audio at once
        run(0, 8, [[[0.1, 0.16], [0.15, 0.48], [0.3, 1.12]], [[0.2, 0.16], [0.45, 0.48]], [[0.3, 8.0]]]),
        run(1, 8, [None]),  # a format without a byte-to-time mapping: no arrivals
    ],
}


def test_the_gap_to_the_nth_arrival_counts_only_streams_that_had_one() -> None:
    second = window_gaps(RESULTS["runs"][0], 2)
    assert second["streams"] == 2 and second["held_p50"] == pytest.approx(0.16)
    assert second["gap_p50"] == pytest.approx(0.15) and second["gap_p95"] == pytest.approx(0.24)
    assert second["late"] == 1  # 0.25 s after 0.16 s of audio
    # what the listener still held when it came: 0.11 s for one stream, -0.09 s (a wait) for the other
    assert second["in_hand_p50"] == pytest.approx(0.01)
    third = window_gaps(RESULTS["runs"][0], 3)  # due when the 0.48 s held by the second arrival has played
    assert third == {"streams": 1, "held_p50": pytest.approx(0.48), "gap_p50": pytest.approx(0.2),
                     "gap_p95": pytest.approx(0.2), "late": 0, "in_hand_p50": pytest.approx(0.28)}  # fmt: skip
    assert window_gaps(RESULTS["runs"][1], 2) == {
        "streams": 0, "held_p50": None, "gap_p50": None, "gap_p95": None, "late": 0, "in_hand_p50": None
    }  # fmt: skip


def test_the_table_names_each_target_and_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gaps_markdown(RESULTS, 2).splitlines()[2:] == [
        "| A: http://a | 8 | 2 | 160 | 150 | 240 | 1 | 10 |",
        "| B: http://b | 8 | 0 | – | – | – | 0 | – |",
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS))
    main([str(path), "--nth", "3"])
    assert "| A: http://a | 8 | 1 | 480 | 200 | 200 | 0 | 280 |" in capsys.readouterr().out
    at_a_rate = {key: value for key, value in RESULTS["runs"][0].items() if key != "concurrency"} | {"rate": 2.5}
    assert "| A: http://a | 2.5 | 2 |" in gaps_markdown({**RESULTS, "runs": [at_a_rate]}, 2)


@pytest.mark.parametrize(
    "content",
    [
        None,  # no file
        "{not json",
        json.dumps({"runs": []}),  # no meta
        json.dumps({**RESULTS, "meta": {"targets": []}}),  # a run of a target meta does not name
        json.dumps({**RESULTS, "meta": {**RESULTS["meta"], "text_rate": 20.0}}),  # a WebSocket run
    ],
)
def test_what_is_not_a_results_file_it_can_read_is_a_usage_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main([str(path)])
    assert exc.value.code == 2


def test_nth_starts_at_the_second_arrival(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS))
    with pytest.raises(SystemExit) as exc:
        main([str(path), "--nth", "1"])
    assert exc.value.code == 2
