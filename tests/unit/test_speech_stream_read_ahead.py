"""WS /v1/audio/speech/stream reads its client's text at most SPEECH_WS_MAX_READ_AHEAD_CHARS ahead of the speech:
past that, the next message is read once some of it has been spoken. The limit was a constant (32768 characters)
that an operator could not set and a client could not learn; GET /v1/audio/capabilities tells it now, and a session
holds to the limit set, served here over a stand-in engine that speaks nothing until the test lets it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api import speech_stream
from app.api.speech_stream import SpeechStreamSession
from app.engine_protocol import AudioChunk, SynthesisJob
from app.server import create_app
from app.settings import Settings
from tests.support.asgi import ready_client
from tests.unit.test_speech_utterances import ToneEngine

PATH = "/v1/audio/speech/stream"
READ_AHEAD = 1000  # characters; SPEECH_MAX_INPUT_CHARS is set to it, its floor
PIECE = "This sentence is read ahead of its speech. "  # one message's text: a sentence, and where the next begins
MESSAGES = 3 * READ_AHEAD // len(PIECE)  # three times the read-ahead in all


class HeldEngine(ToneEngine):
    """The tone engine, whose every job waits until the test calls `let_flow`: until then nothing is spoken."""

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()  # the server's, in a thread of the test client's
        self.flowing = asyncio.Event()

    def let_flow(self) -> None:
        self.loop.call_soon_threadsafe(self.flowing.set)

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        await self.flowing.wait()
        async for chunk in super().synthesize(job):
            yield chunk


@pytest.fixture
def engine() -> HeldEngine:
    return HeldEngine()


@pytest.fixture
def client(engine: HeldEngine) -> Iterator[TestClient]:
    # two slots: the sentence held and the one synthesized ahead of it, neither left to time out in the queue
    settings = Settings(max_input_chars=READ_AHEAD, ws_max_read_ahead_chars=READ_AHEAD, max_concurrency=2)
    with ready_client(create_app(settings, engine=engine)) as client:
        yield client


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every input.text message the server has read, in order."""
    texts: list[str] = []
    on_message = SpeechStreamSession.on_message

    async def reading(self: SpeechStreamSession, message: dict[str, Any]) -> None:
        data = json.loads(message.get("text") or "{}")
        if data.get("type") == "input.text":
            texts.append(data["text"])
        await on_message(self, message)

    monkeypatch.setattr(speech_stream.SpeechStreamSession, "on_message", reading)
    return texts


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "waited in vain"
        time.sleep(0.01)


def test_the_capabilities_tell_the_read_ahead_set(client: TestClient) -> None:
    assert client.get("/v1/audio/capabilities").json()["websocket"]["max_read_ahead_chars"] == READ_AHEAD


def test_a_session_reads_no_further_ahead_of_its_speech_than_the_limit_set(
    client: TestClient, engine: HeldEngine, read: list[str]
) -> None:
    """With nothing spoken, the server reads messages until the text queued to be spoken reaches the limit, and no
    further; once speech flows it reads the rest, and every sentence sent is spoken."""
    with client.websocket_connect(PATH) as ws:
        ws.send_json({"type": "session.config", "voice": "heart", "response_format": "pcm"})
        for _ in range(MESSAGES):
            ws.send_json({"type": "input.text", "text": PIECE})
        ws.send_json({"type": "input.done"})
        wait_for(lambda: sum(map(len, read)) >= READ_AHEAD)
        time.sleep(0.5)  # time to read on, as it did: a busy machine only hides the fault, never makes it up
        held = sum(map(len, read))
        # the limit, the sentence not yet known to be over (the next word ends it) and the message that crossed it
        assert READ_AHEAD <= held < READ_AHEAD + 2 * len(PIECE), held
        engine.let_flow()
        events = []
        while not events or events[-1]["type"] != "session.done":
            message = ws.receive()
            if message.get("text") is not None:
                events.append(json.loads(message["text"]))
        assert [e for e in events if e["type"] == "error"] == []
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": MESSAGES}
    assert len(read) == MESSAGES
