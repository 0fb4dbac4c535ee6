"""TTFA milestones and phases: the record the route fills in, and when the first byte counts as written; the time to
uninterrupted audio from when each piece was written."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import AsyncGenerator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.audio_stream import audio_body, sse_events
from app.engine_protocol import AudioChunk
from app.speech.encoding import EncodedAudio, complete_file
from app.timing import PHASES, RAN_DRY_EPSILON_S, ListenerClock, TtfaTimeline


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


def marked_audio(
    first: AudioChunk,
    rest: AsyncGenerator[AudioChunk],
    response_format: str,
    calls: list[str],
    whole_file: bool = False,
) -> EncodedAudio:
    """The audio of `first` then `rest`, whose first audio, once marked, is told to `calls` ("first audio")."""
    return EncodedAudio(
        first,
        rest,
        response_format,
        24_000,
        noop_close,
        on_first_audio=lambda: calls.append("first audio"),
        whole_file=whole_file,
    )


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac"])
async def test_a_stream_whose_only_bytes_are_its_encoders_last_has_its_first_audio_marked(response_format: str) -> None:
    """A compressed stream too short for its encoder's first frame sends all its bytes at the encoder's end: its
    first audio is then, and it was never marked (no TTFA, no first byte)."""
    calls: list[str] = []
    audio = marked_audio(AudioChunk(tone(0.01), 24_000), no_more(), response_format, calls)
    pieces = [piece async for piece in audio.bytes()]
    assert pieces and calls == ["first audio"]


async def test_a_whole_files_first_audio_is_its_answer_not_its_first_chunk() -> None:
    """A whole file (`stream: false`, a batch item) sends nothing until all of it is encoded: its TTFA is taken when
    it is complete, in every format. Raw pcm's whole-file encoder hands out each chunk's bytes at once (they are the
    file's bytes either way), which had marked a pcm file's first audio at its first chunk (the other formats' hand
    out nothing before their end)."""

    async def later() -> AsyncGenerator[AudioChunk]:
        calls.append("second chunk")
        yield AudioChunk(tone(0.3), 24_000)

    calls: list[str] = []
    audio = marked_audio(AudioChunk(tone(0.3), 24_000), later(), "pcm", calls, whole_file=True)
    file = await complete_file(audio, False, "r")
    assert calls == ["second chunk", "first audio"]
    assert len(file.data) >= 0.6 * 24_000 * 2


def clock_of(writes: list[tuple[float, float]], origin: float = 100.0) -> ListenerClock:
    """A ListenerClock told of writes at (seconds since origin, seconds of audio the writes so far carry)."""
    clock = ListenerClock(origin)
    for at, audio_s in writes:
        clock.wrote(origin + at, audio_s)
    return clock


def test_a_stream_written_ahead_of_real_time_is_uninterrupted_from_its_first_audio() -> None:
    clock = clock_of([(0.2 + 0.25 * i, 0.25 * (i + 1)) for i in range(32)])  # exactly real time: never late
    assert (clock.first_s, clock.deficit_s, clock.ran_dry) == (pytest.approx(0.2), 0.0, False)
    assert clock.uninterrupted_s == clock.first_s
    assert ListenerClock(1.0).uninterrupted_s is None and ListenerClock(1.0).deficit_s is None  # nothing written


def test_the_time_to_uninterrupted_audio_is_the_first_write_plus_the_largest_deficit() -> None:
    # 0.5 s of audio at 0.1 s, the next second's at 1.1 s: a listener must start at 0.6 s; 0.2 s more at 1.3 s is early
    clock = clock_of([(0.1, 0.5), (1.1, 1.5), (1.3, 1.7)])
    assert clock.uninterrupted_s == pytest.approx(0.6) and clock.deficit_s == pytest.approx(0.5) and clock.ran_dry
    # the largest, not the last or the sum: 0.3 s late at 0.5 s, 0.6 s at 1.0 s, in time after
    assert clock_of([(0.0, 0.2), (0.5, 0.4), (1.0, 2.0), (1.5, 3.0)]).uninterrupted_s == pytest.approx(0.6)
    # a write that carries no more audio (a trailer) still has to come before the audio runs out
    assert clock_of([(0.1, 0.5), (0.9, 0.5)]).deficit_s == pytest.approx(0.3)
    # float noise is no deficit (the same tolerance as the load tool's listener)
    assert clock_of([(0.1, 0.5), (0.6 + RAN_DRY_EPSILON_S / 2, 1.0)]).ran_dry is False


schedules = st.lists(st.tuples(st.floats(0.0, 0.5), st.floats(0.001, 0.5)), min_size=1, max_size=30).map(
    lambda steps: list(itertools.accumulate(steps, lambda a, b: (a[0] + b[0], a[1] + b[1]), initial=(0.0, 0.0)))[1:]
)


@settings(max_examples=200, deadline=None)
@given(schedules)
def test_the_server_and_the_load_tool_time_a_stream_alike(writes: list[tuple[float, float]]) -> None:
    """The same schedule, as the server writes it and as the load tool's listener hears it (no network between):
    the same time to uninterrupted audio and deficit."""
    from loadtest.playback import simulate_playback

    heard = simulate_playback(writes)
    clock = clock_of(writes)
    assert heard is not None and clock.uninterrupted_s is not None
    assert clock.uninterrupted_s == pytest.approx(heard.uninterrupted_s, abs=1e-9)
    assert clock.deficit_s == pytest.approx(heard.deficit_s, abs=1e-9)
    assert clock.ran_dry == heard.ran_dry


@pytest.mark.parametrize("sse", [False, True])
async def test_the_listener_is_told_of_each_write_once_the_server_has_taken_it(sse: bool) -> None:
    """As the first byte: a piece counts as written when the server's send comes back for more, carrying the audio
    encoded up to it (an engine chunk of 0.6 s, then one of 0.4 s)."""

    async def second():
        yield AudioChunk(tone(0.4), 24_000)

    audio = EncodedAudio(AudioChunk(tone(0.6), 24_000), second(), "pcm", 24_000, noop_close)
    audio.listener = ListenerClock(time.perf_counter())
    body = sse_events(audio, "r") if sse else audio_body(audio)
    await anext(body)
    assert audio.listener.first_s is None  # produced, not yet taken by the server
    await anext(body)
    first_piece = 0.25 if sse else 0.6  # SSE events carry slices of ENCODE_SLICE_S; a plain pcm body whole chunks
    assert audio.listener.first_s is not None and audio.listener.audio_s == pytest.approx(first_piece)
    async for _ in body:
        pass
    assert audio.listener.audio_s == pytest.approx(1.0) and audio.listener.uninterrupted_s is not None
