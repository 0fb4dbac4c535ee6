"""The WebSocket's speech as vllm-omni 0.30's frames (`app.api.speech_stream`): per sentence `audio.start`, its audio
(binary frames, or with word_timestamps `audio.chunk` JSON frames and a trailing one with its words), `audio.done`;
per utterance `session.done`; `error`; and the close codes that end a session."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, NoReturn

from fastapi import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected

from app.api.errors import ApiError, to_api_error, websocket_error_message
from app.audio.formats import DEFAULT_SAMPLE_RATE, decoded_sample_rate
from app.speech.errors import Full, SpeechError, Stopped
from app.speech.utterances import Sentence
from app.text.words import WordTiming

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server drains
CLOSE_POLICY = 1008  # no valid key, or no session.config in time
CLOSE_NOT_UTF8 = 1007  # a text frame that is not UTF-8: uvicorn closes the session itself
CLOSE_TOO_BIG = 1009  # a message over uvicorn's size cap (SPEECH_MAX_BODY_BYTES): uvicorn closes the session itself
CLOSE_TRY_AGAIN = 1013  # the server is full
CLOSE_INTERNAL_ERROR = 1011  # the session failed for a reason of the server's own


class SessionClosed(Exception):
    """The session ends: the code to close with (the client may already be gone)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.asynccontextmanager
async def gone_is_closed() -> AsyncIterator[None]:
    """A send to a client that has gone ends the session as its leaving does (`SessionClosed(-1)`), not as a failure
    of the server's: Starlette raises WebSocketDisconnect from the first send whose connection is lost, and
    WebSocketDisconnected (a RuntimeError) from every send after it (one waiting on the lock meanwhile)."""
    try:
        yield
    except (WebSocketDisconnect, WebSocketDisconnected):
        raise SessionClosed(-1) from None


class Frames:
    """The speech as vllm-omni 0.30's frames (a `SpeechSink`), and every other message to the client: one writer at
    a time. With word_timestamps a sentence's audio travels as numbered `audio.chunk` frames, base64 in JSON."""

    def __init__(self, websocket: WebSocket) -> None:
        self.ws = websocket
        self.lock = asyncio.Lock()
        self.chunks: int | None = None  # the audio.chunk frames of the sentence being delivered; None: binary frames
        self.drain_told = False  # the drain's end of the session was told (`drain_ended`)

    async def send(self, message: dict[str, Any]) -> None:
        async with self.lock, gone_is_closed():
            await self.ws.send_text(json.dumps(message))

    async def send_error(self, exc: Exception) -> None:
        await self.send(websocket_error_message(to_api_error(exc)))

    def error_code(self, error: SpeechError) -> str:
        return to_api_error(error).code or "error"

    async def sentence_started(self, sentence: Sentence) -> None:
        options = sentence.voice.options
        self.chunks = 0 if options.word_timestamps else None
        await self.send(
            {
                **self.indices(sentence, "audio.start"),
                "sentence_text": sentence.text,
                "format": options.response_format,
                "sample_rate": self.sample_rate(sentence),
                **({"word_timestamps": True} if options.word_timestamps else {}),
            }
        )

    @staticmethod
    def sample_rate(sentence: Sentence) -> int:
        """The rate the sentence's audio decodes at, which is not always the one asked (opus: 48 kHz)."""
        options = sentence.voice.options
        return decoded_sample_rate(options.response_format, options.sample_rate or DEFAULT_SAMPLE_RATE)

    async def audio(self, sentence: Sentence, data: bytes, start_s: float, end_s: float) -> None:
        if self.chunks is not None:
            await self.send(self.chunk(sentence, data, start_s, end_s, None))
        else:
            async with self.lock, gone_is_closed():
                await self.ws.send_bytes(data)

    async def sentence_spoken(
        self, sentence: Sentence, words: list[WordTiming], duration_s: float, offset_s: float
    ) -> None:
        if self.chunks is not None:  # vllm-omni's trailing frame: no audio, the whole sentence's words
            trailer = self.chunk(sentence, b"", 0.0, duration_s, words)
            await self.send({**trailer, "utterance_offset_ms": round(offset_s * 1000)})

    def chunk(
        self, sentence: Sentence, data: bytes, start_s: float, end_s: float, words: list[WordTiming] | None
    ) -> dict[str, Any]:
        assert self.chunks is not None
        self.chunks += 1
        return {
            **self.indices(sentence, "audio.chunk"),
            "chunk_id": self.chunks - 1,
            "chunk_start_ms": round(start_s * 1000),
            "chunk_end_ms": round(end_s * 1000),
            "sample_rate": self.sample_rate(sentence),
            "audio_b64": base64.b64encode(data).decode("ascii"),
            "timestamps": None if words is None else [word.as_dict() for word in words],
        }

    async def sentence_ended(self, sentence: Sentence, audio_bytes: int, error: bool) -> None:
        # every audio.start gets its audio.done, as from vllm-omni, with `error` set when its audio did not end
        await self.send({**self.indices(sentence, "audio.done"), "total_bytes": audio_bytes, "error": error})

    @staticmethod
    def indices(sentence: Sentence, kind: str) -> dict[str, Any]:
        return {"type": kind, "utterance_index": sentence.utterance, "sentence_index": sentence.index}

    async def error(self, error: SpeechError) -> None:
        if isinstance(error, Stopped) and error.by_drain:  # a sentence refused its slot, or stopped, by a drain
            await self.drain_ended(error)
        told = to_api_error(error)
        if told.param == "input":  # a sentence's text: what this transport calls `text`
            told.param = "text"
        await self.send(websocket_error_message(told))
        if isinstance(error, Full):
            raise SessionClosed(CLOSE_TRY_AGAIN)

    async def drain_ended(self, error: SpeechError) -> NoReturn:
        """A drain out of time ends the session: told once, by whichever comes first, a sentence's refusal or stop
        or the session's own stop, then 1001. Told under the lock: the other waits until it has been written (else
        it could close the session while the first waited on a client reading slowly, and nothing was told)."""
        async with self.lock, gone_is_closed():
            if not self.drain_told:
                self.drain_told = True
                await self.ws.send_text(json.dumps(websocket_error_message(to_api_error(error))))
        raise SessionClosed(CLOSE_GOING_AWAY)

    async def utterance_done(self, utterance: int, sentences: int, words: list[WordTiming]) -> None:
        timed = {"timestamps": [word.as_dict() for word in words]} if words else {}
        await self.send({"type": "session.done", "utterance_index": utterance, "total_sentences": sentences, **timed})

    async def close_with(self, error: ApiError, code: int) -> None:
        """One `error`, then the close."""
        await self.send(websocket_error_message(error))
        raise SessionClosed(code)
