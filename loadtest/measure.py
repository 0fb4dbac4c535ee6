"""One request, timed the way a caller feels it.

TTFA is the time from sending the request to the first byte of audio payload: for wav, the first byte past the
header (RIFF parsed up to the "data" chunk: 44 bytes from this server); for SSE, the first audio inside the
`speech.audio.delta` events (again past a wav header); for compressed formats, the first byte of the first audio
packet (for Ogg, of the page holding it), past the container's headers, which a server may send before any audio.
E2E runs until the last byte. Audio duration comes from decoding what arrived: what a player plays, the codec's
priming and padding left out where the stream signals them (`loadtest.playback` says which streams do not). The
arrival time of every chunk is kept for the modelled listener (`loadtest.playback`): when playback starts, how often
and how long it stalls, and the time to uninterrupted audio (when a real-time listener could start and never run dry:
TTFA plus the stream's largest deficit), the headline figure: a low TTFA whose stream then runs dry is not what a
listener hears.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadtest.audio import DecodedAudio, decode
from loadtest.playback import Playback, first_audio_at, listen, wav_payload_offset
from loadtest.targets import Target

__all__ = [
    "PayloadClock",
    "RequestResult",
    "describe_exception",
    "first_audio",
    "heard_fields",
    "measure",
    "wav_payload_offset",
]


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
    error_message: str | None = None
    # the listener's view (loadtest.playback); None where the format gives no byte-to-time mapping
    playback_start_s: float | None = None
    stalls: int | None = None
    stalled_s: float | None = None
    stalls_at_audio_s: tuple[float, ...] | None = None  # where in the audio (s) each stall began, in order
    # when the audio came: (s since send, s of audio playable by then), arrivals within ARRIVAL_GROUP_S of the next
    # counted once (a window reaches the client as several socket reads)
    audio_arrivals: tuple[tuple[float, float], ...] | None = None
    least_in_hand_s: float | None = None  # the least audio the listener held before the last arrival (< 0: a wait)
    # time to uninterrupted audio, from TTFA's origin: the earliest start from which a real-time listener never runs
    # dry (loadtest.playback), TTFA plus the largest deficit for pcm and wav (for compressed formats the listener's
    # first audio is the first complete packet that plays any, at or after TTFA's first byte); and that deficit (0:
    # never ran dry)
    uninterrupted_s: float | None = None
    deficit_s: float | None = None
    # when the load tool had the answer (a perf_counter value): whether it came in a loop's steady window
    finished_at: float | None = field(default=None, repr=False)

    @property
    def rtf(self) -> float | None:
        if self.e2e_s is None or not self.audio_s:
            return None
        return self.e2e_s / self.audio_s

    @property
    def kept_audio(self) -> bool:
        return self.audio is not None

    def decode_audio(self, response_format: str) -> DecodedAudio:
        """The kept audio, decoded (to transcribe it)."""
        return decode(self.audio or b"", response_format, pcm_rate=self.sample_rate or 24_000)


class PayloadClock:
    """Notes when each chunk of audio payload arrives and how many payload bytes had arrived by then (for the player
    model), and when the first byte of audio came (for wav, the first byte past the header)."""

    def __init__(self, started: float, wav: bool) -> None:
        self.started = started
        self.wav = wav
        self.head = bytearray()
        self.first_at: float | None = None
        self.received = 0
        self.arrivals: list[tuple[float, int]] = []

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.received += len(data)
        self.arrivals.append((time.perf_counter() - self.started, self.received))
        if self.first_at is not None:
            return
        if self.wav:
            self.head += data
            offset = wav_payload_offset(bytes(self.head))
            if offset is None or len(self.head) <= offset:
                return
        self.first_at = self.arrivals[-1][0]


ARRIVAL_GROUP_S = 0.005


def grouped_arrivals(
    timeline: Sequence[tuple[float, float]], within_s: float = ARRIVAL_GROUP_S
) -> list[tuple[float, float]]:
    """The timeline with each run of arrivals less than `within_s` apart kept as its last one."""
    grouped: list[tuple[float, float]] = []
    for at, audio in timeline:
        if grouped and at - grouped[-1][0] < within_s:
            grouped[-1] = (at, audio)
        else:
            grouped.append((at, audio))
    return grouped


def heard_fields(playback: Playback | None, origin_s: float = 0.0) -> dict[str, Any]:
    """A RequestResult's listener fields from a modelled playback (all None where none could be modelled).
    `origin_s`: where TTFA counts from on the playback's clock, for the time to uninterrupted audio (the WebSocket's
    first complete sentence; a request's send is 0)."""
    if playback is None:
        return {
            "playback_start_s": None,
            "stalls": None,
            "stalled_s": None,
            "stalls_at_audio_s": None,
            "audio_arrivals": None,
            "least_in_hand_s": None,
            "uninterrupted_s": None,
            "deficit_s": None,
        }
    return {
        "playback_start_s": playback.start_s,
        "stalls": playback.stalls,
        "stalled_s": playback.stalled_s,
        "stalls_at_audio_s": tuple(wait.at_audio_s for wait in playback.waits),
        "audio_arrivals": tuple(grouped_arrivals(playback.timeline)),
        "least_in_hand_s": playback.least_in_hand_s,
        "uninterrupted_s": None if playback.uninterrupted_s is None else playback.uninterrupted_s - origin_s,
        "deficit_s": playback.deficit_s,
    }


