"""POST /v1/audio/speech/batch when the server is full (the route on a fake vllm-omni engine, admission refused as
the gate refuses it): a batch that did no work is refused whole as a request would be (429 with Retry-After), and a
batch some of whose items were refused tells the client when to send them again."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import REGISTRY

from app.admission import AdmissionGate, Rejected
from app.lifecycle import Lifecycle
from app.server import create_app
from app.speech import batch
from app.speech.errors import Full, ShuttingDown
from app.speech.options import SpeechOptions
from app.speech.run import SpeechService
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_omni_engine import make_engine, service_settings

ITEM = {"input": "Hello there.", "max_new_tokens": 11}


async def answer(custom_voice_dir: Path, items: int, **settings: object) -> httpx.Response:
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), **settings)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM] * items}
        return await client.post("/v1/audio/speech/batch", json=body, timeout=60)


async def test_a_batch_none_of_whose_items_was_admitted_is_a_429_with_the_longest_retry_after(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = iter([3, 7, 2])

    async def full(self: SpeechService, *args: object, **kwargs: object) -> object:
        raise Full("queue_full", next(waits))

    monkeypatch.setattr(SpeechService, "admitted", full)
    labels = {"status": "429", "response_format": "pcm", "stream": "batch", "code": "rate_limit_exceeded"}
    before = REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0
    response = await answer(custom_voice_dir, 3)
    assert response.status_code == 429, response.text
    assert response.headers["Retry-After"] == "7"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    # counted as the one request it was answered as, not once per item
    assert (REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0) - before == 1


async def test_a_batch_a_drain_turned_away_whole_is_a_503_as_a_request_would_be(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accepted before the drain, its items queued until the drain ran out of time (one met a full queue first):
    nothing was admitted, so the answer is the drain's retryable 503, not a 200 that only lists failures."""
    refusals = iter([Full("queue_full", 6), ShuttingDown(), ShuttingDown()])

    async def turned_away(self: SpeechService, *args: object, **kwargs: object) -> object:
        raise next(refusals)

    monkeypatch.setattr(SpeechService, "admitted", turned_away)
    before = rejected("draining")
    response = await answer(custom_voice_dir, 3)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "server_shutting_down"
    assert response.headers["Retry-After"] == "1" and response.headers["Connection"] == "close"
    assert rejected("draining") - before == 1  # one request, refused once


