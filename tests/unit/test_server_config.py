"""uvicorn's configuration as the server builds it (app/cli.py server_config)."""

from __future__ import annotations

from fastapi import FastAPI

from app.cli import cut_off_stuck_writers, server_config
from app.settings import Settings


def test_a_websocket_pong_queued_behind_unread_audio_never_ends_the_session() -> None:
    """A client that plays its audio as it reads answers uvicorn's keep-alive ping only once it has read the audio
    sent before it: minutes later for a long reply. uvicorn's own pong deadline (20 s) closed such sessions with 1011
    mid-reply; a client that is gone is told by the write-stall bound and the session's idle timeout instead."""
    config = server_config(FastAPI(), Settings())
    assert config.ws_ping_interval  # pings still go: they keep a proxy's idle timer fed
    assert config.ws_ping_timeout is None


def test_a_drain_cuts_off_only_the_connections_whose_writes_wait_on_their_clients() -> None:
    """Streams the drain stopped but could not end wait on a write: only their connections are aborted. Another's
    written bytes may still be on their way (a whole file, a voice's 201 after it was stored): an abort would drop
    them, so those are left to uvicorn's shutdown, which writes them first."""

    class Connection:
        def __init__(self, paused: bool) -> None:
            self.writing_paused = paused
            self.transport = self
            self.aborted = False

        def abort(self) -> None:
            self.aborted = True

    stuck, writing, idle = Connection(True), Connection(False), Connection(False)
    del idle.writing_paused  # a protocol that is no guarded one
    cut_off_stuck_writers({stuck, writing, idle})
    assert (stuck.aborted, writing.aborted, idle.aborted) == (True, False, False)
