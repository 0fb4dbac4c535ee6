"""Fetching ref_audio URLs: the allow-list, https, address checks, redirects, time and size caps — against local
HTTP and HTTPS servers (a test CA from trustme)."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import trustme

from app.audio.fetch import FetchPolicy, fetch_reference
from app.audio.reference import decode_reference_audio
from app.engine_protocol import UnsupportedParameter
from tests.support.wav import pcm_wav

WAV = pcm_wav((np.sin(np.arange(32_000) / 8) * 10_000).astype("<i2"), 16_000)


class Handler(http.server.BaseHTTPRequestHandler):
    clip = WAV  # what /voice.wav serves

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        routes = {
            "/voice.wav": lambda: self._send(200, self.clip),
            "/to-voice": lambda: self._redirect("/voice.wav"),
            "/to-metadata": lambda: self._redirect("http://169.254.169.254/latest/meta-data/"),
            "/to-elsewhere": lambda: self._redirect("https://not-allowed.example/voice.wav"),
            "/loop": lambda: self._redirect("/loop"),
            "/big": lambda: self._send(200, b"\0" * 300_000),
            "/big-undeclared": self._big_chunked,
            "/slow": self._slow,
            "/missing": lambda: self._send(404, b"no"),
            "/to-bad-port": lambda: self._redirect("http://localhost:99999/voice.wav"),
            "/to-open-bracket": lambda: self._redirect("http://[x/voice.wav"),
        }
        routes.get(self.path, lambda: self._send(404, b""))()

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _big_chunked(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(100):
                self.wfile.write(b"\0" * 10_000)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the fetcher hung up at its size cap, as it should

    def _slow(self) -> None:
        time.sleep(3)
        try:
            self._send(200, WAV)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the fetcher gave up waiting, as it should (else the server prints the traceback into the test log)


def serve(context: ssl.SSLContext | None, handler: type[Handler] = Handler) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    yield from serve(None)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    ca = trustme.CA()
    bundle = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return ca, bundle


@pytest.fixture(scope="module")
def https_port(tls: tuple[trustme.CA, Path]) -> Iterator[int]:
    ca, _ = tls
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    yield from serve(context)


LOCAL = FetchPolicy(
    allowed_hosts=frozenset({"localhost"}), allow_http=True, allow_private=True, max_bytes=200_000, read_timeout_s=1.0
)


async def test_https_from_an_allow_listed_host(https_port: int, tls: tuple[trustme.CA, Path]) -> None:
    policy = replace(LOCAL, allow_http=False, ca_bundle=str(tls[1]))
    data = await fetch_reference(f"https://localhost:{https_port}/voice.wav", policy)
    assert data == WAV
    assert len(decode_reference_audio(data).samples) == 32_000


async def test_https_certificate_is_verified(https_port: int) -> None:
    with pytest.raises(UnsupportedParameter, match="could not be fetched"):
        await fetch_reference(f"https://localhost:{https_port}/voice.wav", replace(LOCAL, allow_http=False))


async def test_http_when_allowed_and_redirects_followed(http_port: int) -> None:
    assert await fetch_reference(f"http://localhost:{http_port}/to-voice", LOCAL) == WAV


@pytest.mark.parametrize(
    ("url", "policy_changes", "message"),
    [
        ("file:///etc/passwd", {}, "must use https"),
        ("ftp://localhost/voice.wav", {}, "must use https"),
        ("gopher://localhost:70/", {}, "must use https"),
        ("http://localhost:{port}/voice.wav", {"allow_http": False}, "must use https"),
        ("http://169.254.169.254/latest/meta-data/", {}, "allow-list"),
        ("http://localhost:{port}/voice.wav", {"allowed_hosts": frozenset()}, "allow-list"),
        ("http://evil.localhost.attacker.example/voice.wav", {}, "allow-list"),
        ("http://localhost:{port}/voice.wav", {"allow_private": False}, "non-public address"),
        ("http://localhost:{port}/to-metadata", {}, "allow-list"),
        ("http://localhost:{port}/to-elsewhere", {}, "allow-list"),
        ("http://localhost:{port}/loop", {}, "redirected more than"),
        ("http://localhost:{port}/big", {}, "larger than"),
        ("http://localhost:{port}/big-undeclared", {}, "larger than"),
        ("http://localhost:{port}/slow", {}, "too long"),
        ("http://localhost:{port}/missing", {}, "HTTP 404"),
        ("http://user:pass@localhost:{port}/voice.wav@evil.example", {"allow_private": False}, "non-public"),
        # URLs that do not parse: refused as such, never an error of the server's
        ("https://[x/a.wav", {}, "not a valid URL"),
        ("http://localhost:99999/voice.wav", {}, "not a valid URL"),
        ("http://localhost:abc/voice.wav", {}, "not a valid URL"),
        ("http://localhost:{port}/to-bad-port", {}, "not a valid URL"),
        ("http://localhost:{port}/to-open-bracket", {}, "not a valid URL"),
    ],
)
async def test_hostile_urls_are_refused(http_port: int, url: str, policy_changes: dict, message: str) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        await fetch_reference(url.format(port=http_port), replace(LOCAL, **policy_changes))
    assert info.value.param == "ref_audio"
    assert message in info.value.message


async def test_allow_listed_metadata_address_is_still_refused() -> None:
    policy = FetchPolicy(allowed_hosts=frozenset({"169.254.169.254"}), allow_http=True)
    with pytest.raises(UnsupportedParameter, match="non-public"):
        await fetch_reference("http://169.254.169.254/latest/meta-data/", policy)


async def test_subdomain_entries(http_port: int) -> None:
    policy = replace(LOCAL, allowed_hosts=frozenset({".localhost"}))
    with pytest.raises(UnsupportedParameter, match="allow-list"):  # ".localhost" allows sub.localhost, not localhost
        await fetch_reference(f"http://localhost:{http_port}/voice.wav", policy)
