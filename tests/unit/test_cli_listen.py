"""app/cli.py's `listen`: the server's address taken before its engine loads, as uvicorn's event loop would bind it."""

from __future__ import annotations

import socket

import pytest

from app.cli import listen
from app.settings import InvalidSettings


def test_a_port_another_server_has_just_taken_is_refused_at_once() -> None:
    """The first server's socket listens as soon as it is made: a second server started while the first still loads
    its engine (minutes on a GPU) is refused naming the port. Only bound, with SO_REUSEADDR, both binds succeeded, and
    the second found the port taken only as uvicorn started serving, where uvloop says nothing: it logged that it
    served, and did not."""
    first = listen("127.0.0.1", 0)
    port = first[0].getsockname()[1]
    try:
        with pytest.raises(
            InvalidSettings, match=rf"^SPEECH_PORT: cannot listen on http://127\.0\.0\.1:{port}: .*in use"
        ):
            listen("127.0.0.1", port)
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # the first listens already
            pass
    finally:
        for sock in first:
            sock.close()


def test_an_address_of_no_interface_here_is_refused_naming_the_host() -> None:
    with pytest.raises(InvalidSettings, match=r"^SPEECH_HOST: cannot listen on http://192\.0\.2\.1:"):
        listen("192.0.2.1", 0)
