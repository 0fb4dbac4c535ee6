"""What the log says of a request a drain turned away while it waited for a slot (POST /v1/audio/speech and a batch's
item, on the route over a fake vllm-omni engine): accepted before the drain, queued for the engine when the drain ran
out of time, it is answered 503 and ends with one "speech request" line whose `outcome` is `drain`, its
`abort_reason` null (no synthesis had begun: counted among the requests and the drain's refusals, not the aborts), as
docs/operations.md has it and as a batch's item still queued when the drain stopped its batch says."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from app.admission import AdmissionGate
from app.api.dependencies import service_of
from app.lifecycle import Lifecycle
from app.server import create_app
from app.speech.errors import ShuttingDown
from app.speech.run import SpeechService, gate_refusal
from app.timing import TtfaTimeline
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_batch_admission import ITEM, aborted, rejected, told_when_queued
from tests.unit.test_omni_engine import make_engine, service_settings

REQUEST_ID = "queued-at-the-drain"


def speech_requests(labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0


async def turned_away_by_the_drain(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, Any]
) -> httpx.Response:
    """`body` posted to `path` while another request holds the one slot, so that it queues for it; then a drain that
    runs out of time at once (`SPEECH_DRAIN_TIMEOUT_S` 0) turns the queue away. The answer."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), max_concurrency=1)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    gate: AdmissionGate = app.state.gate
    lifecycle: Lifecycle = app.state.lifecycle
    held = await gate.acquire()  # another request's slot: this one queues behind it
    queues = told_when_queued(monkeypatch)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        headers = {"X-Request-Id": REQUEST_ID}
        posted = asyncio.ensure_future(client.post(path, json=body, headers=headers, timeout=60))
        await queues.wait()
        assert gate.queued == 1
        lifecycle.drain_timeout_s = 0
        drained = asyncio.Event()
        lifecycle.begin_drain(drained.set)  # out of time at once: the queue is turned away
        response = await posted
    gate.release(held)
    await asyncio.wait_for(drained.wait(), 5)  # the drain ends once the slot held is given back
    return response


def logged(caplog: pytest.LogCaptureFixture, request_id: str) -> logging.LogRecord:
    (line,) = [r for r in caplog.records if r.getMessage() == "speech request" and r.request_id == request_id]
    return line


async def test_a_request_queued_when_the_drain_runs_out_logs_the_drain_as_its_outcome(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its line had its `error` and status alone: no `outcome`, where a batch's item queued at the same point says
    `drain`. An operator could not tell from the log a request the drain turned away from one refused at the door."""
    caplog.set_level(logging.INFO)
    labels = {"status": "503", "response_format": "pcm", "stream": "audio", "code": "server_shutting_down"}
    before = (rejected("draining"), aborted("drain"), speech_requests(labels))
    body = {"model": "tts-1", "voice": "vivian", "input": "Hello there.", "response_format": "pcm"}
    response = await turned_away_by_the_drain(custom_voice_dir, monkeypatch, "/v1/audio/speech", body)
    assert response.status_code == 503 and response.json()["error"]["code"] == "server_shutting_down"
    line = logged(caplog, REQUEST_ID)
    assert line.status == 503 and line.error["code"] == "server_shutting_down"  # type: ignore[attr-defined]
    assert getattr(line, "outcome", None) == "drain"
    assert getattr(line, "abort_reason", "missing") is None  # never begun: not aborted
    assert getattr(line, "completed", None) is False
    # counted once, as a request and as the drain's refusal; not as an abort
    after = (rejected("draining"), aborted("drain"), speech_requests(labels))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 0, 1]


async def test_a_batch_item_queued_for_the_engine_when_the_drain_runs_out_logs_the_drain_as_its_outcome(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The item waits for the server's slot (the admission gate), not for one of its batch's, when the drain runs out
    of time: it ends as the single request above does, the drain its `outcome`, not aborted."""
    caplog.set_level(logging.INFO)
    before = aborted("drain")
    body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM]}
    response = await turned_away_by_the_drain(custom_voice_dir, monkeypatch, "/v1/audio/speech/batch", body)
    assert response.status_code == 503, response.text
    line = logged(caplog, f"{REQUEST_ID}-0")
    assert line.status == 503 and line.stream_format == "batch"  # type: ignore[attr-defined]
    assert getattr(line, "outcome", None) == "drain"
    assert getattr(line, "abort_reason", "missing") is None
    assert aborted("drain") == before