async def test_a_batch_with_items_refused_beside_items_served_says_when_to_send_them_again(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted = SpeechService.admitted
    calls = 0

    async def second_refused(self: SpeechService, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Full("queue_full", 4)
        return await admitted(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SpeechService, "admitted", second_refused)
    response = await answer(custom_voice_dir, 3)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [result["status"] for result in results] == ["success", "error", "success"]
    assert results[1]["error"]["code"] == "rate_limit_exceeded"
    assert response.headers["Retry-After"] == "4"


async def test_a_batch_served_whole_carries_no_retry_after(custom_voice_dir: Path) -> None:
    response = await answer(custom_voice_dir, 2)
    assert response.status_code == 200 and response.json()["succeeded"] == 2, response.text
    assert "Retry-After" not in response.headers


def rejected(reason: str) -> float:
    return REGISTRY.get_sample_value("speech_rejected_total", {"reason": reason}) or 0.0


async def test_a_batch_refused_whole_is_one_rejection_as_it_is_one_request(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sustained-rejections alert reads `speech_rejected_total`: a batch of 3 refused as one 429 weighs as one
    refused request there, as it does in `speech_requests_total`, not as three."""

    async def full(self: AdmissionGate, deadline: float | None = None) -> object:
        raise Rejected("queue_full", 5)

    monkeypatch.setattr(AdmissionGate, "acquire", full)
    before = rejected("queue_full")
    response = await answer(custom_voice_dir, 3)
    assert response.status_code == 429, response.text
    assert rejected("queue_full") - before == 1


async def test_items_refused_beside_items_served_are_each_a_rejection_as_each_is_a_request(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acquire = AdmissionGate.acquire
    calls = 0

    async def second_and_third_refused(self: AdmissionGate, deadline: float | None = None) -> object:
        nonlocal calls
        calls += 1
        if calls in (2, 3):
            raise Rejected("queue_timeout", 2)
        return await acquire(self, deadline)

    monkeypatch.setattr(AdmissionGate, "acquire", second_and_third_refused)
    before = rejected("queue_timeout")
    response = await answer(custom_voice_dir, 3)
    assert response.status_code == 200, response.text
    assert [result["status"] for result in response.json()["results"]] == ["success", "error", "error"]
    assert rejected("queue_timeout") - before == 2


async def test_items_the_gate_refused_are_counted_even_when_the_client_leaves_before_the_batch_ends(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first item is refused at once, the others wait for a slot until the client leaves: the answer is a 499,
    and the refusal it had met still counts (the sustained-rejections alert reads it). Each item is logged as a
    request whose client left (`outcome: client_gone`, as a streamed one is), not as an invalid request."""
    caplog.set_level(logging.INFO)
    calls = 0
    waiting = asyncio.Event()  # the refusal has happened and another item waits for a slot

    async def first_refused_then_waits(self: AdmissionGate, deadline: float | None = None) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Rejected("queue_full", 3)
        waiting.set()
        await asyncio.sleep(60)  # no slot comes before the client leaves
        raise AssertionError("not reached")

    monkeypatch.setattr(AdmissionGate, "acquire", first_refused_then_waits)
    before = rejected("queue_full")
    sent = await batch_left_by_its_client(custom_voice_dir, 3, waiting)
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [499]
    assert rejected("queue_full") - before == 1
    logged = {r.request_id: r for r in caplog.records if r.getMessage() == "speech request" and r.status == 499}
    assert len(logged) == 3, logged
    for record in logged.values():
        assert getattr(record, "outcome", None) == "client_gone"
        assert not hasattr(record, "error")


async def test_two_batches_sent_with_one_request_id_are_each_work_the_drain_waits_for_and_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller may send one X-Request-Id twice (a retry while the first still runs). The drain must know both
    batches: the first to end had untracked the other's entry too, so a drain that ran out of time stopped only one
    of them, and the other began new items after it."""
    release: dict[int, asyncio.Event] = {0: asyncio.Event(), 1: asyncio.Event()}
    started = asyncio.Event()

    async def waits(service: object, item: batch.BatchItem, *args: object) -> batch.ItemOutcome:
        started.set()
        await release[item.index].wait()
        return batch.ItemOutcome(item.index, "pcm", {})

    monkeypatch.setattr(batch, "speak_whole", waits)
    lifecycle = Lifecycle(drain_timeout_s=1.0)
    service = SimpleNamespace(lifecycle=lifecycle, settings=None)
    options = SpeechOptions(voice="vivian")

    async def one_batch(index: int) -> None:
        items = [batch.BatchItem(index, options, "Hi.")]
        await batch.synthesize_batch(service, items, "same-id", batch.BatchSlots(4), [], {})  # type: ignore[arg-type]

    first = asyncio.create_task(one_batch(0))
    second = asyncio.create_task(one_batch(1))
    await started.wait()
    await asyncio.sleep(0)
    release[0].set()
    await first
    assert not lifecycle.idle  # the second batch is still work in progress
    release[1].set()
    await second
    assert lifecycle.idle


async def batch_left_by_its_client(
    custom_voice_dir: Path, items: int, leave: asyncio.Event, request_id: str | None = None, **settings: object
) -> list[dict[str, object]]:
    """A batch of `items` sent through the app's ASGI interface by a client that leaves once `leave` is set (with
    `request_id` as its X-Request-Id, on an engine with `settings`): what the app sent it."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), **settings)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    body = json.dumps({"voice": "vivian", "response_format": "pcm", "items": [ITEM] * items}).encode()
    sent: list[dict[str, object]] = []
    delivered = False

    async def receive() -> dict[str, object]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/audio/speech/batch",
        "raw_path": b"/v1/audio/speech/batch",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *([(b"x-request-id", request_id.encode())] if request_id else []),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    async with asyncio.timeout(30):
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)
    return sent


async def test_a_batch_whose_client_left_observes_no_ttfa_for_the_items_that_ended(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An item's audio reaches its client only in the batch's answer: a batch nobody was left to answer sent no audio,
    so its items that had ended are no TTFA (`speech_ttfa_seconds` counts every request that sent audio). An answered
    batch observes one for each item."""
    acquire, complete = AdmissionGate.acquire, batch.complete_file
    calls = 0
    first_ended, second_waits, leave = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first_served_then_waits(self: AdmissionGate, deadline: float | None = None) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await acquire(self, deadline)
        second_waits.set()
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    async def completed(*args: object, **kwargs: object) -> object:
        file = await complete(*args, **kwargs)  # type: ignore[arg-type]
        first_ended.set()
        return file

    async def leaves_once_the_first_ended() -> None:
        await first_ended.wait()
        await second_waits.wait()
        leave.set()

    labels = {"response_format": "pcm", "stream": "batch"}
    before = REGISTRY.get_sample_value("speech_ttfa_seconds_count", labels) or 0.0
    monkeypatch.setattr(AdmissionGate, "acquire", first_served_then_waits)
    monkeypatch.setattr(batch, "complete_file", completed)
    leaving = asyncio.create_task(leaves_once_the_first_ended())
    sent = await batch_left_by_its_client(custom_voice_dir, 2, leave)
    await leaving
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [499]
    assert (REGISTRY.get_sample_value("speech_ttfa_seconds_count", labels) or 0.0) == before
    monkeypatch.setattr(AdmissionGate, "acquire", acquire)
    assert (await answer(custom_voice_dir, 2)).status_code == 200
    assert (REGISTRY.get_sample_value("speech_ttfa_seconds_count", labels) or 0.0) == before + 2


async def test_a_batch_that_outlasts_the_request_timeout_ends_its_items_with_the_timeout_as_a_request_would(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is one request: `request_timeout_s` bounds it whole (each item's own synthesis was bounded, but not
    the batch's waits for slots, nor its items one after another). Here no item is ever admitted: at the timeout the
    batch ends, and with nothing to answer with, it is the 504 a request that took too long gets."""

    async def never(self: SpeechService, *args: object, **kwargs: object) -> object:
        await asyncio.sleep(3600)
        raise AssertionError("admitted")

    monkeypatch.setattr(SpeechService, "admitted", never)
    response = await answer(custom_voice_dir, 3, request_timeout_s=0.2)
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "timeout"


async def test_the_capabilities_tell_the_share_of_the_slots_and_the_deadline_a_batch_is_held_to(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /v1/audio/capabilities tells a batch's share of the slots as the server works it out (here its default, a
    quarter of the concurrency) and its deadline; a batch none of whose items is admitted ends at that deadline."""

    async def never(self: SpeechService, *args: object, **kwargs: object) -> object:
        await asyncio.sleep(3600)
        raise AssertionError("admitted")

    monkeypatch.setattr(SpeechService, "admitted", never)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), max_concurrency=8, request_timeout_s=0.3)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        limits = (await client.get("/v1/audio/capabilities")).json()["batch"]
        assert (limits["concurrency"], limits["timeout_s"]) == (2, 0.3)
        assert limits["concurrency"] == app.state.batch_slots.size  # the slots the batches take
        started = time.monotonic()
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM] * 3}
        response = await client.post("/v1/audio/speech/batch", json=body, timeout=60)
        waited = time.monotonic() - started
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout", response.text
    assert limits["timeout_s"] <= waited < limits["timeout_s"] + 30  # its deadline, not the client's 60 s


async def test_a_batch_that_outlasts_the_request_timeout_answers_the_items_it_finished(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The items that ended are answered; those still waiting or running fail with the timeout, each in its place."""
    admitted = SpeechService.admitted
    calls = 0

    async def first_only(self: SpeechService, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await admitted(self, *args, **kwargs)  # type: ignore[arg-type]
        await asyncio.sleep(3600)
        raise AssertionError("admitted")

    monkeypatch.setattr(SpeechService, "admitted", first_only)
    # the first item, on the fake engine, ends within milliseconds of the batch's start: seconds to spare
    response = await answer(custom_voice_dir, 3, request_timeout_s=5.0)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [result["status"] for result in results] == ["success", "error", "error"]
    assert {result["error"]["code"] for result in results[1:]} == {"timeout"}


async def test_an_item_running_when_the_batch_times_out_is_aborted_as_a_timeout_not_as_a_client_gone(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's deadline stops the item it is running as the request timeout stops a request: counted under
    `speech_aborted_total{reason="timeout"}`, not as a client that left. The item is admitted 0.3 s after the batch
    began (its own deadline 0.3 s after the batch's), and the engine never answers it."""
    admitted = SpeechService.admitted

    async def late(self: SpeechService, *args: object, **kwargs: object) -> object:
        await asyncio.sleep(0.3)
        return await admitted(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SpeechService, "admitted", late)
    fake = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, fake, request_timeout_s=3.0)  # seconds for the item to reach the engine
    await engine.start()
    fake.step_delay_s = 3600.0  # after its warm-up
    app = create_app(service_settings(engine), engine=engine)
    before = {reason: aborted(reason) for reason in ("timeout", "client_gone")}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM]}
        response = await client.post("/v1/audio/speech/batch", json=body, timeout=60)
    assert response.status_code == 504, response.text
    assert aborted("timeout") - before["timeout"] == 1
    assert aborted("client_gone") == before["client_gone"]


def aborted(reason: str) -> float:
    return REGISTRY.get_sample_value("speech_aborted_total", {"reason": reason}) or 0.0


async def test_a_batch_is_stopped_once_whoever_asks_after_the_first() -> None:
    """A second cancel would cut short the items' clean-up (the engine told to abort): the deadline that fires while
    a drain's stop unwinds the batch, or a drain after the deadline, asks nothing more, and the first reason stands."""
    entered = asyncio.Event()

    async def batch_running() -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # the clean-up, during which a second stop arrives

    task = asyncio.create_task(batch_running())
    await entered.wait()
    ended = batch.BatchEnd()
    ended.stop(task, "drain")
    ended.stop(task, "timeout")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended.reason == "drain" and task.cancelling() == 1


def told_when_queued(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set as a request reaches the admission gate: the test resumes once it has run up to its wait in the
    queue."""
    acquire, queues = AdmissionGate.acquire, asyncio.Event()

    async def told(self: AdmissionGate, deadline: float | None = None) -> object:
        queues.set()
        return await acquire(self, deadline)

    monkeypatch.setattr(AdmissionGate, "acquire", told)
    return queues


def kept_batch_stops(monkeypatch: pytest.MonkeyPatch) -> list[batch.BatchStop]:
    """Every batch's stop, as it is made (the one a drain calls): a test stops a batch as a drain does."""
    stops: list[batch.BatchStop] = []

    class Kept(batch.BatchStop):
        def __init__(self, task: asyncio.Task[None], ended: batch.BatchEnd) -> None:
            super().__init__(task, ended)
            stops.append(self)

    monkeypatch.setattr(batch, "BatchStop", Kept)
    return stops


async def test_an_item_handed_its_slot_in_the_instant_a_drain_stops_the_batch_ends_with_the_drain(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one slot is handed to the batch's queued item in the very step the drain stops the batch. Python 3.11's
    `asyncio.wait_for` then returns the slot and drops the cancel: the item ran on, past the stop, until its own
    deadline, and was answered and counted as a 504 timeout (`speech_aborted_total{reason="timeout"}`). It never
    started before the stop: it ends with the batch's reason, the drain's 503, and no synthesis is begun for it."""
    stops = kept_batch_stops(monkeypatch)
    fake = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, fake, max_concurrency=1, request_timeout_s=1.0)
    await engine.start()
    fake.step_delay_s = 3600.0  # after its warm-up: an item that reaches the engine runs until its deadline
    app = create_app(service_settings(engine), engine=engine)
    gate: AdmissionGate = app.state.gate
    held = await gate.acquire()  # another request's slot: the item queues behind it
    queues = told_when_queued(monkeypatch)
    before = {reason: aborted(reason) for reason in ("timeout", "drain")}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM]}
        posted = asyncio.ensure_future(client.post("/v1/audio/speech/batch", json=body, timeout=60))
        await queues.wait()
        assert gate.queued == 1
        gate.release(held)  # the slot goes to the queued item...
        stops[0].stop("drain")  # ...in the step the drain stops its batch
        response = await posted
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "server_shutting_down"
    assert aborted("timeout") == before["timeout"]
    assert gate.idle  # the slot it was handed is free again


async def test_only_an_item_waiting_for_the_servers_slot_when_the_batch_times_out_is_a_queue_timeout(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another request holds the one slot past the batch's deadline: the first item waits for it at the admission
    gate, the second for its batch's slot behind it. Both end with the deadline's 504, never begun (no abort). The
    first is a refusal for want of a slot in time, as a request that waits for one past its own bound is refused
    `queue_timeout`. The second waited on its own batch alone: it was counted `queue_timeout` too, so that one
    batch too large for its time on an idle server looked like a server turning work away (the sustained-rejections
    alert reads `queue_timeout`). It is counted as the batch's own timeout, `batch_timeout`."""
    caplog.set_level(logging.INFO)
    stops = kept_batch_stops(monkeypatch)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), max_concurrency=1, queue_timeout_s=60.0)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    gate: AdmissionGate = app.state.gate
    held = await gate.acquire()  # another request's slot, held until the batch has been answered
    queues = told_when_queued(monkeypatch)
    reasons = ("queue_timeout", "batch_timeout", "queue_full", "draining")
    labels = {"status": "504", "response_format": "pcm", "stream": "batch", "code": "timeout"}
    before = ({reason: rejected(reason) for reason in reasons}, aborted("timeout"), speech_requests(labels))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM, ITEM]}
        posted = asyncio.ensure_future(
            client.post("/v1/audio/speech/batch", json=body, headers={"X-Request-Id": "late"})
        )
        await queues.wait()
        assert gate.queued == 1
        stops[0].ended.stop(stops[0].task, "timeout")  # what the batch's deadline does when it passes
        response = await posted
    gate.release(held)
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout", response.text
    lines = [r for r in caplog.records if r.getMessage() == "speech request" and r.request_id.startswith("late-")]
    assert [(r.outcome, r.abort_reason) for r in lines] == [("timeout", None)] * 2  # type: ignore[attr-defined]
    counted = {reason: rejected(reason) - before[0][reason] for reason in reasons}
    assert counted == {"queue_timeout": 1, "batch_timeout": 1, "queue_full": 0, "draining": 0}
    assert aborted("timeout") == before[1]
    assert speech_requests(labels) - before[2] == 2  # each a request, answered the deadline's 504


