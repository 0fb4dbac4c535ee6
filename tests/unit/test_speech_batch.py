"""A batch's shared work, apart from the server: each reference audio decoded once for all the items cloning from
it, and the share of slots all batches hold together; and where an item's error says its fault lies (the route on a
fake vllm-omni engine)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.engine_protocol import ReferenceAudio
from app.server import create_app
from app.settings import Settings
from app.speech import batch as batch_module
from app.speech.batch import BatchSlots, SharedReferences
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_omni_engine import make_engine, service_settings


async def test_a_reference_shared_by_items_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []

    async def decode(value: str, settings: Settings) -> ReferenceAudio:
        decoded.append(value)
        await asyncio.sleep(0.01)
        return ReferenceAudio(np.zeros(24_000, np.float32), 24_000)

    monkeypatch.setattr(batch_module, "decode_reference", decode)
    references = SharedReferences(Settings())
    shared = "data:audio/wav;base64," + "A" * 1000
    results = await asyncio.gather(*(references.decode(shared) for _ in range(8)), references.decode("other"))
    assert decoded == [shared, "other"] and len({id(r) for r in results[:8]}) == 1
    await references.close()


async def test_an_item_cancelled_leaves_the_shared_decode_to_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    async def decode(value: str, settings: Settings) -> ReferenceAudio:
        await asyncio.sleep(0.05)
        return ReferenceAudio(np.zeros(10, np.float32), 24_000)

    monkeypatch.setattr(batch_module, "decode_reference", decode)
    references = SharedReferences(Settings())
    first = asyncio.ensure_future(references.decode("ref"))
    second = asyncio.ensure_future(references.decode("ref"))
    await asyncio.sleep(0.01)
    first.cancel()
    assert len((await second).samples) == 10
    pending = asyncio.ensure_future(references.decode("never"))
    await asyncio.sleep(0)
    await references.close()  # the batch ended: what is still decoding stops
    with pytest.raises(asyncio.CancelledError):
        await pending


@pytest.mark.parametrize(("concurrency", "configured", "size"), [(64, None, 16), (2, None, 1), (4, 2, 2), (4, 9, 4)])
def test_the_batches_share_of_slots(concurrency: int, configured: int | None, size: int) -> None:
    assert BatchSlots(concurrency, configured).size == size


async def test_an_items_error_names_the_field_at_fault_where_it_is(custom_voice_dir: Path) -> None:
    """`items[3].speed` for a value the item sent, as OpenAI names a field within a list; the batch's own field for a
    value the item took from the batch (its default, shared by every item that does not set it)."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    body = {
        "voice": "vivian",
        "language": "Klingon",  # every item that does not name its own language fails on the batch's
        "response_format": "pcm",
        "items": [
            {"input": "Hello there.", "language": "English", "max_new_tokens": 11},
            {"input": "Who am I?", "language": "English", "voice": "nobody"},
            {"input": "Too fast.", "language": "English", "speed": 9},
            {"input": "Louder.", "language": "English", "stream": True},
            {"text": "no input", "language": "English"},
            {"input": "Hello there.", "max_new_tokens": 11},
            "Not an object.",
            {"input": "Hi.", "language": "English", "\ud800": 1},  # a name that is no name: the item is at fault
        ],
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        sent = json.dumps(body)  # as ASCII, the lone surrogate written "\ud800", as JSON allows
        response = await client.post(
            "/v1/audio/speech/batch", content=sent, headers={"Content-Type": "application/json"}, timeout=60
        )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[0]["status"] == "success", results[0]
    params = [result["error"]["param"] for result in results[1:]]
    assert params == [
        *("items[1].voice", "items[2].speed", "items[3].stream", "items[4].input", "language", "items[6]"),
        "items[7]",
    ]
    assert results[7]["error"]["code"] == "unknown_parameter"
