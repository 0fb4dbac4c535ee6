"""uvicorn's configuration as the server builds it (app/cli.py server_config)."""

from __future__ import annotations

from fastapi import FastAPI

from app.cli import server_config
from app.settings import Settings


def test_a_websocket_pong_queued_behind_unread_audio_never_ends_the_session() -> None:
    """A client that plays its audio as it reads answers uvicorn's keep-alive ping only once it has read the audio
    sent before it: minutes later for a long reply. uvicorn's own pong deadline (20 s) closed such sessions with 1011
    mid-reply; a client that is gone is told by the write-stall bound and the session's idle timeout instead."""
    config = server_config(FastAPI(), Settings())
    assert config.ws_ping_interval  # pings still go: they keep a proxy's idle timer fed
    assert config.ws_ping_timeout is None
