"""One request, timed the way a caller feels it.

TTFA is the time from sending the request to the first byte of audio payload: for wav, the first byte past the
header (RIFF parsed up to the "data" chunk: 44 bytes from this server); for SSE, the first audio inside the
`speech.audio.delta` events (again past a wav header); for other formats, the first body byte (container headers
included: compare such formats only between servers that send them alike). E2E runs until the last byte. Audio
duration comes from decoding what arrived.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadtest.audio import decode
from loadtest.targets import Target


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
    error_message: str | None = None  # the server's own words (its error body or SSE error event), else ours

    @property
    def rtf(self) -> float | None:
        if self.e2e_s is None or not self.audio_s:
            return None
        return self.e2e_s / self.audio_s


def wav_payload_offset(head: bytes) -> int | None:
    """Where the samples of a (streaming) WAV start: past the RIFF header and every chunk before "data" (LIST, fact,
    ...); None while the header has not fully arrived."""
    if len(head) < 12:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return 0  # not a WAV header: count from the first byte
    offset = 12
    while len(head) >= offset + 8:
        chunk, size = head[offset : offset + 4], int.from_bytes(head[offset + 4 : offset + 8], "little")
        if chunk == b"data":
            return offset + 8
        offset += 8 + size + (size & 1)
    return None


class _PayloadClock:
    """Counts audio payload bytes and notes when the first one arrives (for wav, the first byte past the header)."""

    def __init__(self, started: float, wav: bool) -> None:
        self.started = started
        self.wav = wav
        self.head = bytearray()
        self.first_at: float | None = None

    def add(self, data: bytes) -> None:
        if self.first_at is not None or not data:
            return
        if self.wav:
            self.head += data
            offset = wav_payload_offset(bytes(self.head))
            if offset is None or len(self.head) <= offset:
                return
        self.first_at = time.perf_counter() - self.started


def _error(body: bytes) -> tuple[str | None, str | None]:
    """(code, message) of an OpenAI-shaped error body; for any other body, no code and the body's start."""
    try:
        error = json.loads(body)["error"]
        return error.get("code") or error.get("type"), error.get("message")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, body[:200].decode("utf-8", "replace").strip() or None


async def measure(
    client: httpx.AsyncClient,
    target: Target,
    text: str,
    response_format: str,
    stream_format: str,
    keep_audio: bool,
    scheduled_at: float | None = None,
) -> RequestResult:
    """`scheduled_at` (open loop): the planned send time, so that a late send counts against the server's latency
    instead of vanishing from it (coordinated omission)."""
    body: dict[str, Any] = {
        "model": target.model,
        "voice": target.voice,
        "input": text,
        "response_format": response_format,
        **target.extra_body,
    }
    if stream_format != "audio":
        body["stream_format"] = stream_format
    audio = bytearray()
    started = time.perf_counter() if scheduled_at is None else scheduled_at
    clock = _PayloadClock(started, response_format == "wav")
    try:
        async with client.stream("POST", target.speech_url, json=body, headers=target.headers) as response:
            if response.status_code != 200:
                payload = await response.aread()
                code, message = _error(payload)
                return RequestResult(
                    target.index,
                    text,
                    response.status_code,
                    False,
                    code,
                    e2e_s=time.perf_counter() - started,
                    bytes=len(payload),
                    error_message=message,
                )
            if stream_format == "sse":
                error = await _read_sse(response, audio, clock)
                if error is not None:
                    code, message = error
                    return RequestResult(
                        target.index, text, 200, False, code, e2e_s=time.perf_counter() - started, error_message=message
                    )
            else:
                async for chunk in response.aiter_raw():
                    audio += chunk
                    clock.add(chunk)
        e2e = time.perf_counter() - started
    except httpx.TimeoutException as exc:
        return RequestResult(
            target.index, text, 0, False, "timeout", e2e_s=time.perf_counter() - started, error_message=repr(exc)
        )
    except httpx.HTTPError as exc:
        return RequestResult(
            target.index,
            text,
            0,
            False,
            type(exc).__name__,
            e2e_s=time.perf_counter() - started,
            error_message=str(exc),
        )
    rate = int(target.extra_body.get("sample_rate", 24_000))
    try:  # decoding is CPU work: off the event loop, so it does not delay other requests' clocks
        decoded = await asyncio.to_thread(decode, bytes(audio), response_format, rate)
    except Exception as exc:  # the server sent something no decoder accepts: count it, do not crash the run
        return RequestResult(
            target.index,
            text,
            200,
            False,
            "undecodable_audio",
            clock.first_at,
            e2e,
            bytes=len(audio),
            error_message=str(exc),
        )
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


async def _read_sse(response: httpx.Response, audio: bytearray, clock: _PayloadClock) -> tuple[str, str | None] | None:
    """Collect the audio of an SSE stream; returns (code, message) if the stream failed."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:].strip())
            kind = event.get("type")
            data = base64.b64decode(event.get("audio", ""), validate=True) if kind == "speech.audio.delta" else b""
        except (ValueError, AttributeError, TypeError):
            return "sse_malformed", line[:200]
        if kind == "speech.audio.delta":
            audio += data
            clock.add(data)
        elif kind == "error":
            error = event.get("error") or {}
            return error.get("code") or "sse_error", error.get("message")
        elif kind == "speech.audio.done":
            return None
    return "sse_incomplete", "the stream ended without speech.audio.done"
