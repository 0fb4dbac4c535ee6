"""Fetching reference audio from a URL without becoming a proxy into the private network.

Only hosts on the allow-list (SPEECH_REF_AUDIO_ALLOWED_HOSTS; empty = no URLs at all), https unless http is allowed,
and never an address that is not globally routable (private, loopback, link-local such as the cloud metadata
service, multicast, reserved...) unless explicitly allowed. The checked address is the one connected to (no second
DNS answer can swap it), every redirect is checked again, and time and size are capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import httpx

from app.engine_protocol import UnsupportedParameter

MAX_REDIRECTS = 3


# the largest reference audio taken by default, fetched or sent (SPEECH_REF_AUDIO_MAX_BYTES)
MAX_REFERENCE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class FetchPolicy:
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    allow_http: bool = False
    allow_private: bool = False
    max_bytes: int = MAX_REFERENCE_BYTES
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 5.0
    total_timeout_s: float = 15.0
    ca_bundle: str | None = None  # a private CA for allow-listed internal hosts; default: the system's trust store


def _reject(message: str) -> UnsupportedParameter:
    return UnsupportedParameter("ref_audio", message)


def _host_allowed(host: str, allowed: frozenset[str]) -> bool:
    host = host.lower().rstrip(".")
    return any(host == entry or (entry.startswith(".") and host.endswith(entry)) for entry in allowed)


async def _checked_address(host: str, port: int, policy: FetchPolicy) -> str:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode (a label too long)
        raise _reject(f"ref_audio host '{host}' does not resolve.") from exc
    addresses = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        if not address.is_global and not policy.allow_private:
            raise _reject(f"ref_audio host '{host}' resolves to a non-public address; refused.")
        addresses.append(str(address))
    if not addresses:
        raise _reject(f"ref_audio host '{host}' does not resolve.")
    return addresses[0]


@contextlib.contextmanager
def _as_url() -> Iterator[None]:
    """A URL that does not parse (a bracket left open, a port that is not one) is refused, not a server error."""
    try:
        yield
    except ValueError as exc:
        raise _reject(f"ref_audio is not a valid URL ({exc}).") from exc


def tls_verification(ca_bundle: str | None) -> ssl.SSLContext | bool:
    """How an https fetch checks its server: against `ca_bundle`'s certificates, else the system's trust store. An
    OSError (ssl.SSLError among them) where the bundle cannot be loaded, which the server's start checks."""
    return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else True


async def fetch_reference(url: str, policy: FetchPolicy) -> bytes:
    timeout = httpx.Timeout(policy.read_timeout_s, connect=policy.connect_timeout_s)
    verify = tls_verification(policy.ca_bundle)
    try:
        async with (
            asyncio.timeout(policy.total_timeout_s),
            httpx.AsyncClient(timeout=timeout, trust_env=False, verify=verify, follow_redirects=False) as client,
        ):
            for _ in range(MAX_REDIRECTS + 1):
                with _as_url():
                    parts = urlsplit(url)
                    port = parts.port
                scheme = parts.scheme.lower()
                if scheme not in ("https", "http") or (scheme == "http" and not policy.allow_http):
                    raise _reject(f"ref_audio URLs must use https{' or http' if policy.allow_http else ''}.")
                host = parts.hostname or ""
                if not host or not _host_allowed(host, policy.allowed_hosts):
                    raise _reject(f"ref_audio host '{host}' is not on this server's allow-list.")
                port = port or (443 if scheme == "https" else 80)
                address = await _checked_address(host, port, policy)
                netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
                pinned = parts._replace(netloc=netloc).geturl()
                headers = {"Host": parts.netloc.rsplit("@", 1)[-1], "Accept": "audio/*"}
                extensions = {"sni_hostname": host} if scheme == "https" else {}
                request = client.build_request("GET", pinned, headers=headers, extensions=extensions)
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect:
                        with _as_url():
                            url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code != 200:
                        raise _reject(f"ref_audio URL answered HTTP {response.status_code}.")
                    return await _read_capped(response, policy.max_bytes)
                finally:
                    await response.aclose()
            raise _reject(f"ref_audio URL redirected more than {MAX_REDIRECTS} times.")
    except TimeoutError as exc:
        raise _reject("ref_audio URL took too long to answer.") from exc
    except httpx.TimeoutException as exc:
        raise _reject("ref_audio URL took too long to answer.") from exc
    except httpx.HTTPError as exc:
        raise _reject(f"ref_audio URL could not be fetched ({type(exc).__name__}).") from exc


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise _reject(f"ref_audio is larger than {max_bytes} bytes.")
    data = bytearray()
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) > max_bytes:
            raise _reject(f"ref_audio is larger than {max_bytes} bytes.")
    return bytes(data)
