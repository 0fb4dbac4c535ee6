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
    third = window_gaps(RESULTS["runs"][0], 3)
    assert third["streams"] == 1 and third["gap_p50"] == pytest.approx(0.2)
    assert window_gaps(RESULTS["runs"][1], 2) == {"streams": 0, "held_p50": None, "gap_p50": None, "gap_p95": None}


def test_the_table_names_each_target_and_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gaps_markdown(RESULTS, 2).splitlines()[2:] == [
        "| A: http://a | 8 | 2 | 160 | 150 | 240 |",
        "| B: http://b | 8 | 0 | – | – | – |",
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS))
    main([str(path), "--nth", "3"])
    assert "| A: http://a | 8 | 1 | 160 | 200 | 200 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(path), "--nth", "1"])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.json")])
