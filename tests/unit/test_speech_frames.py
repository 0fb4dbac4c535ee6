"""app.api.speech_frames: what a send to a WebSocket client that has gone ends the session as."""

from __future__ import annotations

import pytest
from fastapi import WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected

from app.api.speech_frames import Frames, SessionClosed


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