async def test_an_item_still_resolving_its_voice_when_the_batch_times_out_is_the_batchs_timeout_not_the_queues(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item is still fetching its reference audio (its voice resolved before it reaches the admission gate) when
    the batch's deadline passes, on a server with every slot free: it fails with the deadline's 504 as before, and is
    counted `batch_timeout`, not as a refusal for want of a slot (`queue_timeout`), which it never waited for."""
    stops = kept_batch_stops(monkeypatch)
    fetching = asyncio.Event()

    async def slow_reference(self: SpeechService, *args: object, **kwargs: object) -> object:
        fetching.set()
        await asyncio.sleep(3600)  # the reference audio's server never answers before the deadline
        raise AssertionError("fetched")

    monkeypatch.setattr(SpeechService, "resolve_voice", slow_reference)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    reasons = ("queue_timeout", "batch_timeout")
    before = ({reason: rejected(reason) for reason in reasons}, aborted("timeout"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM]}
        posted = asyncio.ensure_future(client.post("/v1/audio/speech/batch", json=body, timeout=60))
        await fetching.wait()
        stops[0].ended.stop(stops[0].task, "timeout")  # what the batch's deadline does when it passes
        response = await posted
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout", response.text
    counted = {reason: rejected(reason) - before[0][reason] for reason in reasons}
    assert counted == {"queue_timeout": 0, "batch_timeout": 1}
    assert aborted("timeout") == before[1]
    assert app.state.gate.idle


async def test_a_batch_too_large_for_its_time_on_an_idle_server_counts_no_refusal_for_capacity(
    custom_voice_dir: Path,
) -> None:
    """The batch's deadline (`request_timeout_s`) passes while its first item is synthesized and the second waits for
    the batch's one slot, every slot of the server's but one free: the server turned nothing away, so nothing is
    counted where the sustained-rejections alert reads (`queue_full`, `queue_timeout`). The first item is aborted for
    the timeout, the second is the batch's own timeout."""
    fake = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, fake, max_concurrency=4, batch_concurrency=1, request_timeout_s=0.5)
    await engine.start()
    fake.step_delay_s = 3600.0  # after its warm-up: the first item runs until the batch's deadline
    app = create_app(service_settings(engine), engine=engine)
    reasons = ("queue_timeout", "queue_full", "batch_timeout")
    before = ({reason: rejected(reason) for reason in reasons}, aborted("timeout"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM, ITEM]}
        response = await client.post("/v1/audio/speech/batch", json=body, timeout=60)
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout", response.text
    counted = {reason: rejected(reason) - before[0][reason] for reason in reasons}
    assert counted == {"queue_timeout": 0, "queue_full": 0, "batch_timeout": 1}
    assert aborted("timeout") - before[1] == 1
    assert app.state.gate.idle


def speech_requests(labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value("speech_requests_total", labels) or 0.0
