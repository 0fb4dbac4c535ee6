"""What the log says of each item of a batch stopped as a whole (a drain that ran out of time, the batch's deadline,
its client leaving), on the route over a fake vllm-omni engine: every item ends with one "speech request" line with
its `outcome`, the batch's reason; the item whose synthesis had begun is aborted for it (`abort_reason`, as
`speech_aborted_total` counts it), the item still queued was not."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.server import create_app
from app.speech import batch
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_batch_admission import ITEM, aborted, batch_left_by_its_client, kept_batch_stops
from tests.unit.test_omni_engine import make_engine, service_settings

BATCH_ID = "stopped-batch"
# the first item runs, the second waits for the batch's one slot behind it
SETTINGS: dict[str, object] = {"batch_concurrency": 1}
# the batch's reason: the status each item is answered and counted with, and the `error` code it is logged with
STOPPED = {"drain": (503, "server_shutting_down"), "timeout": (504, "timeout"), "client_gone": (499, None)}


def stall_the_batch(monkeypatch: pytest.MonkeyPatch, where: str) -> asyncio.Event:
    """The batch's first item stops on the engine `where` it is: waiting for its first audio, or encoding its file
    after its first audio (the warm-up is served). The event is set once it is there: its synthesis has begun."""
    generate, complete = FakeAsyncOmni.generate, batch.complete_file
    running = asyncio.Event()

    async def stalls(self: FakeAsyncOmni, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        mine = BATCH_ID in str(kwargs.get("request_id", ""))
        if mine and where == "first_audio":
            running.set()
            await asyncio.Event().wait()  # until the item is stopped
        async for output in generate(self, *args, **kwargs):
            yield output
            if mine:  # the rest of its audio never comes
                await asyncio.Event().wait()

    async def encoding(*args: Any, **kwargs: Any) -> Any:
        running.set()
        return await complete(*args, **kwargs)

    monkeypatch.setattr(FakeAsyncOmni, "generate", stalls)
    if where == "file":
        monkeypatch.setattr(batch, "complete_file", encoding)
    return running


async def stopped_by_the_server(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, reason: str, running: asyncio.Event
) -> int:
    """The batch stopped for `reason` ("drain", "timeout") once its first item runs, as a drain that runs out of time
    stops it (`BatchStop.stop`) and as its deadline does (the same `BatchEnd.stop`): the status it was answered with."""
    stops = kept_batch_stops(monkeypatch)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), **SETTINGS)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        body = {"voice": "vivian", "response_format": "pcm", "items": [ITEM, ITEM]}
        headers = {"X-Request-Id": BATCH_ID}
        posted = asyncio.ensure_future(client.post("/v1/audio/speech/batch", json=body, headers=headers, timeout=60))
        await running.wait()
        stops[0].stop(reason)
        response = await posted
    return response.status_code


async def left_by_its_client(custom_voice_dir: Path, running: asyncio.Event) -> int:
    """The batch's client leaves once its first item runs: the status it was counted with."""
    leave = asyncio.Event()

    async def leaves() -> None:
        await running.wait()
        leave.set()

    leaving = asyncio.create_task(leaves())
    sent = await batch_left_by_its_client(custom_voice_dir, 2, leave, BATCH_ID, **SETTINGS)
    await leaving
    (status,) = [m["status"] for m in sent if m["type"] == "http.response.start"]
    return int(str(status))


@pytest.mark.parametrize("where", ["first_audio", "file"])
@pytest.mark.parametrize("reason", ["drain", "timeout", "client_gone"])
async def test_every_item_of_a_stopped_batch_logs_its_outcome_and_the_batchs_reason(
    custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, reason: str, where: str
) -> None:
    """The items were logged as if none had begun: stopped by a drain or the deadline, with no `outcome`; their
    client gone, the running one with no `abort_reason` nor what it had said of itself (its voice, its characters),
    though `speech_aborted_total` counted it. An operator could not tell from the log what became of them."""
    caplog.set_level(logging.INFO)
    running = stall_the_batch(monkeypatch, where)
    before = aborted(reason)
    if reason == "client_gone":
        status = await left_by_its_client(custom_voice_dir, running)
    else:
        status = await stopped_by_the_server(custom_voice_dir, monkeypatch, reason, running)
    item_status, code = STOPPED[reason]
    assert status == item_status
    lines = [r for r in caplog.records if r.getMessage() == "speech request" and r.request_id.startswith(BATCH_ID)]
    assert sorted(r.request_id for r in lines) == [f"{BATCH_ID}-0", f"{BATCH_ID}-1"]  # one line each
    ran, queued = sorted(lines, key=lambda r: r.request_id)
    for line in (ran, queued):
        assert line.status == item_status and line.stream_format == "batch"
        assert getattr(line, "outcome", None) == reason
        assert getattr(line, "error", {}).get("code") == code
    assert ran.abort_reason == reason and ran.completed is False
    assert ran.batch_item == 0 and ran.chars == len(ITEM["input"])  # what it said of itself as it ran
    assert getattr(queued, "abort_reason", None) is None  # never begun: not aborted
    assert aborted(reason) - before == 1  # the running one alone
