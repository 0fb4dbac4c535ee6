"""Encoded audio on the HTTP wire: a plain chunked body, OpenAI's SSE events, and the streaming response that always
closes its audio. A stream that does not complete is never closed as if it had: the chunked body is cut (plain
audio) or ends with an `error` event (SSE)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.api.errors import to_api_error
from app.api.schemas import SpeechUsage
from app.engine_protocol import EngineUnavailable
from app.speech.encoding import EncodedAudio
from app.speech.errors import Failed, Stopped

# Set in the request's state by app.http_protocol when it aborts the connection of a client that stopped reading.
STALLED_STATE_KEY = "client_stalled"
# a WebSocket scope's state: what its connection holds that the client has not yet read (bytes), as a callable
UNSENT_STATE_KEY = "unsent_bytes"

log = logging.getLogger(__name__)


class StreamCut(Exception):
    """Ends a plain audio response on purpose, mid-body: the connection closes without the chunked terminator, so the
    client sees an incomplete body rather than a complete but shortened file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def audio_body(audio: EncodedAudio) -> AsyncIterator[bytes]:
    """The plain (non-SSE) body: a stream the server stops (timeout, drain) or whose engine goes away is cut, not
    closed as if complete."""
    try:
        async for data in audio.bytes():
            yield data
            audio.written()
    except Stopped as exc:
        raise StreamCut(exc.reason) from None
    except EngineUnavailable:
        # the engine's own log says why it went; this is not a fault of the request or of this server
        raise StreamCut("engine_unavailable") from None


class SpeechResponse(StreamingResponse):
    """A streaming response that always closes its audio, even when the client left before the first byte."""

    def __init__(self, content: AsyncIterator[bytes], audio: EncodedAudio, **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self.audio = audio

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def receive_noting_stalls() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and scope.get("state", {}).get(STALLED_STATE_KEY):
                self.audio.stop("client_stalled")  # the connection was aborted because its client stopped reading
            return message

        try:
            await super().__call__(scope, receive_noting_stalls, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.audio.close_if_never_streamed()


def sse_event(payload: dict[str, object]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


async def sse_events(audio: EncodedAudio, request_id: str) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE: `speech.audio.delta` events carrying base64 of response_format bytes, then
    `speech.audio.done` with usage. A request with `word_timestamps` also gets a `speech.audio.timestamps` event after
    each sentence's audio, its words timed in milliseconds from the start of the utterance. A failure after the
    stream started becomes an `error` event, then the end."""
    try:
        async for item in audio.events():
            if isinstance(item, bytes):
                yield sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(item).decode("ascii")})
                audio.written()
            else:
                yield sse_event({"type": "speech.audio.timestamps", "words": [word.as_dict() for word in item]})
    except asyncio.CancelledError:
        raise
    except Stopped as exc:
        yield sse_event({"type": "error", **to_api_error(exc).body()})
        return
    except EngineUnavailable as exc:
        # as the 503 a request gets before its first audio: the client may retry, here or on another replica
        log.warning("engine went away mid-stream", extra={"request_id": request_id, "detail": str(exc)})
        yield sse_event({"type": "error", **to_api_error(exc).body()})
        return
    except Exception:
        log.exception("synthesis failed mid-stream", extra={"request_id": request_id})
        yield sse_event({"type": "error", **to_api_error(Failed(request_id)).body()})
        return
    yield sse_event({"type": "speech.audio.done", "usage": SpeechUsage.of(audio.usage).model_dump()})
