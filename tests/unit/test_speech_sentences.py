"""The sentence pipeline: joins (silent edges trimmed to natural pauses, cut points faded: no clicks) and how it
drives its engine (one job per sentence, each with its own id)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from app.engine_protocol import AudioChunk, ReadsAhead, SpeechEngine, SynthesisJob
from app.engines.embedded import EmbeddedEngine
from app.settings import Settings
from app.speech.sentences import (
    FADE_S,
    LEAD_S,
    PAUSE_AFTER_CLAUSE_S,
    PAUSE_AFTER_SENTENCE_S,
    SentenceJoiner,
    SentencePipeline,
    pause_after,
)

RATE = 24_000


def utterance(lead_s: float, speech_s: float, trail_s: float, noise: float = 0.004) -> np.ndarray:
    """Speech padded with low noise, as an engine pads an utterance with near-silence."""
    rng = np.random.default_rng(0)
    t = np.arange(int(speech_s * RATE)) / RATE
    speech = (0.5 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    pad = lambda s: rng.uniform(-noise, noise, int(s * RATE)).astype(np.float32)  # noqa: E731
    return np.concatenate([pad(lead_s), speech, pad(trail_s)])


def join(audio: np.ndarray, pause_s: float, first: bool, chunk: int) -> np.ndarray:
    joiner = SentenceJoiner(RATE, pause_s, first)
    parts = [joiner.feed(audio[i : i + chunk]) for i in range(0, len(audio), chunk)]
    return np.concatenate([*parts, joiner.finish()])


@pytest.mark.parametrize("chunk", [480, 4800, 10**7])  # streamed in small pieces, or all at once
def test_later_sentences_keep_a_short_lead_and_the_pause(chunk: int) -> None:
    audio = utterance(0.3, 1.0, 0.4)
    out = join(audio, PAUSE_AFTER_SENTENCE_S, first=False, chunk=chunk)
    expected = LEAD_S + 1.0 + PAUSE_AFTER_SENTENCE_S
    assert abs(len(out) / RATE - expected) < 0.01
    assert abs(out[0]) < 1e-6 and abs(out[-1]) < 1e-6  # faded to zero at both cuts: no click
    fade = int(FADE_S * RATE)
    assert np.all(np.abs(out[:fade]) <= 0.004 + 1e-6)


def test_the_first_sentence_keeps_its_start_and_streams_silence_at_once() -> None:
    audio = utterance(0.3, 1.0, 0.4)
    joiner = SentenceJoiner(RATE, PAUSE_AFTER_CLAUSE_S, first=True)
    first = joiner.feed(audio[:4800])  # 0.2 s of leading silence: passed on at once, the stream starts
    assert len(first) == 4800
    rest = joiner.feed(audio[4800:])
    out = np.concatenate([first, rest, joiner.finish()])
    assert abs(len(out) / RATE - (0.3 + 1.0 + PAUSE_AFTER_CLAUSE_S)) < 0.01


def test_sound_inside_the_sentence_is_never_trimmed() -> None:
    inner_pause = utterance(0.0, 0.5, 0.6)  # a long pause inside the sentence, then more speech
    audio = np.concatenate([inner_pause, utterance(0.0, 0.5, 0.3)])
    out = join(audio, PAUSE_AFTER_SENTENCE_S, first=True, chunk=2400)
    assert abs(len(out) / RATE - (0.5 + 0.6 + 0.5 + PAUSE_AFTER_SENTENCE_S)) < 0.01


def test_an_all_silent_later_utterance_becomes_its_lead_and_pause() -> None:
    """Not the whole silence (a second of dead air), and not nothing: a sentence streamed on its own (the WebSocket)
    would otherwise be an empty file, which no decoder opens."""
    silent = utterance(0.5, 0.0, 0.0, noise=0.0005)
    out = join(silent, PAUSE_AFTER_SENTENCE_S, first=False, chunk=4800)
    assert len(out) == int(LEAD_S * RATE) + int(PAUSE_AFTER_SENTENCE_S * RATE)


def test_a_quiet_utterance_is_never_dropped() -> None:
    """A voice that never rises above the silence threshold (a quiet clone) is kept whole."""
    t = np.arange(RATE) / RATE
    quiet = (0.008 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    out = join(quiet, PAUSE_AFTER_SENTENCE_S, first=False, chunk=4800)
    assert np.array_equal(out, quiet)


@pytest.mark.parametrize(
    ("piece", "pause"),
    [
        ("A sentence.", PAUSE_AFTER_SENTENCE_S),
        ("Really?!", PAUSE_AFTER_SENTENCE_S),
        ('He said "stop."', PAUSE_AFTER_SENTENCE_S),
        ("a clause,", PAUSE_AFTER_CLAUSE_S),
        ("你好，", PAUSE_AFTER_CLAUSE_S),
        ("cut in the middle", 0.0),
    ],
)
def test_pause_after(piece: str, pause: float) -> None:
    assert pause_after(piece) == pause


class RecordingEngine:
    """Speaks every job as 0.2 s of tone, slowly enough that the next sentence is in flight alongside."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.seen: list[str] = []
        self.overlapped = False
        self.aborted: list[str] = []

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        assert job.request_id not in self.running, f"two jobs in flight under one id: {job.request_id}"
        self.running.add(job.request_id)
        self.seen.append(job.request_id)
        self.overlapped |= len(self.running) > 1
        try:
            for _ in range(4):
                await asyncio.sleep(0.01)
                yield AudioChunk(np.full(1200, 0.3, np.float32), 24_000)
        finally:
            self.running.discard(job.request_id)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


async def test_each_sentence_is_its_own_engine_job_and_abort_reaches_them() -> None:
    engine = RecordingEngine()
    pipeline = SentencePipeline(engine, 200)  # type: ignore[arg-type]
    job = SynthesisJob("job-1", "One sentence here. Another one there. And a third.", "v", trace_id="caller")
    chunks = [chunk async for chunk in pipeline.synthesize(job)]
    assert chunks and engine.overlapped  # the look-ahead ran a sentence while the previous one streamed
    assert engine.seen == ["job-1-s0", "job-1-s1", "job-1-s2"]
    single = [c async for c in pipeline.synthesize(SynthesisJob("job-2", "Just one.", "v"))]
    assert single and engine.seen[-1] == "job-2"  # one sentence keeps the job's own id

    stream = pipeline.synthesize(SynthesisJob("job-3", "First part here. Second part there.", "v"))
    await anext(stream)
    await pipeline.abort("job-3")
    assert engine.aborted == ["job-3-s0", "job-3-s1"]
    await stream.aclose()
    await pipeline.abort("job-3")  # finished: the job's own id, as for any engine
    assert engine.aborted[-1] == "job-3"


def test_engine_protocols_are_checkable_at_run_time() -> None:
    """The embedded engine, and the pipeline in front of it, are SpeechEngines; ReadsAhead tells apart the engines
    that can vet text before synthesis."""
    embedded = EmbeddedEngine(Settings(embedded_workers=1).embedded)
    assert isinstance(embedded, SpeechEngine) and isinstance(embedded, ReadsAhead)
    assert isinstance(SentencePipeline(embedded, 200), SpeechEngine)
    assert not isinstance(RecordingEngine(), SpeechEngine)  # no start, voices, health...
    assert not isinstance(RecordingEngine(), ReadsAhead)
