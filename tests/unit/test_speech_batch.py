"""A batch's shared work, apart from the server: each reference audio decoded once for all the items cloning from
it, and the share of slots all batches hold together."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.engine_protocol import ReferenceAudio
from app.settings import Settings
from app.speech import batch as batch_module
from app.speech.batch import BatchSlots, SharedReferences


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
