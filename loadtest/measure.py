"""One request, timed the way a caller feels it.

TTFA is the time from sending the request to the first byte of audio payload: for wav, the first byte past the
44-byte header; for SSE, the first audio inside the first `speech.audio.delta` (again past a wav header); for other
formats, the first body byte. E2E runs until the last byte. Audio duration comes from decoding what arrived.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadtest.audio import decode
from loadtest.targets import Target

WAV_HEADER_BYTES = 44


@dataclass
class RequestResult:
    target: int
    text: str
    status: int
    ok: bool
    error_code: str | None = None
    ttfa_s: float | None = None
    e2e_s: float | None = None
    audio_s: float | None = None
    samples: int = 0
    sample_rate: int | None = None
    bytes: int = 0
    audio: bytes | None = field(default=None, repr=False)

    @property
    def rtf(self) -> float | None:
        if self.e2e_s is None or not self.audio_s:
            return None
        return self.e2e_s / self.audio_s


class _PayloadClock:
    """Counts audio payload bytes and notes when the first one arrives."""

    def __init__(self, started: float, skip: int) -> None:
        self.started = started
        self.skip = skip
        self.seen = 0
        self.first_at: float | None = None

    def add(self, size: int) -> None:
        self.seen += size
        if self.first_at is None and self.seen > self.skip:
            self.first_at = time.perf_counter() - self.started


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
        return error.get("code") or error.get("type")
    except (ValueError, KeyError, TypeError):
        return None


async def measure(
    client: httpx.AsyncClient,
    target: Target,
    text: str,
    response_format: str,
    stream_format: str,
    keep_audio: bool,
) -> RequestResult:
    body: dict[str, Any] = {
        "model": target.model,
        "voice": target.voice,
        "input": text,
        "response_format": response_format,
        **target.extra_body,
    }
    if stream_format != "audio":
        body["stream_format"] = stream_format
    skip = WAV_HEADER_BYTES if response_format == "wav" else 0
    audio = bytearray()
    started = time.perf_counter()
    clock = _PayloadClock(started, skip)
    try:
        async with client.stream("POST", target.speech_url, json=body, headers=target.headers) as response:
            if response.status_code != 200:
                payload = await response.aread()
                return RequestResult(
                    target.index,
                    text,
                    response.status_code,
                    False,
                    _error_code(payload),
                    e2e_s=time.perf_counter() - started,
                    bytes=len(payload),
                )
            if stream_format == "sse":
                error = await _read_sse(response, audio, clock)
                if error is not None:
                    return RequestResult(target.index, text, 200, False, error, e2e_s=time.perf_counter() - started)
            else:
                async for chunk in response.aiter_raw():
                    audio += chunk
                    clock.add(len(chunk))
        e2e = time.perf_counter() - started
    except httpx.TimeoutException:
        return RequestResult(target.index, text, 0, False, "timeout", e2e_s=time.perf_counter() - started)
    except httpx.HTTPError as exc:
        return RequestResult(target.index, text, 0, False, type(exc).__name__, e2e_s=time.perf_counter() - started)
    rate = int(target.extra_body.get("sample_rate", 24_000))
    try:
        decoded = decode(bytes(audio), response_format, pcm_rate=rate)
    except Exception:  # the server sent something no decoder accepts: count it, do not crash the run
        return RequestResult(target.index, text, 200, False, "undecodable_audio", clock.first_at, e2e, bytes=len(audio))
    if len(decoded.samples) == 0:
        return RequestResult(target.index, text, 200, False, "empty_audio", clock.first_at, e2e, bytes=len(audio))
    return RequestResult(
        target.index,
        text,
        200,
        True,
        None,
        clock.first_at,
        e2e,
        decoded.duration_s,
        len(decoded.samples),
        decoded.sample_rate,
        len(audio),
        bytes(audio) if keep_audio else None,
    )


async def _read_sse(response: httpx.Response, audio: bytearray, clock: _PayloadClock) -> str | None:
    """Collect the audio of an SSE stream; returns an error code if the stream reported one."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:].strip())
        kind = event.get("type")
        if kind == "speech.audio.delta":
            data = base64.b64decode(event.get("audio", ""))
            audio += data
            clock.add(len(data))
        elif kind == "error":
            return (event.get("error") or {}).get("code") or "sse_error"
        elif kind == "speech.audio.done":
            return None
    return "sse_incomplete"  # the stream ended without speech.audio.done