async def test_batch_items_still_queued_when_the_drain_runs_out_are_each_the_drains_refusal(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first item fails on its own (a voice the server does not have), the second waits for the server's slot and
    the third for its batch's behind it when the drain runs out of time: each of the two is answered with the drain's
    503 and counted as its refusal (`speech_rejected_total{reason="draining"}`), as a request queued there is, not as
    an abort. `speech_rejected_total` counted neither."""
    labels = {"status": "503", "response_format": "pcm", "stream": "batch", "code": "server_shutting_down"}
    before = (rejected("draining"), aborted("drain"), speech_requests(labels))
    body = {"voice": "vivian", "response_format": "pcm", "items": [{**ITEM, "voice": "nobody"}, ITEM, ITEM]}
    response = await turned_away_by_the_drain(custom_voice_dir, monkeypatch, "/v1/audio/speech/batch", body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [result["status"] for result in results] == ["error", "error", "error"]
    assert results[0]["error"]["code"] != "server_shutting_down"
    assert [result["error"]["code"] for result in results[1:]] == ["server_shutting_down"] * 2
    after = (rejected("draining"), aborted("drain"), speech_requests(labels))
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 0, 2]


async def test_a_request_that_reaches_the_gate_after_the_drain_ended_is_the_drains_refusal(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Validated before the drain began, the request was still resolving its voice while the drain began and ended
    (nothing was queued or streaming for it to wait for); it then reached the admission gate. It is answered the
    drain's 503 and logged with the drain as its outcome, as one the drain turned away in the queue; it was not
    counted among the refusals (`speech_rejected_total{reason="draining"}`), where every other 503 of a drain is."""
    caplog.set_level(logging.INFO)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    lifecycle: Lifecycle = app.state.lifecycle
    lifecycle.drain_timeout_s = 0
    resolve_voice = SpeechService.resolve_voice

    async def drained_meanwhile(self: SpeechService, *args: Any, **kwargs: Any) -> Any:
        drained = asyncio.Event()
        lifecycle.begin_drain(drained.set)
        await drained.wait()  # the drain found nothing to wait for: it has ended
        return await resolve_voice(self, *args, **kwargs)

    monkeypatch.setattr(SpeechService, "resolve_voice", drained_meanwhile)
    labels = {"status": "503", "response_format": "pcm", "stream": "audio", "code": "server_shutting_down"}
    before = (rejected("draining"), aborted("drain"), speech_requests(labels))
    body = {"model": "tts-1", "voice": "vivian", "input": "Hello there.", "response_format": "pcm"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post("/v1/audio/speech", json=body, headers={"X-Request-Id": REQUEST_ID}, timeout=60)
    assert response.status_code == 503 and response.json()["error"]["code"] == "server_shutting_down"
    assert lifecycle.drained and app.state.gate.idle  # the slot it was handed is free again
    assert getattr(logged(caplog, REQUEST_ID), "outcome", None) == "drain"
    # counted once, as a request and as the drain's refusal; not as an abort
    after = (rejected("draining"), aborted("drain"), speech_requests(labels))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 0, 1]


async def test_a_batch_item_that_reaches_the_gate_after_the_drain_ended_is_left_to_its_batch_to_count(
    custom_voice_dir: Path,
) -> None:
    """A batch's item is admitted without counting its refusal (the batch counts its items once it knows whether it
    was refused whole): the drain's refusal after the drain ended says its reason as the gate's own refusals do, so
    that the batch counts it, and is not counted twice."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    service = service_of(app.state)
    drained = asyncio.Event()
    service.lifecycle.drain_timeout_s = 0
    service.lifecycle.begin_drain(drained.set)
    await drained.wait()
    before = rejected("draining")
    with pytest.raises(ShuttingDown) as refused:
        await service.admitted(TtfaTimeline(0.0), 5, deadline=None, count_refusal=False)
    assert gate_refusal(refused.value) == "draining"
    assert rejected("draining") == before and service.gate.idle
