"""SpeechRun.open: the engine started and its first audio awaited, and a request cancelled while it waits is stopped
(its slot given back, the engine told to abort) however the cancel meets the first audio."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from types import SimpleNamespace

import numpy as np
import pytest

from app.admission import AdmissionGate
from app.engine_protocol import AudioChunk, SynthesisJob
from app.lifecycle import Lifecycle
from app.speech.errors import Stopped
from app.speech.jobs import OutputSpec
from app.speech.run import SpeechRun
from app.timing import TtfaTimeline


class FirstAudioOnCue:
    """An engine whose first audio comes when the test says so."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.aborted: list[str] = []

    async def synthesize(self, job: SynthesisJob) -> AsyncGenerator[AudioChunk]:
        self.waiting.set()
        await self.first
        yield AudioChunk(samples=np.zeros(240, dtype=np.float32), sample_rate=24000)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


async def test_a_request_cancelled_in_the_step_its_first_audio_arrives_is_stopped_not_run_on() -> None:
    """The client leaves (the request's task is cancelled) in the very step the engine's first audio comes. Python
    3.11's `asyncio.wait_for`, which open waited in, then returned the audio and dropped the cancel: the request ran
    on for a client that had gone, its slot held and the engine synthesizing to the end."""
    engine = FirstAudioOnCue()
    gate = AdmissionGate(max_concurrency=1, max_queue=0, queue_timeout_s=1.0)
    settings = SimpleNamespace(request_timeout_s=30.0)
    service = SimpleNamespace(engine=engine, settings=settings, gate=gate, lifecycle=Lifecycle(1.0, gate))
    started = time.perf_counter()
    run = SpeechRun(service, started, TtfaTimeline(started), {}, "audio")  # type: ignore[arg-type]
    ticket = await gate.acquire()
    job = SynthesisJob(request_id="r1", text="Hello.", voice="vivian")
    opening = asyncio.create_task(run.open(job, OutputSpec("pcm", 24000), ticket))
    await engine.waiting.wait()
    engine.first.set_result(None)  # the first audio is there...
    opening.cancel()  # ...in the step the client leaves
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert engine.aborted == ["r1"]
    assert gate.idle


async def test_a_request_whose_deadline_passes_before_its_first_audio_says_how_it_ended() -> None:
    """The request's deadline passes while the engine has not yet given its first audio: it is stopped, counted in
    `speech_aborted_total{reason="timeout"}` and answered with a 504, and its log line says so as a client that left
    then has it say (`outcome`, `abort_reason`); it had only its `error`."""
    engine = FirstAudioOnCue()  # whose first audio never comes
    gate = AdmissionGate(max_concurrency=1, max_queue=0, queue_timeout_s=1.0)
    settings = SimpleNamespace(request_timeout_s=0.05)
    service = SimpleNamespace(engine=engine, settings=settings, gate=gate, lifecycle=Lifecycle(1.0, gate))
    started = time.perf_counter()
    summary: dict[str, object] = {}
    run = SpeechRun(service, started, TtfaTimeline(started), summary, "audio")  # type: ignore[arg-type]
    ticket = await gate.acquire()
    job = SynthesisJob(request_id="r1", text="Hello.", voice="vivian")
    with pytest.raises(Stopped) as stopped:
        await run.open(job, OutputSpec("pcm", 24000), ticket)
    assert stopped.value.reason == "timeout"
    assert (summary["outcome"], summary["abort_reason"], summary["completed"]) == ("timeout", "timeout", False)
    assert gate.idle
