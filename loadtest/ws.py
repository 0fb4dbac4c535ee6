"""One utterance over WS /v1/audio/speech/stream, its text written token by token as an LLM writes it, timed the way
a listener feels it.

The text is cut into tokens (a token is a word with the whitespace that follows it; concatenated, the tokens are the
text) and token i is sent at start + i / rate; a token due while the client is still connecting goes as soon as it
can, as a client buffering an LLM's output would send it. One connection per utterance: `session.config`, the tokens
as `input.text`, `input.done`, then everything up to `session.done`, then `session.close`.

TTFA is measured from the send of the token that completed the first sentence as written: the one holding the last
character of the first `audio.start`'s `sentence_text` (the server's own cut, so the client needs no sentence splitter
of its own). It ends at the first byte of that sentence's audio payload (for wav, past its header; for compressed
formats, of its first audio packet, past the container's headers, as over HTTP). It therefore includes the time the
server waits to be sure the sentence is over: until the next word begins (one token later, 1 / rate), or its idle gap
(SPEECH_WS_SENTENCE_IDLE_S) or `input.done` when no word follows. The server's own metric starts at that next word, so
it reads lower by about one token interval.

The listener (`loadtest.playback.listen_sentences`) hears the sentences back to back from the first byte of audio:
silence where the playhead reaches the end of a sentence before the next one's audio is there is a gap (one figure per
join between sentences, 0 when the next was in time); running dry inside a sentence is a stall.

With `word_timestamps` (in --extra-body) the server sends a sentence's audio as JSON `audio.chunk` frames instead of
binary ones: their `audio_b64`, decoded, is the sentence's payload, clocked at each frame's arrival as a binary frame
would be; the sentence's trailing frame carries no audio, only its words' `timestamps`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from loadtest.audio import DecodedAudio, decode
from loadtest.measure import PayloadClock, RequestResult, describe_exception, heard_fields
from loadtest.measure import first_audio as first_audio_of
from loadtest.playback import listen_sentences
from loadtest.targets import Target

UPGRADED = 101  # the status of an utterance that got through the WebSocket handshake


@dataclass
class UtteranceResult(RequestResult):
    """A RequestResult whose request is an utterance of streamed text: `ttfa_s` counts from the first complete
    sentence, `e2e_s` from the first token due to `session.done`, and the playback's stalls are those inside
    sentences (the waits between sentences are `gaps_s`)."""

    connect_s: float | None = None  # the WebSocket handshake
    text_send_s: float | None = None  # from the first token due to input.done sent
    first_sentence_sent_s: float | None = None  # when the token completing the first sentence was sent
    sentences: int = 0  # sentences spoken (audio.done received)
    timestamped_sentences: int = 0  # sentences whose words' timestamps came (word_timestamps)
    gaps_s: list[float] = field(default_factory=list)  # silence at each join between sentences
    sentence_audio: list[bytes] | None = field(default=None, repr=False)  # each sentence's file, when kept

    @property
    def kept_audio(self) -> bool:
        return self.sentence_audio is not None

    def decode_audio(self, response_format: str) -> DecodedAudio:
        return decode_sentences(self.sentence_audio or [], response_format, self.sample_rate or 24_000)


class ProtocolError(Exception):
    """The server broke the endpoint's message sequence (or lost text)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Sentence:
    text: str
    clock: PayloadClock
    payload: bytearray = field(default_factory=bytearray)
    done: bool = False
    timestamped: bool = False  # an audio.chunk frame brought its words' timestamps


@dataclass
class Received:
    """What the server sent for one utterance."""

    sentences: list[Sentence] = field(default_factory=list)
    sample_rate: int | None = None
    total_sentences: int | None = None
    done_at: float | None = None
    error: dict[str, Any] | None = None


def tokens(text: str) -> list[str]:
    """Words with the whitespace after each (leading whitespace goes with the first): together, exactly `text`."""
    pieces = re.findall(r"\s*\S+\s*", text)
    return pieces or ([text] if text else [])


def _compact(text: str) -> str:
    return "".join(text.split())


def completing_token(sent: Sequence[str], sentence: str) -> int | None:
    """Index of the token whose send completed `sentence`, the first sentence of the text these tokens make up
    (whitespace aside, as the server normalises it); None if the text does not begin with it."""
    wanted = _compact(sentence)
    written = ""
    for index, token in enumerate(sent):
        written += _compact(token)
        if len(written) >= len(wanted):
            return index if written.startswith(wanted) else None
    return None


def check_sentences(text: str, spoken: Sequence[str], total: int | None) -> None:
    """Every word sent was spoken once, in order, and session.done counts the sentences that came."""
    if total is not None and total != len(spoken):
        raise ProtocolError(
            "sentence_count_mismatch", f"session.done says {total} sentences, {len(spoken)} were spoken"
        )
    if _compact("".join(spoken)) != _compact(text):
        raise ProtocolError("text_mismatch", f"the sentences spoken {list(spoken)!r} are not the text sent {text!r}")


