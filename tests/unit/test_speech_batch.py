"""A batch's shared work, apart from the server: each reference audio decoded once for all the items cloning from
it, and the share of slots all batches hold together; and where an item's error says its fault lies (the route on a
fake vllm-omni engine)."""

from __future__ import annotations

import asyncio
import base64
import json
import tracemalloc
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.api import speech_batch
from app.api.errors import ApiError, invalid_param
from app.engine_protocol import ReferenceAudio
from app.server import create_app
from app.settings import Settings
from app.speech import batch as batch_module
from app.speech.batch import BatchSlots, ItemOutcome, SharedReferences
from app.speech.encoding import Usage
from tests.fakes.vllm_omni_0_30 import SAMPLES_PER_FRAME, FakeAsyncOmni
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
            {"input": "Hello there.", "language": None, "max_new_tokens": 11},  # null: the batch's, as if omitted
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
        *("items[7]", "language"),
    ]
    assert results[7]["error"]["code"] == "unknown_parameter"


async def post_counting_the_answer(app: object, path: str, body: dict[str, object]) -> tuple[int, dict[str, str], int]:
    """POST `body` to the ASGI `app` as a server would, the answer's bytes counted and let go as they are sent (a test
    client would keep them all): its status, headers and length."""
    sent = json.dumps(body).encode()
    messages = [{"type": "http.request", "body": sent, "more_body": False}]
    start: dict[str, object] = {}
    length = 0

    async def receive() -> dict[str, object]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays until the answer is sent
        raise AssertionError

    async def send(message: dict[str, object]) -> None:
        nonlocal length
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            length += len(message.get("body", b""))  # type: ignore[arg-type]

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(sent)).encode())]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)  # type: ignore[operator]
    names = {k.decode(): v.decode() for k, v in start["headers"]}  # type: ignore[attr-defined]
    return int(start["status"]), names, length  # type: ignore[call-overload]


async def test_a_large_answer_holds_little_more_than_its_audio(custom_voice_dir: Path) -> None:
    """A batch's answer is every item's audio in base64 in one JSON: at the caps (32 768 characters, at speed 0.25 in
    48 kHz wav) a gigabyte. Built whole (each item's base64, then the JSON text, then its bytes) it held about five
    times its audio at once, 3.7 GB more for that batch: past a CPU replica's memory limit. Written as it is sent, a
    slice of audio encoded at a time, it holds its audio and little more, as its items sent as requests of their own
    would; its Content-Length is still exact."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    await engine.start()
    # one item synthesized at a time, so that what one item takes while it is made is small beside the answer
    settings = service_settings(engine).model_copy(update={"batch_concurrency": 1})
    app = create_app(settings, engine=engine)
    items, frames = 12, 500
    item = {"input": "Hello there.", "max_new_tokens": frames + 1, "ignore_eos": True}  # 1 920 000 bytes of pcm
    body = {"voice": "vivian", "response_format": "pcm", "items": [item] * items}
    audio_bytes = items * frames * SAMPLES_PER_FRAME * 2
    tracemalloc.start()
    try:
        status, headers, length = await post_counting_the_answer(app, "/v1/audio/speech/batch", body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 200
    assert int(headers["content-length"]) == length > audio_bytes * 4 // 3  # every item's audio, in base64
    assert peak < audio_bytes * 2, f"{peak / audio_bytes:.1f} x the audio"


async def test_an_answer_sent_in_pieces_is_the_answer_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each item's audio, its length no multiple of 3 and cut into slices, joins into the one base64 string it is;
    the pieces are the answer a small batch gets at once, its length the one announced, in vllm-omni's shape."""
    monkeypatch.setattr(speech_batch, "AUDIO_SLICE_BYTES", 6)
    audio = [bytes(range(20)), b"\xff" * 7]
    outcomes: list[ItemOutcome | ApiError] = [
        ItemOutcome(0, "wav", {}, data=audio[0], usage=Usage(3, 5)),
        invalid_param("items[1].speed", "Too fast."),
        ItemOutcome(2, "mp3", {}, data=audio[1]),
    ]
    errors = [None, outcomes[1], None]
    answer = speech_batch.BatchAnswer("speech-batch-x", outcomes, errors)  # type: ignore[arg-type]
    pieces = [piece async for piece in answer.pieces()]
    assert b"".join(pieces) == answer.whole() and len(answer.whole()) == answer.length
    document = json.loads(answer.whole())
    assert [document[name] for name in ("id", "total", "succeeded", "failed")] == ["speech-batch-x", 3, 2, 1]
    first, second, third = document["results"]
    assert list(first) == ["index", "status", "audio_data", "media_type", "usage"]
    assert base64.b64decode(first["audio_data"]) == audio[0] and first["usage"]["output_tokens"] == 5
    assert second == {"index": 1, "status": "error", "error": outcomes[1].body()["error"]}  # type: ignore[union-attr]
    assert base64.b64decode(third["audio_data"]) == audio[1] and third["media_type"] == "audio/mpeg"
