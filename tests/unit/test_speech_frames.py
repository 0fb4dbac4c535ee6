"""app.api.speech_frames: what a send to a WebSocket client that has gone ends the session as."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected

from app.api.speech_frames import Frames, SessionClosed
from app.speech.errors import ShuttingDown


class GoneSocket:
    """A WebSocket whose connection is lost: the first send raises WebSocketDisconnect, every later one
    WebSocketDisconnected, as Starlette's do."""

    def __init__(self) -> None:
        self.sends = 0

    async def _send(self) -> None:
        self.sends += 1
        if self.sends == 1:
            raise WebSocketDisconnect(1006)
        raise WebSocketDisconnected("the connection is closed")

    async def send_text(self, text: str) -> None:
        await self._send()

    async def send_bytes(self, data: bytes) -> None:
        await self._send()


async def test_every_send_to_a_client_that_has_gone_ends_the_session_as_its_leaving() -> None:
    """Not as a failure of the server's (1011, counted by the error alert): the speaker's send meets the loss first,
    the session's own reply waiting on the lock meets it next, each as the client gone."""
    frames = Frames(GoneSocket())  # type: ignore[arg-type]
    for send in (frames.send({"type": "error"}), frames.send({"type": "error"})):
        with pytest.raises(SessionClosed) as closed:
            await send
        assert closed.value.code == -1


class SlowSocket:
    """A WebSocket whose client reads slowly: each send waits until `read` is set."""

    def __init__(self) -> None:
        self.read = asyncio.Event()
        self.sent: list[dict[str, object]] = []

    async def send_text(self, text: str) -> None:
        await self.read.wait()
        self.sent.append(json.loads(text))


async def test_a_drain_is_told_once_even_while_its_first_telling_waits_on_a_slow_client() -> None:
    """A sentence's refusal by the drain is being written to a client that reads slowly when the session's own stop
    comes: the stop waits for it, then closes (1001) without telling it again. It closed at once, and the session's
    close cancelled the first telling: nothing was told."""
    socket = SlowSocket()
    frames = Frames(socket)  # type: ignore[arg-type]
    speaker = asyncio.create_task(frames.error(ShuttingDown()))
    await asyncio.sleep(0.01)  # its telling waits on the client
    session = asyncio.create_task(frames.drain_ended(ShuttingDown()))
    await asyncio.sleep(0.01)
    assert not session.done()  # it waits for the telling under way
    socket.read.set()
    for task in (speaker, session):
        with pytest.raises(SessionClosed) as closed:
            await task
        assert closed.value.code == 1001
    assert [message["code"] for message in socket.sent] == ["server_shutting_down"]
