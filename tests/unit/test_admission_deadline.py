"""A request's wait for a slot ends when its own deadline (`SPEECH_REQUEST_TIMEOUT_S`) would end it, where that comes
before the queue's own timeout (`SPEECH_QUEUE_TIMEOUT_S`): it is refused as the queue refuses a request whose time in
it is up (`queue_timeout`), never handed a slot to reach the engine with no time left and be stopped there. Over
POST /v1/audio/speech (the route on a fake vllm-omni engine) and over the WebSocket (a sentence of an utterance)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from app.admission import AdmissionGate
from app.lifecycle import Lifecycle
from app.server import create_app
from app.settings import Settings
from app.speech.options import SpeechOptions
from app.speech.run import SpeechService
from app.speech.utterances import StreamedSpeech
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_batch_admission import aborted, rejected, told_when_queued
from tests.unit.test_omni_engine import make_engine, service_settings
from tests.unit.test_speech_utterances import RecordingSink, ToneEngine

REQUEST_TIMEOUT_S = 0.2
QUEUE_TIMEOUT_S = 600.0  # far longer than the request's own time: the queue alone would keep it waiting
# the test waits this long after the request queued before freeing the slot: its deadline has passed by then
PAST_ITS_DEADLINE_S = 3 * REQUEST_TIMEOUT_S


async def test_a_request_whose_deadline_passes_while_it_is_queued_is_refused_as_the_queue_refuses_it(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another request holds the one slot past the queued request's deadline, then frees it. The queued request was
    handed the slot, reached the engine with no time left and was stopped there at once: a 504 counted as an abort
    (`speech_aborted_total{reason="timeout"}`), its synthesis begun for nothing. It is refused when its deadline
    passes instead: the queue's 429 with Retry-After, counted as `speech_rejected_total{reason="queue_timeout"}`."""
    caplog.set_level(logging.INFO)
    fake = FakeAsyncOmni()
    engine = make_engine(
        custom_voice_dir, fake, max_concurrency=1, queue_timeout_s=QUEUE_TIMEOUT_S, request_timeout_s=REQUEST_TIMEOUT_S
    )
    await engine.start()
    warmed = len(fake.requests)
    app = create_app(service_settings(engine), engine=engine)
    gate: AdmissionGate = app.state.gate
    held = await gate.acquire()  # another request's slot: this one queues behind it
    queues = told_when_queued(monkeypatch)
    before = (rejected("queue_timeout"), aborted("timeout"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        # a whole file: the answer waits for the last audio, so that a request handed the slot is answered once stopped
        body = {"model": "tts-1", "voice": "vivian", "input": "Hello there.", "response_format": "pcm", "stream": False}
        headers = {"X-Request-Id": "out-of-time"}
        posted = asyncio.ensure_future(client.post("/v1/audio/speech", json=body, headers=headers, timeout=60))
        await queues.wait()
        await asyncio.sleep(PAST_ITS_DEADLINE_S)
        gate.release(held)  # a slot, after its deadline
        response = await posted
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(response.headers["Retry-After"]) >= 1
    assert (rejected("queue_timeout") - before[0], aborted("timeout") - before[1]) == (1, 0)
    assert len(fake.requests) == warmed  # never sent to the engine
    assert gate.idle
    (line,) = [r for r in caplog.records if r.getMessage() == "speech request" and r.request_id == "out-of-time"]
    assert line.status == 429 and getattr(line, "abort_reason", None) is None  # type: ignore[attr-defined]


async def test_a_websocket_sentence_whose_deadline_passes_while_it_is_queued_is_refused_not_sent_to_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sentence is a request of its own, its deadline counted from its turn: queued past it, it was handed the slot
    once freed and stopped by the engine's deadline at once (`Stopped`, an abort counted as a timeout). It is told
    the queue's refusal (`Full`) when its deadline passes instead, and the engine never sees it."""
    engine = ToneEngine()
    settings = Settings(request_timeout_s=REQUEST_TIMEOUT_S, queue_timeout_s=QUEUE_TIMEOUT_S)
    gate = AdmissionGate(1, 4, QUEUE_TIMEOUT_S)
    catalog = VoiceCatalog(tuple(engine.voices()), {})
    service = SpeechService(engine, settings, catalog, VoiceStore(tmp_path), gate, Lifecycle(5.0, gate))  # type: ignore[arg-type]
    speech = StreamedSpeech(service, "ws-out-of-time")
    await speech.configure(SpeechOptions(voice="heart", response_format="pcm"), "sentence")
    held = await gate.acquire()  # another request's slot: the sentence queues behind it
    queues = told_when_queued(monkeypatch)
    sink = RecordingSink()
    before = (rejected("queue_timeout"), aborted("timeout"))
    speech.start(sink)
    speech.text("Hello there.")
    speech.done()
    await queues.wait()
    await asyncio.sleep(PAST_ITS_DEADLINE_S)
    gate.release(held)  # a slot, after its deadline
    await asyncio.wait_for(sink.done.wait(), 30)
    assert ("error", "Full") in sink.events, sink.events
    assert (rejected("queue_timeout") - before[0], aborted("timeout") - before[1]) == (1, 0)
    assert engine.steps == []  # never sent to the engine
    assert gate.idle
    await speech.close("stopped")
