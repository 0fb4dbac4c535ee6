"""The omni engine's request timeline (app/engines/omni/stage_plugins/timeline.py): every process records while a
run's flag names a folder, one JSON line an event, and nothing otherwise."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.engines.omni.stage_plugins import timeline
from tests.support.timeline import recorded_events


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(timeline.time, "monotonic", lambda: now[0])
    return now


def test_a_recorder_records_while_the_flag_names_a_folder_and_reads_the_flag_at_most_every_quarter_second(
    tmp_path: Path, clock: list[float]
) -> None:
    flag, run = tmp_path / "timeline-active", tmp_path / "runs/tl-c1"
    recorder = timeline.Recorder("code2wav", str(flag))
    recorder.record("window_ready", "r0")  # no run yet
    assert not recorder.on()
    timeline.start(str(flag), str(run))
    recorder.record("window_ready", "r1")  # the last look at the flag is still fresh
    clock[0] += timeline.CHECK_EVERY_S
    recorder.record("window_ready", "r2", window=0)
    recorder.record("window_scheduled", "r2", window=0)
    timeline.stop(str(flag))
    recorder.record("window_decoded", "r2", window=0)  # until its next look
    clock[0] += timeline.CHECK_EVERY_S
    recorder.record("window_ready", "r3")
    recorded = recorded_events(run)
    assert [(e["event"], e["request_id"]) for e in recorded] == [
        ("window_ready", "r2"),
        ("window_scheduled", "r2"),
        ("window_decoded", "r2"),
    ]
    assert recorded[0]["window"] == 0 and recorded[0]["ts_ns"] <= recorded[1]["ts_ns"] <= recorded[2]["ts_ns"]
    assert [p.name for p in run.iterdir()] == [f"events_code2wav_{os.getpid()}.jsonl"]
    timeline.stop(str(flag))  # stopping twice is no error


def test_a_new_run_records_to_its_own_folder(tmp_path: Path, clock: list[float]) -> None:
    flag = tmp_path / "timeline-active"
    recorder = timeline.Recorder("talker", str(flag))
    for run in ("a", "b"):
        timeline.start(str(flag), str(tmp_path / run))
        clock[0] += timeline.CHECK_EVERY_S
        recorder.record("window_sent", f"r-{run}", window=0)
    assert [e["request_id"] for e in recorded_events(tmp_path / "a")] == ["r-a"]
    assert [e["request_id"] for e in recorded_events(tmp_path / "b")] == ["r-b"]


def test_without_a_flag_path_nothing_is_ever_recorded_but_a_pinned_folder_records_at_once(tmp_path: Path) -> None:
    recorder = timeline.Recorder("server", None)
    recorder.record("submitted", "r1")
    assert not recorder.on() and not list(tmp_path.iterdir())
    recorder.pin(str(tmp_path / "run"))
    recorder.record("submitted", "r1")
    recorder.pin(None)
    recorder.record("first_audio", "r1")
    assert [e["event"] for e in recorded_events(tmp_path / "run")] == ["submitted"]


def test_the_processes_recorder_takes_its_flag_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    monkeypatch.setattr(timeline, "_recorders", {})
    monkeypatch.setenv(timeline.FLAG_VARIABLE, str(tmp_path / "flag"))
    assert timeline.recorder("code2wav") is timeline.recorder("code2wav")
    assert timeline.recorder("code2wav").flag == str(tmp_path / "flag")
    monkeypatch.delenv(timeline.FLAG_VARIABLE)
    monkeypatch.setattr(timeline, "_recorders", {})
    assert timeline.recorder("code2wav").flag is None


def test_threads_recording_at_once_write_whole_lines(tmp_path: Path) -> None:
    recorder = timeline.Recorder("code2wav", None)
    recorder.pin(str(tmp_path))
    threads = [
        threading.Thread(target=lambda n=n: [recorder.record("window_ready", f"r{n}-{i}") for i in range(200)])
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(recorded_events(tmp_path)) == 800


def test_a_flag_that_cannot_be_read_records_nothing(tmp_path: Path, clock: list[float]) -> None:
    flag = tmp_path / "flag"
    flag.write_text("{not json")
    recorder = timeline.Recorder("talker", str(flag))
    recorder.record("window_sent", "r1")
    assert not recorder.on() and [p.name for p in tmp_path.iterdir()] == ["flag"]


def test_a_run_that_stops_closes_its_file_and_a_run_of_the_same_name_later_records_anew(
    tmp_path: Path, clock: list[float]
) -> None:
    """A folder deleted after its run (a summary kept, the events gone) and a run of the same name again, the recorder
    not called in between: the events reach the new folder's file, not the deleted one's (each start marks its run)."""
    import shutil

    flag, run = tmp_path / ".flag", tmp_path / "tl-c1"
    recorder = timeline.Recorder("talker", str(flag))
    for attempt in ("first", "second"):
        timeline.start(str(flag), str(run))
        clock[0] += timeline.CHECK_EVERY_S
        recorder.record("window_sent", attempt)
        assert [e["request_id"] for e in recorded_events(run)] == [attempt]
        timeline.stop(str(flag))
        shutil.rmtree(run)  # no look at the flag in between: the recorder is called only while requests run
