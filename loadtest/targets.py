"""Servers under test: base URL, model, voice, headers and extra body fields; model and voice auto-discovered."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Target:
    index: int
    url: str  # base URL, without /v1
    model: str | None = None
    voice: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    engine: bool = False  # an engine_alone control endpoint (engine+http://...), not a speech server
    # Further replicas of the same deployment (two pods behind one Service, two servers sharing a GPU): requests go
    # to url and these in turn, as a round-robin load balancer would send them; discovery asks url only.
    replicas: tuple[str, ...] = ()
    _turn: itertools.cycle[str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.replicas)

    def next_url(self) -> str:
        """The base URL the next request goes to: the replicas in turn."""
        if self._turn is None:
            self._turn = itertools.cycle(self.urls)
        return next(self._turn)

    def next_speech_url(self) -> str:
        return f"{self.next_url()}/v1/audio/speech"

    def next_stream_url(self) -> str:
        """WS /v1/audio/speech/stream (wss:// for an https:// server)."""
        return re.sub(r"^http", "ws", self.next_url()) + "/v1/audio/speech/stream"

    @property
    def label(self) -> str:
        letter = chr(ord("A") + self.index) if self.index < 26 else self.index
        return f"{letter}: {'engine+' if self.engine else ''}{' + '.join(self.urls)}"


def normalise_url(url: str) -> str:
    """Accept http://host:port, .../v1 or the full .../v1/audio/speech."""
    url = url.strip().rstrip("/")
    return re.sub(r"(/v1)?(/audio/speech)?$", "", url)


def parse_header(header: str) -> tuple[str, str]:
    name, sep, value = header.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"--header must look like 'Name: value', got {header!r}")
    return name.strip(), value.strip()


def _first_voice(body: Any) -> str | None:
    voices = body.get("voices", body.get("data", [])) if isinstance(body, dict) else body
    for voice in voices if isinstance(voices, list) else []:
        if isinstance(voice, str):
            return voice
        if isinstance(voice, dict):
            for key in ("id", "name", "voice_id"):
                if isinstance(voice.get(key), str):
                    return voice[key]
    return None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise RuntimeError(f"{response.request.url} did not answer JSON: is it a speech server?") from None


async def discover(client: httpx.AsyncClient, target: Target) -> None:
    """Fill in model and voice from /v1/models and /v1/audio/voices where they were not given."""
    if target.model is None:
        response = await client.get(f"{target.url}/v1/models", headers=target.headers)
        response.raise_for_status()
        models = _json(response).get("data", [])
        if not models:
            raise RuntimeError(f"{target.url} lists no models; pass --model")
        target.model = models[0]["id"]
    if target.voice is None:
        response = await client.get(f"{target.url}/v1/audio/voices", headers=target.headers)
        if response.status_code in (401, 403):  # a key it lacks, not a server without voices
            response.raise_for_status()
        voice = _first_voice(_json(response)) if response.status_code == 200 else None
        if voice is None:
            raise RuntimeError(f"{target.url} lists no voices at /v1/audio/voices; pass --voice")
        target.voice = voice
