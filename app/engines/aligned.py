"""Word timestamps for an engine that has no alignment of its own: its audio, timed afterwards by a forced aligner.

This engine sits between the sentence pipeline and the engine it fronts, so it sees one sentence per job (or the
whole text, where the engine speaks without the pipeline). A job that asks for word timestamps runs on the engine
without them. Every chunk is passed on as it comes, never held back; the samples are kept, and once the last chunk has
been passed on the aligner times the job's words (in its own threads, off the event loop). They follow in one empty
chunk, timed from that chunk's first sample, i.e. back in time into the audio already sent (see `AudioChunk`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

import numpy as np

from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    EngineError,
    EngineFront,
    SpeechEngine,
    SynthesisJob,
    UnsupportedParameter,
)
from app.text.words import WordTiming

log = logging.getLogger(__name__)


class WordAligner(Protocol):
    """Times the written words of a text in a clip of its speech."""

    name: str
    languages: tuple[str, ...]  # the `language`s it can time

    async def start(self) -> None: ...

    async def align(self, samples: np.ndarray, sample_rate: int, text: str) -> list[WordTiming]: ...

    async def close(self) -> None: ...


class ForcedAlignedEngine(EngineFront):
    """A SpeechEngine whose word timestamps come from a forced aligner run on another engine's audio. Without an
    aligner (`None`: its packages are not installed) word timestamps stay refused, and the refusal says why."""

    def __init__(self, engine: SpeechEngine, aligner: WordAligner | None, missing: str = "") -> None:
        super().__init__(engine)
        self.aligner = aligner
        self.missing = missing  # why there is no aligner (the refusal tells callers)
        self._aligner_s: float | None = None

    def start_phases(self) -> dict[str, float]:
        aligner = {} if self._aligner_s is None else {"aligner": self._aligner_s}
        return aligner | super().start_phases()

    async def start(self) -> None:
        if self.aligner is not None:
            started = time.perf_counter()
            await self.aligner.start()  # first: a second or so, and a broken aligner fails the start at once
            self._aligner_s = round(time.perf_counter() - started, 1)
        else:
            log.warning("no word aligner: word timestamps are refused on this engine", extra={"reason": self.missing})
        await self.inner.start()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            if self.aligner is not None:
                await self.aligner.close()

    def capabilities(self) -> EngineCapabilities:
        caps = self.inner.capabilities()
        if caps.word_timestamps:  # the engine's own alignment is better than any guess from its audio
            return caps
        if self.aligner is None:
            return dataclasses.replace(caps, word_timestamps_missing=self.missing)
        return dataclasses.replace(caps, word_timestamps=True, word_timestamps_languages=self.aligner.languages)

    def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        if not job.word_timestamps or self.inner.capabilities().word_timestamps:
            return self.inner.synthesize(job)
        return self._aligned(job)

    async def _aligned(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        if self.aligner is None:
            raise UnsupportedParameter("word_timestamps", f"'word_timestamps' is not supported: {self.missing}.")
        parts: list[np.ndarray] = []
        sample_rate = 0
        stream = self.inner.synthesize(dataclasses.replace(job, word_timestamps=False))
        try:
            async for chunk in stream:
                parts.append(chunk.samples)
                sample_rate = chunk.sample_rate
                yield chunk
        finally:
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()  # a caller that left: the engine's work ends now
        if not sample_rate:
            return  # no audio: nothing was spoken to time
        samples = np.concatenate(parts)
        started = time.perf_counter()
        try:
            words = await self.aligner.align(samples, sample_rate, job.text)
        except Exception as exc:
            log.exception("word alignment failed", extra={"request_id": job.trace_id or job.request_id})
            raise EngineError(f"word alignment failed: {exc}") from exc
        log.debug(
            "words aligned",
            extra={
                "request_id": job.trace_id or job.request_id,
                "job_id": job.request_id,
                "words": len(words),
                "audio_s": round(len(samples) / sample_rate, 3),
                "align_s": round(time.perf_counter() - started, 4),
            },
        )
        back_s = len(samples) / sample_rate  # this chunk starts after all of the audio the words are timed in
        yield AudioChunk(np.zeros(0, np.float32), sample_rate, words=tuple(word.shifted(-back_s) for word in words))
