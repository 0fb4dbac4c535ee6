"""TTFA milestones and phases: the record the route fills in, and when the first byte counts as written."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.api.audio_stream import EncodedAudio, sse_events
from app.engines.base import AudioChunk
from app.timing import PHASES, TtfaTimeline


def full_timeline() -> TtfaTimeline:
    timing = TtfaTimeline(received=10.0)
    timing.mark("queued", 10.002)
    timing.mark("admitted", 10.050)
    timing.mark("submitted", 10.060)
    timing.mark("first_chunk", 10.200)
    timing.mark("first_byte", 10.205)
    return timing


def test_phases_are_the_gaps_between_milestones_and_add_up_to_ttfa() -> None:
    timing = full_timeline()
    phases = timing.phases()
    assert list(phases) == list(PHASES)
    expected = {"validate": 0.002, "queue": 0.048, "prepare": 0.010, "engine": 0.140, "encode_write": 0.005}
    assert phases == pytest.approx(expected)
    assert timing.ttfa_s == pytest.approx(0.205)
    assert math.fsum(phases.values()) == pytest.approx(timing.ttfa_s)


def test_the_first_mark_wins() -> None:
    timing = full_timeline()
    timing.mark("submitted", 10.5)  # a later sentence of the same request handed to the engine
    timing.mark("first_byte", 11.0)
    assert timing.submitted == 10.060 and timing.first_byte == 10.205


def test_an_engine_that_does_not_mark_its_submit_counts_preparation_as_engine_time() -> None:
    timing = TtfaTimeline(received=0.0)
    timing.mark("queued", 0.001)
    timing.mark("admitted", 0.002)
    timing.mark("first_chunk", 0.1)
    timing.mark("first_byte", 0.101)
    phases = timing.phases()
    assert phases["prepare"] == 0.0 and phases["engine"] == pytest.approx(0.098)
    assert math.fsum(phases.values()) == pytest.approx(0.101)


def test_no_phases_before_the_first_byte_but_the_milestones_reached() -> None:
    timing = TtfaTimeline(received=5.0)
    timing.mark("queued", 5.001)
    timing.mark("admitted", 5.5)
    assert timing.phases() == {} and timing.ttfa_s is None
    assert timing.offsets() == {"queued": 0.001, "admitted": 0.5}
    assert full_timeline().offsets() == {
        "queued": 0.002,
        "admitted": 0.05,
        "submitted": 0.06,
        "first_chunk": 0.2,
        "first_byte": 0.205,
    }


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 24_000)) / 24_000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


async def no_more():
    return
    yield


async def noop_close(outcome: str) -> None:
    return None


@pytest.mark.parametrize("sse", [False, True])
async def test_the_first_byte_counts_once_the_server_has_taken_it(sse: bool) -> None:
    """The first-audio hook runs when the consumer (the server's send) comes back for more, not when the bytes are
    merely produced: a send that takes a while is part of encode_write."""
    calls: list[str] = []
    audio = EncodedAudio(
        AudioChunk(tone(0.6), 24_000), no_more(), "pcm", 24_000, noop_close, on_first_audio=lambda: calls.append("hook")
    )
    body = sse_events(audio, "r") if sse else audio.bytes()
    await anext(body)
    calls.append("sent")  # the server writes the first piece here
    assert calls == ["sent"]
    rest = [piece async for piece in body]  # a plain pcm body took the one chunk whole: nothing more comes
    assert calls == ["sent", "hook"]  # once
    assert rest if sse else not rest
