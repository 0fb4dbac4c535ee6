"""Engine chunks to response bytes: resample to the requested rate, encode incrementally, frame as SSE if asked.

Resampling and encoding run in worker threads so the event loop only moves bytes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from app.api.errors import ApiError, error_body
from app.audio.encoders import StreamEncoder, create_encoder
from app.audio.transforms import StreamResampler
from app.engines.base import AudioChunk

log = logging.getLogger(__name__)

# Engine chunks (a whole sentence, for the embedded engine) are encoded in slices of this length, so the first bytes
# leave after encoding a quarter second of audio instead of a whole sentence (mp3 encodes ~4 ms per second of audio).
ENCODE_SLICE_S = 0.25


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    audio_samples: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }


class EncodedAudio:
    """One response's audio: the engine's chunks (the first already awaited, so failures before any audio become a
    proper HTTP error) turned into bytes of `response_format` at `sample_rate`. `on_close` runs exactly once, however
    the stream ends (finished, failed, or the client went away), and is where the engine job is aborted."""

    def __init__(
        self,
        first: AudioChunk | None,
        rest: AsyncIterator[AudioChunk],
        response_format: str,
        sample_rate: int,
        on_close: Callable[[bool], Awaitable[None]],
    ) -> None:
        self._first = first
        self._rest = rest
        self._response_format = response_format
        self._sample_rate = sample_rate
        self._on_close = on_close
        self._resampler: StreamResampler | None = None
        self._encoder: StreamEncoder = create_encoder(response_format, sample_rate)
        self.usage = Usage()

    def _convert(self, samples: np.ndarray, sample_rate: int) -> bytes:
        if self._resampler is None:
            self._resampler = StreamResampler(sample_rate, self._sample_rate)
        return self._encoder.encode(self._resampler.process(samples))

    def _finish(self) -> bytes:
        tail = self._resampler.flush() if self._resampler is not None else np.zeros(0, np.float32)
        return self._encoder.encode(tail) + self._encoder.finish()

    async def _chunks(self) -> AsyncIterator[AudioChunk]:
        if self._first is not None:
            yield self._first
        async for chunk in self._rest:
            yield chunk

    async def bytes(self) -> AsyncIterator[bytes]:
        completed = False
        try:
            async for chunk in self._chunks():
                self.usage.input_tokens += chunk.input_tokens
                self.usage.output_tokens += chunk.output_tokens
                self.usage.audio_samples += len(chunk.samples)
                step = max(1, int(chunk.sample_rate * ENCODE_SLICE_S))
                for start in range(0, len(chunk.samples), step):
                    data = await asyncio.to_thread(
                        self._convert, chunk.samples[start : start + step], chunk.sample_rate
                    )
                    if data:
                        yield data
            tail = await asyncio.to_thread(self._finish)
            if tail:
                yield tail
            completed = True
        finally:
            self._encoder.close()
            await self._rest.aclose()  # type: ignore[attr-defined]
            await self._on_close(completed)


def sse_event(payload: dict[str, object]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


async def sse_events(audio: EncodedAudio, request_id: str) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE: `speech.audio.delta` events carrying base64 of response_format bytes, then
    `speech.audio.done` with usage. A failure after the stream started becomes an `error` event, then the end."""
    try:
        async for data in audio.bytes():
            yield sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
    except asyncio.CancelledError:
        raise
    except ApiError as exc:
        yield sse_event({"type": "error", **exc.body()})
        return
    except Exception:
        log.exception("synthesis failed mid-stream", extra={"request_id": request_id})
        message = f"The server had an error while processing your request. Request id: {request_id}."
        yield sse_event({"type": "error", **error_body(message, type="server_error", code="internal_error")})
        return
    yield sse_event({"type": "speech.audio.done", "usage": audio.usage.as_dict()})