def _error(body: bytes) -> tuple[str | None, str | None]:
    """(code, message) of an error response: the OpenAI error object's, or the start of whatever else came back."""
    try:
        error = json.loads(body)["error"]
        return error.get("code") or error.get("type"), error.get("message")
    except (ValueError, KeyError, TypeError, AttributeError):
        text = body[:300].decode("utf-8", errors="replace").strip()
        return None, text or None


def describe_exception(exc: BaseException) -> str:
    """An exception's message with what caused it (httpx's ReadError alone often says nothing)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        text = str(seen).strip()
        part = f"{type(seen).__name__}: {text}" if text else type(seen).__name__
        if not parts or parts[-1] != part:  # httpx, httpcore and h11 each raise the same error again: said once
            parts.append(part)
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


async def measure(
    client: httpx.AsyncClient,
    target: Target,
    text: str,
    response_format: str,
    stream_format: str,
    keep_audio: bool,
    scheduled_at: float | None = None,
    playback_buffer_s: float = 0.0,
    timeout_s: float | None = None,
) -> RequestResult:
    """`scheduled_at` (open loop): the planned send time, so that a late send counts against the server's latency
    instead of vanishing from it (coordinated omission). `playback_buffer_s`: the listener's jitter buffer.
    `timeout_s`: the most the whole request may take, its answer read to the end (the client's own timeouts bound
    each read)."""
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
    clock = PayloadClock(started, response_format == "wav")

    def failed(status: int, code: str | None, message: str | None, **fields: Any) -> RequestResult:
        return RequestResult(target.index, text, status, False, code, error_message=message, **fields)

    try:
        async with (
            asyncio.timeout(timeout_s),
            client.stream("POST", target.next_speech_url(), json=body, headers=target.headers) as response,
        ):
            if response.status_code != 200:
                payload = await response.aread()
                code, message = _error(payload)
                return failed(
                    response.status_code, code, message, e2e_s=time.perf_counter() - started, bytes=len(payload)
                )
            if stream_format == "sse":
                error = await _read_sse(response, audio, clock)
                if error is not None:
                    return failed(200, error[0], error[1], e2e_s=time.perf_counter() - started)
            else:
                async for chunk in response.aiter_raw():
                    audio += chunk
                    clock.add(chunk)
        e2e = time.perf_counter() - started
    except httpx.HTTPError as exc:
        return failed(0, type(exc).__name__, describe_exception(exc), e2e_s=time.perf_counter() - started)
    except TimeoutError:
        return failed(0, "timeout", f"no complete answer within {timeout_s:g} s", e2e_s=time.perf_counter() - started)
    rate = int(target.extra_body.get("sample_rate", 24_000))
    payload = bytes(audio)
    try:  # decoding is CPU work: off the event loop, so it does not delay other requests' clocks
        decoded = await asyncio.to_thread(decode, payload, response_format, rate)
    except Exception as exc:  # the server sent something no decoder accepts: count it, do not crash the run
        return failed(
            200, "undecodable_audio", describe_exception(exc), ttfa_s=clock.first_at, e2e_s=e2e, bytes=len(audio)
        )
    if len(decoded.samples) == 0:
        return failed(
            200, "empty_audio", "the response held no audio", ttfa_s=clock.first_at, e2e_s=e2e, bytes=len(audio)
        )
    playback = await asyncio.to_thread(listen, payload, clock.arrivals, response_format, rate, playback_buffer_s)
    return RequestResult(
        target.index,
        text,
        200,
        True,
        None,
        await first_audio(payload, clock, response_format),
        e2e,
        decoded.duration_s,
        len(decoded.samples),
        decoded.sample_rate,
        len(audio),
        payload if keep_audio else None,
        **heard_fields(playback),
    )


async def first_audio(payload: bytes, clock: PayloadClock, response_format: str) -> float | None:
    """TTFA of a complete response: for compressed formats the arrival of its first audio packet's first byte, past
    the container's headers (demuxed off the event loop), else the first byte of audio the clock saw (the first byte,
    where the container cannot be demuxed)."""
    if response_format in ("pcm", "wav"):
        return clock.first_at  # the clock already read past a wav header as the bytes came
    first = await asyncio.to_thread(first_audio_at, payload, clock.arrivals, response_format)
    return clock.first_at if first is None else first


async def _read_sse(response: httpx.Response, audio: bytearray, clock: PayloadClock) -> tuple[str, str | None] | None:
    """Collect the audio of an SSE stream; returns (error code, message) if the stream reported or had an error."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:].strip())
            kind = event.get("type")
            data = base64.b64decode(event.get("audio", ""), validate=True) if kind == "speech.audio.delta" else b""
        except (ValueError, AttributeError, TypeError):
            return "sse_malformed", f"malformed event: {line[:200]}"
        if kind == "speech.audio.delta":
            audio += data
            clock.add(data)
        elif kind == "error":
            error = event.get("error") or {}
            return error.get("code") or "sse_error", error.get("message")
        elif kind == "speech.audio.done":
            return None
    return "sse_incomplete", "the stream ended without speech.audio.done"