def decode_sentences(payloads: Sequence[bytes], response_format: str, pcm_rate: int) -> DecodedAudio:
    """The utterance's audio: each sentence's file decoded on its own (each is a complete file), joined."""
    parts = [decode(payload, response_format, pcm_rate) for payload in payloads]
    if not parts:
        return DecodedAudio(np.zeros(0, np.float32), pcm_rate, 1, response_format)
    samples = np.concatenate([part.samples for part in parts])
    return DecodedAudio(samples, parts[0].sample_rate, parts[0].channels, parts[0].codec)


def _open_sentence(received: Received) -> Sentence:
    if not received.sentences or received.sentences[-1].done:
        raise ProtocolError("protocol_error", "audio arrived outside audio.start ... audio.done")
    return received.sentences[-1]


def _chunk_audio(event: dict[str, Any]) -> bytes:
    """The audio of an `audio.chunk` frame (b"" for a sentence's trailing frame, which carries only its words)."""
    try:
        return base64.b64decode(event.get("audio_b64") or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ProtocolError("protocol_error", "an audio.chunk's audio_b64 is not base64") from None


async def _receive(ws: ClientConnection, started: float, wav: bool, received: Received) -> None:
    """Read messages up to session.done (or the first error)."""
    while True:
        message = await ws.recv()  # raises ConnectionClosed when the server closes before session.done
        if isinstance(message, bytes):
            sentence = _open_sentence(received)
            sentence.payload += message
            sentence.clock.add(message)
            continue
        try:
            event = json.loads(message)
            kind = event.get("type")
        except (ValueError, AttributeError):
            raise ProtocolError("protocol_error", f"malformed message: {message[:200]}") from None
        if kind == "audio.start":
            received.sample_rate = received.sample_rate or event.get("sample_rate")
            received.sentences.append(Sentence(str(event.get("sentence_text", "")), PayloadClock(started, wav)))
        elif kind == "audio.chunk":
            sentence = _open_sentence(received)
            data = _chunk_audio(event)
            sentence.payload += data
            sentence.clock.add(data)  # an empty trailing frame adds no audio, so no arrival either
            sentence.timestamped |= isinstance(event.get("timestamps"), list)
        elif kind == "audio.done":
            if not received.sentences or received.sentences[-1].done:
                raise ProtocolError("protocol_error", "audio.done without audio.start")
            sentence = received.sentences[-1]
            sentence.done = True
            if event.get("total_bytes") != len(sentence.payload):
                raise ProtocolError(
                    "protocol_error",
                    f"audio.done says {event.get('total_bytes')} bytes, {len(sentence.payload)} arrived",
                )
        elif kind == "session.done":
            received.total_sentences = event.get("total_sentences")
            received.done_at = time.perf_counter() - started
            return
        elif kind == "error":
            received.error = event
            return


async def _send_text(
    ws: ClientConnection, text_tokens: list[str], due_at: float, rate: float, receiving: asyncio.Task[None]
) -> list[float] | None:
    """Send the tokens on their schedule; returns each one's send time (perf_counter), or None when the server ended
    the utterance first (an error, a closed connection)."""
    sent_at: list[float] = []
    for index, token in enumerate(text_tokens):
        delay = due_at + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.wait({receiving}, timeout=delay)
        if receiving.done():
            return None
        sent_at.append(time.perf_counter())
        await ws.send(json.dumps({"type": "input.text", "text": token}))
    return sent_at


async def _converse(
    ws: ClientConnection, config: dict[str, Any], text_tokens: list[str], started: float, rate: float, wav: bool
) -> tuple[Received, list[float] | None, float]:
    """One utterance on an open connection: what came back, each token's send time and when input.done went."""
    received = Received()
    # listening before the config goes: a server that refuses the session at once (a wrong key) says why, then
    # closes, maybe before the client has sent anything
    receiving = asyncio.create_task(_receive(ws, started, wav, received))
    sent_at, text_done = None, time.perf_counter()
    try:
        with contextlib.suppress(ConnectionClosed):  # the server closed first: what it said is in `receiving`
            await ws.send(json.dumps(config))
            sent_at = await _send_text(ws, text_tokens, started, rate, receiving)
            if sent_at is not None:
                await ws.send(json.dumps({"type": "input.done"}))
                text_done = time.perf_counter()
        await receiving
    finally:
        receiving.cancel()
        await asyncio.gather(receiving, return_exceptions=True)
    if received.error is None:
        if sent_at is None:
            raise ProtocolError("protocol_error", "the server ended the utterance before its text was sent")
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "session.close"}))
    return received, sent_at, text_done


