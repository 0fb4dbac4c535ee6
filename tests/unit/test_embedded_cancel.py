"""The embedded engine stops a sentence part-way when nobody wants it any more: its caller left (the request's task
was cancelled, or the stream closed), the request was aborted, or the engine was closed. The real engine runs, on the
CPU; its network session is watched, so that what ran after the stop is counted in the engine's own steps (network
runs, one per phoneme piece), not in seconds.

The watched session holds its next run at the door until the test has stopped the synthesis: the stop is then known
to have come while the sentence was in progress, on its first piece, with more pieces after it."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.engine_protocol import AudioChunk, EngineUnavailable, SynthesisJob
from app.engines.embedded import EmbeddedEngine, alignment
from app.engines.embedded.engine import chunk_phonemes
from app.settings import EmbeddedSettings, Settings
from app.speech.sentences import SentencePipeline

# one sentence of several phoneme pieces (at most MAX_PHONEMES each): a stop on the first leaves the others to skip
LONG = "The rain kept falling on the old stone bridge over the quiet river, " * 20
SHORT = "Nothing more."
HANG_GUARD_S = 120  # only against a hang (a worker never freed): nothing here asserts on time


@dataclass
class Run:
    phonemes: int  # the run's ids, pads included: tells one job's runs from another's
    outcome: str  # "completed", or "failed" (a run onnxruntime stopped by its terminate flag raises)


@dataclass
class WatchedSession:
    """hibari's network session, every run of it recorded; `hold_next` makes its next run wait for `release`."""

    session: Any
    runs: list[Run] = field(default_factory=list)
    hold_next: bool = False
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def run(self, output_names: Any, input_feed: dict[str, Any], run_options: Any = None) -> Any:
        if self.hold_next:
            self.hold_next = False
            self.held.set()
            self.release.wait(HANG_GUARD_S)
        run = Run(input_feed["ids"].shape[1], "completed")
        try:
            return self.session.run(output_names, input_feed, run_options)
        except Exception:
            run.outcome = "failed"
            raise
        finally:
            self.runs.append(run)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[WatchedSession]]:
    """Each worker's session, watched (the engines below load theirs once this is in place)."""
    watched: list[WatchedSession] = []
    load = alignment.load_session

    def load_watched(model: Any, threads: int) -> WatchedSession:
        watched.append(WatchedSession(load(model, threads)))
        return watched[-1]

    monkeypatch.setattr(alignment, "load_session", load_watched)
    yield watched
    for session in watched:
        session.release.set()  # a failed test leaves no worker waiting


async def started(workers: int) -> EmbeddedEngine:
    engine = EmbeddedEngine(EmbeddedSettings(workers=workers, threads_per_worker=1))
    await engine.start()
    return engine


async def audio_of(chunks: AsyncIterator[AudioChunk]) -> list[AudioChunk]:
    return [chunk async for chunk in chunks]


def job(request_id: str, text: str = LONG) -> SynthesisJob:
    return SynthesisJob(request_id=request_id, text=text, voice="heart", seed=7)


@functools.cache
def pieces_of(text: str) -> int:
    """How many phoneme pieces the engine synthesizes `text` in: one network run each."""
    from hibari import Hibari

    from app.engines.embedded.reader import text_reader

    model = Hibari(voice="heart", g2p=text_reader("heart"))
    phonemes, _ = alignment.phonemize(model.g2p, text)
    return len(chunk_phonemes(phonemes))


async def held(session: WatchedSession) -> None:
    """Until the session holds a run at its door."""
    assert await asyncio.to_thread(session.held.wait, HANG_GUARD_S), "the synthesis never reached its network"


async def test_a_synthesis_whose_caller_left_stops_at_its_next_step(sessions: list[WatchedSession]) -> None:
    engine = await started(workers=1)
    try:
        assert pieces_of(LONG) >= 3
        (session,) = sessions
        before = len(session.runs)  # the warm-up's
        session.hold_next = True
        listener = asyncio.create_task(audio_of(engine.synthesize(job("left"))))
        await held(session)
        listener.cancel()  # the client left while the first piece was about to run
        with pytest.raises(asyncio.CancelledError):
            await listener
        session.release.set()
        # the one worker serves the next request only once it is free of the sentence nobody hears
        async with asyncio.timeout(HANG_GUARD_S):
            after = await audio_of(engine.synthesize(job("next", SHORT)))
        assert after and sum(len(chunk.samples) for chunk in after) > 0
        runs = session.runs[before:]
        left, next_one = runs[:-1], runs[-1]
        # the piece in progress was stopped by its terminate flag, and no later piece of the sentence ran
        assert [run.outcome for run in left] == ["failed"]
        assert next_one.outcome == "completed" and next_one.phonemes < left[0].phonemes
    finally:
        await engine.close()


