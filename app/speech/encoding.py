"""Engine chunks to the bytes of a response format: resample to the requested rate, encode incrementally.

Resampling and encoding run in worker threads so the event loop only moves bytes; pcm and wav at the engine's own
rate, a clip and a cast, are converted on the loop, which costs it less than a thread hop. A stream ends one of six
ways, reported to `on_close` exactly once: completed, client_gone, client_stalled (the client read nothing for
SPEECH_CLIENT_STALL_TIMEOUT_S), timeout (SPEECH_REQUEST_TIMEOUT_S), drain (stopped by a graceful shutdown) or error.
A stream that does not complete is never closed as if it had: it raises (`Stopped`, or the engine's error), and each
transport says so to its client (`app.api.audio_stream`, `app.api.speech_stream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import numpy as np

from app.audio.encoders import StreamEncoder, create_encoder
from app.audio.formats import FORMATS, lead_samples
from app.audio.transforms import StreamResampler
from app.engine_protocol import AudioChunk, EngineUnavailable
from app.speech.errors import Failed, SpeechError, Stopped, Unavailable
from app.text.words import WordTiming
from app.timing import ListenerClock

log = logging.getLogger(__name__)

# Engine chunks (a whole sentence, for the embedded engine) are encoded in slices of this length, so the first bytes
# leave after encoding a quarter second of audio instead of a whole sentence (mp3 encodes ~4 ms per second of audio).
# A plain audio body converted on the loop takes each chunk whole: its bytes are the same, in one write, not eight.
ENCODE_SLICE_S = 0.25


@dataclass(slots=True)
class Usage:
    """What a response cost, summed over its chunks: its input tokens (of which `input_audio_tokens` are reference
    audio, the rest text), the tokens generated, and the samples of audio."""

    input_tokens: int = 0
    output_tokens: int = 0
    audio_samples: int = 0
    input_audio_tokens: int = 0

    @property
    def input_text_tokens(self) -> int:
        return self.input_tokens - self.input_audio_tokens

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class EncodedAudio:
    """One response's audio: the engine's chunks (the first already awaited, so failures before any audio become a
    proper error) turned into bytes of `response_format` at `sample_rate`."""

    def __init__(
        self,
        first: AudioChunk | None,
        rest: AsyncGenerator[AudioChunk],
        response_format: str,
        sample_rate: int,
        on_close: Callable[[str], Awaitable[None]],
        deadline: float | None = None,
        on_first_audio: Callable[[], None] | None = None,
        whole_file: bool = False,
        cancelled_as: Callable[[], str] | None = None,
        words_as_played: bool = True,
    ) -> None:
        self._first = first
        self._rest = rest
        self._sample_rate = sample_rate
        self._on_close = on_close
        self._on_first_audio = on_first_audio
        self._deadline = deadline  # loop time
        self._delivering_s = 0.0  # time its client took to take the audio handed out: not the engine's
        self._encoding_s = 0.0  # time spent encoding: the server's own, counted against the deadline
        self._resampler: StreamResampler | None = None
        self._encoder: StreamEncoder = create_encoder(response_format, sample_rate, whole_file)
        self._whole_file = whole_file  # answered once complete: its first audio is not its first bytes (`_streamed`)
        self._inline_format = not FORMATS[response_format].ffmpeg
        # what a decoder plays before the audio (mp3's and aac's encoder delay, where the container does not trim it):
        # words are timed as a player plays them
        self._lead_s = lead_samples(response_format, whole_file) / sample_rate if words_as_played else 0.0
        self._stop_reason: str | None = None
        # the outcome when a cancellation from outside ends it, where its caller knows better than "client_gone" (a
        # WebSocket stream that cut off a client not reading: client_stalled)
        self._cancelled_as = cancelled_as
        self._stopped = asyncio.Event()
        self._closed = False
        # The encoder is used from worker threads; a client that leaves cancels the await, not the thread, so the
        # encoder must not be closed while a thread still encodes into it (FFmpeg would crash the process).
        self._encoder_lock = threading.Lock()
        self._encoder_closed = False
        self.usage = Usage()
        # seconds of audio handed to the encoder: the bytes yielded so far carry the audio up to here (but what a
        # compressed format's encoder still holds back for its next frame)
        self.encoded_s = 0.0
        # told when each piece of audio reached the client (the time to uninterrupted audio); None: not timed
        self.listener: ListenerClock | None = None

    def first_audio_sent(self) -> None:
        """The first audio is on its way (a whole file, whose bytes exist only once all of it is encoded)."""
        if self._on_first_audio is not None:
            self._on_first_audio()
            self._on_first_audio = None

    def _streamed(self) -> None:
        """Bytes handed out were written: a stream's first audio, once (a whole file's is marked by `complete_file`
        when the file is complete, whatever its encoder handed out before)."""
        if not self._whole_file:
            self.first_audio_sent()

    def written(self) -> None:
        """The bytes last handed out have been written to the client: they carry the audio up to `encoded_s`."""
        if self.listener is not None:
            self.listener.wrote(time.perf_counter(), self.encoded_s)

    def stop(self, reason: str) -> None:
        """End the stream from outside (a drain): it stops waiting for the engine and ends as not completed."""
        self._stop_reason = reason
        self._stopped.set()

    def _convert(self, samples: np.ndarray, sample_rate: int) -> bytes:
        with self._encoder_lock:
            if self._encoder_closed:  # the stream ended while this thread waited for the lock
                return b""
            if self._resampler is None:
                self._resampler = StreamResampler(sample_rate, self._sample_rate)
            return self._encoder.encode(self._resampler.process(samples))

    def _finish(self) -> bytes:
        with self._encoder_lock:
            if self._encoder_closed:
                return b""
            tail = self._resampler.flush() if self._resampler is not None else np.zeros(0, np.float32)
            return self._encoder.encode(tail) + self._encoder.finish()

    def _close_encoder(self) -> None:
        with self._encoder_lock:  # waits for a slice being encoded right now (a few milliseconds at most)
            self._encoder_closed = True
            self._encoder.close()

    async def _next_chunk(self) -> AudioChunk | None:
        """The engine's next chunk, unless the deadline passes or the stream is stopped first."""
        loop = asyncio.get_running_loop()
        # the time its client took to read the audio handed out is not the engine's (a player reads as it plays):
        # credited, up to that audio's length, so that a client reading slower than real time still meets it
        credit = min(self._delivering_s, self.encoded_s)
        remaining = None if self._deadline is None else self._deadline + credit - loop.time()
        if remaining is not None and remaining <= 0:
            raise Stopped("timeout")
        pending = asyncio.ensure_future(anext(self._rest))
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            done, _ = await asyncio.wait({pending, stopped}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not pending.done():
                pending.cancel()
                # shielded: a cancelled request would otherwise cut the engine generator's own clean-up short
                with anyio.CancelScope(shield=True):
                    await asyncio.gather(pending, return_exceptions=True)
            elif not pending.cancelled():
                # answered in the very turn this wait was cancelled (the client left as the engine ended): read its
                # outcome, or the loop reports a StopAsyncIteration "never retrieved" when the task is collected
                pending.exception()
        if pending in done and not self._stopped.is_set():  # a stop wins over a chunk ready with it
            try:
                return pending.result()
            except StopAsyncIteration:
                return None
        raise Stopped(self._stop_reason or "timeout")

    async def _chunks(self) -> AsyncIterator[AudioChunk]:
        loop = asyncio.get_running_loop()
        chunk = self._first if self._first is not None else await self._next_chunk()
        while chunk is not None:
            handed, encoding = loop.time(), self._encoding_s
            yield chunk
            # encoded and written: what the client took to read it is the time but the encoder's (a whole file's
            # bytes go to no client until its end: none of it)
            self._delivering_s += max(0.0, loop.time() - handed - (self._encoding_s - encoding))
            chunk = await self._next_chunk()
        if self._stop_reason:  # the engine ended early because it was told to stop: not a completed stream
            raise Stopped(self._stop_reason)

    async def bytes(self) -> AsyncIterator[bytes]:
        """The encoded audio alone."""
        async with contextlib.aclosing(self.events(whole_chunks=True)) as events:
            async for item in events:
                if isinstance(item, bytes):
                    yield item

    def _inline(self, sample_rate: int) -> bool:
        """Whether a chunk at this rate is converted on the event loop (no resampling, a cheap format)."""
        return self._inline_format and sample_rate == self._sample_rate

    async def events(self, whole_chunks: bool = False) -> AsyncIterator[bytes | list[WordTiming]]:
        """The encoded audio, and after each chunk's audio the words it carried (jobs that asked for word
        timestamps), timed from the start of the utterance. `whole_chunks`: the caller only concatenates the bytes,
        so a chunk converted on the loop need not be cut into slices."""
        outcome = "error"
        try:
            async for chunk in self._chunks():
                offset_s = self.usage.audio_samples / chunk.sample_rate
                self.usage.input_tokens += chunk.input_tokens
                self.usage.output_tokens += chunk.output_tokens
                self.usage.input_audio_tokens += chunk.input_audio_tokens
                self.usage.audio_samples += len(chunk.samples)
                inline = self._inline(chunk.sample_rate)
                whole = inline and whole_chunks
                step = max(1, len(chunk.samples) if whole else int(chunk.sample_rate * ENCODE_SLICE_S))
                for start in range(0, len(chunk.samples), step):
                    piece = chunk.samples[start : start + step]
                    began = time.perf_counter()
                    if inline:
                        data = self._convert(piece, chunk.sample_rate)
                    else:
                        data = await asyncio.to_thread(self._convert, piece, chunk.sample_rate)
                    self._encoding_s += time.perf_counter() - began
                    self.encoded_s += len(piece) / chunk.sample_rate
                    if data:
                        yield data
                        self._streamed()  # resumed: the server has written those bytes
                    if self._stopped.is_set():  # stopped while its client read: not the chunk's other slices
                        raise Stopped(self._stop_reason or "drain")
                if chunk.words:
                    yield [word.shifted(offset_s + self._lead_s) for word in chunk.words]
            rate = self._sample_rate if self._resampler is None else self._resampler.source_rate
            tail = self._finish() if self._inline(rate) else await asyncio.to_thread(self._finish)
            if tail:
                yield tail
                self._streamed()  # a stream too short for its encoder's first frame: its first audio is here
            outcome = "completed"
        except Stopped as exc:
            outcome = exc.reason
            raise
        except (GeneratorExit, asyncio.CancelledError):
            outcome = self._stop_reason or (self._cancelled_as() if self._cancelled_as else "client_gone")
            raise
        finally:
            await self._close(outcome)

    async def _close(self, outcome: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_encoder()
        # The request's task may be cancelled (the client left): shield the clean-up so that the engine job is
        # closed and the slot released however the stream ended.
        with anyio.CancelScope(shield=True):
            try:
                await self._rest.aclose()
            finally:
                await self._on_close(outcome)

    async def close_if_never_streamed(self) -> None:
        """For a client that left before the body started: the body generator then never runs (and never reaches
        its clean-up), so the response calls this once it is done, whatever happened."""
        await self._close("client_gone")


@dataclass(frozen=True, slots=True)
class WholeFile:
    data: bytes
    words: list[WordTiming] | None  # None: the request did not ask for them


async def whole_file(audio: EncodedAudio, words: bool) -> WholeFile:
    """All of the audio as one complete file, and the words the engine timed in it (`stream: false`). Nothing has been
    sent yet, so a failure is still the client's to hear whole: `Stopped` (timeout, drain), `Unavailable` for an
    engine that went away; anything else propagates."""
    parts: list[bytes] = []
    timed: list[WordTiming] = []
    try:
        async for item in audio.events(whole_chunks=True):
            if isinstance(item, bytes):
                parts.append(item)
            else:
                timed.extend(item)
    except EngineUnavailable as exc:
        raise Unavailable(str(exc)) from exc
    return WholeFile(b"".join(parts), timed if words else None)


async def complete_file(audio: EncodedAudio, words: bool, request_id: str) -> WholeFile:
    """`whole_file` for an answer that is one file: the slot released and the engine told however it ended (even
    cancelled before the audio was first read), a failure other than a `SpeechError` logged and made `Failed`, and
    its TTFA taken once the file is complete and about to be answered."""
    try:
        file = await whole_file(audio, words)
    except SpeechError:
        raise
    except Exception as exc:
        log.exception("synthesis failed", extra={"request_id": request_id})
        raise Failed(request_id) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await audio.close_if_never_streamed()
    audio.first_audio_sent()
    return file