async def measure_utterance(
    target: Target,
    text: str,
    response_format: str,
    text_rate: float,
    keep_audio: bool,
    scheduled_at: float | None = None,
    playback_buffer_s: float = 0.0,
    timeout_s: float = 300.0,
) -> UtteranceResult:
    """`scheduled_at` (open loop): the planned start, which the token schedule and E2E count from."""
    started = time.perf_counter() if scheduled_at is None else scheduled_at
    text_tokens = tokens(text)
    status, connect_s = 0, None

    def failed(code: str, message: str | None) -> UtteranceResult:
        return UtteranceResult(
            target.index, text, status, False, code, e2e_s=time.perf_counter() - started, error_message=message,
            connect_s=connect_s,
        )  # fmt: skip

    config = {"type": "session.config", "model": target.model, "voice": target.voice}
    config |= {"response_format": response_format, **target.extra_body}
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(target.next_stream_url(), additional_headers=target.headers, max_size=None) as ws:
                status, connect_s = UPGRADED, time.perf_counter() - started
                received, sent_at, text_done = await _converse(
                    ws, config, text_tokens, started, text_rate, response_format == "wav"
                )
    except ProtocolError as exc:
        return failed(exc.code, str(exc))
    except InvalidStatus as exc:
        status = exc.response.status_code
        return failed(f"handshake_{status}", exc.response.body.decode("utf-8", "replace")[:300] or str(exc))
    except ConnectionClosed as exc:
        closed = exc.rcvd.code if exc.rcvd is not None else "abnormally"
        return failed(f"connection_closed_{closed}", describe_exception(exc))
    except TimeoutError:
        return failed("timeout", f"no session.done within {timeout_s:g} s")
    except (OSError, WebSocketException) as exc:
        return failed(f"client_{type(exc).__name__}", describe_exception(exc))
    if received.error is not None:
        return failed(str(received.error.get("code") or "error"), received.error.get("message"))
    assert sent_at is not None
    return await _assess(
        target, text, text_tokens, sent_at, text_done, started, received, response_format, keep_audio, connect_s,
        playback_buffer_s,
    )  # fmt: skip


async def _assess(
    target: Target,
    text: str,
    text_tokens: list[str],
    sent_at: list[float],
    text_done: float,
    started: float,
    received: Received,
    response_format: str,
    keep_audio: bool,
    connect_s: float | None,
    playback_buffer_s: float,
) -> UtteranceResult:
    """An utterance the server finished: its text checked against what was spoken, its audio decoded and heard."""
    sentences = received.sentences
    e2e = received.done_at

    def failed(code: str, message: str) -> UtteranceResult:
        return UtteranceResult(
            target.index, text, UPGRADED, False, code, e2e_s=e2e, error_message=message, connect_s=connect_s,
            sentences=len(sentences),
        )  # fmt: skip

    try:
        check_sentences(text, [s.text for s in sentences], received.total_sentences)
    except ProtocolError as exc:
        return failed(exc.code, str(exc))
    if not sentences:
        return failed("empty_audio", "no sentence was spoken")
    first = completing_token(text_tokens, sentences[0].text)
    payloads = [bytes(s.payload) for s in sentences]
    first_audio = await first_audio_of(payloads[0], sentences[0].clock, response_format)
    if first is None or first_audio is None:
        return failed("empty_audio", "the first sentence brought no audio")
    rate = int(received.sample_rate or target.extra_body.get("sample_rate", 24_000))
    try:  # decoding is CPU work: off the event loop, so it does not delay other utterances' clocks
        decoded = await asyncio.to_thread(decode_sentences, payloads, response_format, rate)
    except Exception as exc:  # the server sent something no decoder accepts: count it, do not crash the run
        return failed("undecodable_audio", describe_exception(exc))
    if len(decoded.samples) == 0:
        return failed("empty_audio", "the utterance held no audio")
    heard = await asyncio.to_thread(
        listen_sentences,
        [(payload, s.clock.arrivals) for payload, s in zip(payloads, sentences, strict=True)],
        response_format,
        rate,
        playback_buffer_s,
    )
    first_sent = sent_at[first] - started
    return UtteranceResult(
        target.index,
        text,
        UPGRADED,
        True,
        None,
        first_audio - first_sent,
        e2e,
        decoded.duration_s,
        len(decoded.samples),
        decoded.sample_rate,
        sum(len(p) for p in payloads),
        **heard_fields(None if heard is None else heard.playback, origin_s=first_sent),
        connect_s=connect_s,
        text_send_s=text_done - started,
        first_sentence_sent_s=first_sent,
        sentences=len(sentences),
        timestamped_sentences=sum(s.timestamped for s in sentences),
        gaps_s=[] if heard is None else list(heard.gaps_s),
        sentence_audio=payloads if keep_audio else None,
    )
