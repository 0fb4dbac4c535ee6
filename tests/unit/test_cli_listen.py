"""app/cli.py's `listen`: the server's address bound before its engine loads, as uvicorn would bind it."""

from __future__ import annotations

import socket

import pytest

from app.cli import listen
from app.settings import InvalidSettings


def ipv6_here() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_here(), reason="no IPv6 on this machine")
def test_the_ipv6_wildcard_alone_takes_ipv4_clients_too() -> None:
    """SPEECH_HOST=:: names one IPv6 address: bound IPv6-only, as it was for the IPv4 twin of a name that has both,
    no IPv4 client could connect, where uvicorn's own bind (and every earlier release) took both."""
    (sock,) = listen("::", 0)
    try:
        sock.listen()
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        sock.close()


def test_an_address_of_no_interface_here_is_refused_naming_the_host() -> None:
    with pytest.raises(InvalidSettings, match=r"^SPEECH_HOST: cannot listen on http://192\.0\.2\.1:"):
        listen("192.0.2.1", 0)
