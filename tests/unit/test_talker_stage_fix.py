"""The talker's chunk-builder hook (`app.engines.omni_stage_fix`), against a stand-in for vllm-omni 0.26.0's builder:
"finished" as the step was enqueued, and the probe of when each request's first window left the talker."""

from __future__ import annotations

import logging

import pytest

from tests.fakes.vllm_omni_0_30 import (
    FakeTalkerRequest,
    FakeTransferManager,
    import_against_stand_ins,
    install_talker_chunk_builder,
)


@pytest.fixture
def stage_fix(monkeypatch: pytest.MonkeyPatch):
    return import_against_stand_ins(monkeypatch, "app.engines.omni_stage_fix", install_talker_chunk_builder)


def test_a_step_enqueued_before_the_end_is_not_taken_for_the_last(stage_fix) -> None:
    manager = FakeTransferManager({"windows_at": [2]})
    request = FakeTalkerRequest("r", arrival_time=0.0, finished=True)  # the live request finished meanwhile
    assert stage_fix.talker2code2wav_async_chunk_as_enqueued(manager, {}, request, is_finished=False) is None
    last = stage_fix.talker2code2wav_async_chunk_as_enqueued(manager, {}, request, is_finished=True)
    assert last == {"frames": 2, "finished": True}


def test_the_probe_times_each_requests_first_window_from_its_arrival(
    stage_fix, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wall = [100.0]
    monkeypatch.setattr(stage_fix.time, "time", lambda: wall[0])
    manager = FakeTransferManager({"windows_at": [2, 6], "engine_probe_interval_s": 3600})
    build = stage_fix.talker2code2wav_async_chunk_as_enqueued
    a = FakeTalkerRequest("a", arrival_time=99.9)
    b = FakeTalkerRequest("b", arrival_time=100.0)
    for step in range(6):  # a's windows leave at frames 2 and 6
        wall[0] = 100.0 + 0.02 * (step + 1)
        build(manager, {}, a, is_finished=False)
    wall[0] = 100.2
    build(manager, {}, b, is_finished=True)  # a one-frame request: its only window is its last
    probe = manager._speech_probe
    assert probe._first_window_s == [pytest.approx(0.14), pytest.approx(0.2)]  # a's second window is not a first
    assert probe._sent == {"a"}
    wall[0] = 100.3
    build(manager, {}, a, is_finished=True)
    assert probe._sent == set() and len(probe._first_window_s) == 2
    probe.interval_s = 0  # the next step reports
    with caplog.at_level(logging.INFO, logger="vllm.speech.talker"):
        build(manager, {}, FakeTalkerRequest("c", arrival_time=100.3), is_finished=False)
    assert "'first_window_p50_ms': 140.0" in caplog.text and "'first_window_p95_ms': 200.0" in caplog.text


def test_without_a_probe_interval_nothing_is_kept(stage_fix) -> None:
    manager = FakeTransferManager({"windows_at": [1]})
    stage_fix.talker2code2wav_async_chunk_as_enqueued(manager, {}, FakeTalkerRequest("a", 0.0), is_finished=False)
    assert manager._speech_probe is None