async def test_an_aborted_request_stops_its_sentence_and_ends_without_audio(sessions: list[WatchedSession]) -> None:
    engine = await started(workers=1)
    try:
        (session,) = sessions
        before = len(session.runs)
        session.hold_next = True
        listener = asyncio.create_task(audio_of(engine.synthesize(job("stopped"))))
        await held(session)
        await engine.abort("stopped")  # the server stops it (a drain, a deadline)
        session.release.set()
        async with asyncio.timeout(HANG_GUARD_S):
            assert await listener == []  # ended, no audio and no error: as an aborted request's always has
        assert [run.outcome for run in session.runs[before:]] == ["failed"]
    finally:
        await engine.close()


async def test_only_the_request_that_was_cancelled_stops(sessions: list[WatchedSession]) -> None:
    """Two requests in progress at once, on two workers: the one whose caller left stops; the other is spoken whole,
    sample for sample as it is when nothing else is cancelled."""
    engine = await started(workers=2)
    try:
        befores = [len(session.runs) for session in sessions]
        for session in sessions:
            session.hold_next = True
        kept = asyncio.create_task(audio_of(engine.synthesize(job("kept"))))
        left = asyncio.create_task(audio_of(engine.synthesize(job("left"))))
        for session in sessions:
            await held(session)
        left.cancel()
        with pytest.raises(asyncio.CancelledError):
            await left
        for session in sessions:
            session.release.set()
        async with asyncio.timeout(HANG_GUARD_S):
            spoken = await kept
            # two at once: each waits for a worker and its model, so both workers are free of what came before
            alone, _ = await asyncio.gather(
                audio_of(engine.synthesize(job("alone"))), audio_of(engine.synthesize(job("other", SHORT)))
            )
        assert len(spoken) == len(alone) == 1
        assert (spoken[0].samples == alone[0].samples).all()
        runs = [session.runs[before:] for session, before in zip(sessions, befores, strict=True)]
        # the one stopped was on its first piece (a worker holds one request for its whole sentence), and nothing
        # after it failed or ran: the kept request's pieces, the same again alone, and the short one's
        assert sum(run.outcome == "failed" for each in runs for run in each) == 1
        assert any(each and each[0].outcome == "failed" for each in runs)
        assert sum(run.outcome == "completed" for each in runs for run in each) == 2 * pieces_of(LONG) + 1
    finally:
        await engine.close()


async def test_the_sentence_read_ahead_stops_when_its_listener_leaves(sessions: list[WatchedSession]) -> None:
    """Through the sentence pipeline: the listener leaves while the first sentence plays and the second is synthesized
    ahead of it (the common case of a client that hangs up mid-stream): the second stops."""
    engine = await started(workers=1)
    try:
        (session,) = sessions
        before = len(session.runs)
        pipeline = SentencePipeline(engine, Settings().sentence_max_chars)
        text = "Here is the first sentence. The second one is read ahead while the first is playing."
        stream = pipeline.synthesize(job("hung-up", text))
        assert len((await anext(stream)).samples)
        # the second sentence's task is started, not yet run (nothing has awaited since): its network run is held
        session.hold_next = True
        await held(session)
        await stream.aclose()
        session.release.set()
        async with asyncio.timeout(HANG_GUARD_S):
            assert await audio_of(engine.synthesize(job("next", SHORT)))
        assert [run.outcome for run in session.runs[before:]] == ["completed", "failed", "completed"]
    finally:
        await engine.close()


async def test_close_stops_the_synthesis_in_progress_and_drops_the_queued_one(sessions: list[WatchedSession]) -> None:
    """A shutdown after the drain: one sentence in progress on the one worker, one waiting for it. The one in progress
    stops at its next step, the waiting one never runs, both streams say the engine went away, and close() returns
    with no worker thread left behind."""
    engine = await started(workers=1)
    (session,) = sessions
    before = len(session.runs)
    session.hold_next = True
    running = asyncio.create_task(audio_of(engine.synthesize(job("running"))))
    await held(session)
    waiting = asyncio.create_task(audio_of(engine.synthesize(job("waiting"))))
    reading = asyncio.create_task(engine.unreadable(["Waiting to be read."]))  # the read-ahead's check, queued too
    await asyncio.sleep(0)  # its stream has begun: it waits for the worker
    workers = set(engine._executor._threads)  # this engine's, not another test's
    closing = asyncio.create_task(engine.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # close() waits for the worker it has told to stop
    session.release.set()
    async with asyncio.timeout(HANG_GUARD_S):
        await closing
        with pytest.raises(EngineUnavailable):
            await running
        with pytest.raises(EngineUnavailable):
            await waiting
        with pytest.raises(EngineUnavailable):
            await reading
    # the piece held at the door was stopped by its terminate flag; no later piece and no other job ran
    assert pieces_of(LONG) >= 3
    assert [run.outcome for run in session.runs[before:]] == ["failed"]
    assert workers and not [thread for thread in workers if thread.is_alive()]
    with pytest.raises(EngineUnavailable):
        await audio_of(engine.synthesize(job("after", SHORT)))
