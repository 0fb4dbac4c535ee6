"""Sentence scheduling: long text spoken sentence by sentence by any engine, with seamless joins; streamed text cut
into the pieces whose end is certain; and the one look-ahead both use (`Ahead`).

Text is cut into sentences (`app.text.sentences`); sentence n streams to the caller while sentence n + 1 is already
being synthesized, so the first audio leaves after one sentence and the rest follows without gaps in delivery. Every
piece of the input is spoken: nothing is dropped. Engines pad each utterance with silence (hibari: ~0.3 s before,
~0.4 s after), which would put a second of dead air between sentences; the joiner trims the silent edges to a
natural pause (longer after a full stop than at a clause cut) and fades the cut points, so joins neither drag nor
click. A job that `continues` an utterance (its text is the next sentence of audio already being heard) is joined as a
later sentence from its first one on.

Both transports speak sentence n while sentence n + 1 is synthesized ahead of it, through `Ahead`: the sentence
pipeline (every request whose engine it fronts) starts n + 1 as soon as n sounds, inside one admitted request; the
WebSocket, whose sentences are each a request holding a slot, starts n + 1 once n's synthesis has ended (a session
never queues behind itself), while n is still being sent and played.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Generic, Literal, TypeVar

import numpy as np

from app.engine_protocol import (
    AudioChunk,
    EngineFront,
    ReadsAhead,
    SpeechEngine,
    SynthesisJob,
    UnsupportedParameter,
)
from app.text.sentences import complete_sentences, is_speakable, split_sentences, with_silent_words_attached
from app.text.words import WordTiming

log = logging.getLogger(__name__)

SILENCE_THRESHOLD = 0.01  # |sample| below this (-40 dBFS) counts as silence at an utterance's edges
QUIET_FLOOR = 0.001  # an utterance whose peak stays under the threshold but above this is quiet speech, not silence
LEAD_S = 0.05  # silence kept before a sentence's first sound
PAUSE_AFTER_SENTENCE_S = 0.25
PAUSE_AFTER_CLAUSE_S = 0.12  # a long sentence cut at a comma or semicolon
FADE_S = 0.005
_END = object()

T = TypeVar("T")
Granularity = Literal["none", "sentence", "clause"]
# vllm-omni 0.30's clause marks, Latin and CJK: a clause ends at one of them followed by more text
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+|(?<=[，、；：])")


def complete_units(text: str, max_chars: int, granularity: Granularity, final: bool = False) -> tuple[list[str], str]:
    """The pieces of arriving text whose end is certain, and the rest, cut as `split_granularity` asks: whole
    sentences; also clauses (`clause`); nothing before input.done (`none`, which `final_units` speaks whole). The
    rest ends with its blanks settled (`settled_blanks`)."""
    if granularity == "none":
        return [], settled_blanks(text)
    sentences, rest = complete_sentences(text, max_chars, final=final)
    if granularity == "sentence":
        return sentences, settled_blanks(rest)
    clauses = [clause for sentence in sentences for clause in _CLAUSE_END.split(sentence)]
    ends = [match.end() for match in _CLAUSE_END.finditer(rest)]
    # a last clause with nothing to say ("—", "😀,") waits for the next, as such a last sentence does
    while ends and not is_speakable(rest[ends[-2] if len(ends) > 1 else 0 : ends[-1]]):
        ends.pop()
    cut = ends[-1] if ends else 0
    done = _CLAUSE_END.split(rest[:cut]) if cut else []
    # one with nothing to say inside goes with a neighbour, as a sentence's does: no request of its own to be refused
    # (the text after a sentence's end begins with the space after it: not the clause's)
    pieces = [clause.strip() for clause in clauses + done if clause.strip()]
    return with_silent_words_attached(pieces, max_chars), settled_blanks(rest[cut:])


def settled_blanks(rest: str) -> str:
    """Text left waiting with the blanks after its last word cut to what they say: that the word ended (a space),
    or where a line breaks (a line break; two: a paragraph's). The text that waits is scanned again at each message
    and bounded by its words: kept whole, blanks streamed after them (an LLM stuck writing spaces) piled up without
    end, each message costing more than the last."""
    words = rest.rstrip()
    blanks = len(rest) - len(words)
    if blanks <= 2:
        return rest
    breaks = rest.count("\n", len(words))
    return words + ("\n" * min(breaks, 2) if breaks else " ")


def final_units(text: str, max_chars: int, granularity: Granularity) -> list[str]:
    """Every piece of the text at input.done: `none` speaks it as one request, as vllm-omni does, where it holds
    anything to speak (else none: the utterance is refused as having nothing to speak)."""
    if granularity == "none":
        return [text.strip()] if is_speakable(text) else []
    units, rest = complete_units(text, max_chars, granularity, final=True)
    return [*units, *split_sentences(rest, max_chars)]


class StreamCancelled(Exception):
    """A stream read ahead was cancelled before its end (by whoever cancelled its task)."""


class Ahead(Generic[T]):
    """A stream run ahead of its reader, the one look-ahead of sentence scheduling: a task reads the stream that
    `open` gives (once `after` has ended, when given) into a queue as fast as it comes, and the reader gets its items
    in order, with an exception where the stream raised it. `cancel` stops it however far it got."""

    def __init__(self, open: Callable[[], AsyncIterator[T]], after: Ahead[object] | None = None) -> None:
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(open, after))
        # cancelled by whoever cancelled it, perhaps before it began: a reader still waiting hears that the stream
        # ended early, rather than waiting for ever
        self.task.add_done_callback(self._told_if_cancelled)

    def _told_if_cancelled(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self._queue.put_nowait(StreamCancelled("the stream was cancelled before its end"))

    async def _run(self, open: Callable[[], AsyncIterator[T]], after: Ahead[object] | None) -> None:
        stream: AsyncIterator[T] | None = None
        try:
            if after is not None:
                await asyncio.wait({after.task})
            stream = open()
            async for item in stream:
                self._queue.put_nowait(item)
            self._queue.put_nowait(_END)
        except Exception as exc:  # delivered in order, where the stream's next item would have been
            self._queue.put_nowait(exc)
        finally:
            if stream is not None:
                await _aclose(stream)

    async def __aiter__(self) -> AsyncIterator[T]:
        while (item := await self._queue.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]

    async def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


def pause_after(piece: str) -> float:
    tail = piece.rstrip("\"'”’)]» ")
    if tail.endswith((".", "!", "?", "…", "。", "！", "？")):
        return PAUSE_AFTER_SENTENCE_S
    if tail.endswith((",", ";", ":", "—", "–", "，", "；", "：", "、")):
        return PAUSE_AFTER_CLAUSE_S
    return 0.0  # cut inside a clause (a very long one): no audible pause at all


class SentenceJoiner:
    """Trims one utterance's silent edges as it streams: leading silence down to LEAD_S, trailing silence down to
    `pause_s`. Sound passes through at once; only a trailing run of silence is held until more sound (or the end)
    shows whether it is a pause inside the sentence or the tail."""

    def __init__(self, sample_rate: int, pause_s: float, first: bool, speed: float = 1.0) -> None:
        self.sample_rate = sample_rate
        # the lead and the pause at the request's speed, as everything else it says: at 2.0 half as long
        self._lead = int(LEAD_S / speed * sample_rate)
        self._pause = int(pause_s / speed * sample_rate)
        self._fade = max(1, int(FADE_S * sample_rate))
        self._first = first
        self._started = False  # a sound has been seen
        self._held = np.zeros(0, np.float32)
        self.dropped = 0  # leading samples cut: the sentence's audio starts this much later than the engine's

    def _fade_in(self, samples: np.ndarray) -> np.ndarray:
        n = min(self._fade, len(samples))
        samples = samples.copy()
        samples[:n] *= np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
        return samples

    def feed(self, samples: np.ndarray) -> np.ndarray:
        samples = np.concatenate([self._held, np.asarray(samples, dtype=np.float32)])
        loud = np.flatnonzero(np.abs(samples) >= SILENCE_THRESHOLD)
        if not self._started:
            if not len(loud):
                # all silence so far: the first sentence keeps its silence as it comes (the caller hears the stream
                # start at once); later ones hold it, to be trimmed to the lead
                self._held = samples if not self._first else np.zeros(0, np.float32)
                return samples if self._first else np.zeros(0, np.float32)
            self._started = True
            start = 0 if self._first else max(0, loud[0] - self._lead)
            self.dropped = start
            samples = samples[start:] if self._first else self._fade_in(samples[start:])
            loud = loud - start
        end = loud[-1] + 1 if len(loud) else 0
        self._held = samples[end:]
        return samples[:end]

    def finish(self) -> np.ndarray:
        """The end of the utterance: its trailing silence, cut to the pause and faded at the cut. An utterance that
        never rose above the silence threshold (a very quiet voice) is given back whole, never dropped; one of
        silence throughout becomes its lead and pause."""
        if not self._started and len(self._held) and np.abs(self._held).max() > QUIET_FLOOR:
            whole, self._held = self._held, np.zeros(0, np.float32)
            return whole
        # an utterance of silence throughout still takes its lead and pause (and a streamed sentence on its own is
        # never an empty file)
        tail = self._held[: self._pause] if self._started else self._held[: self._lead + self._pause]
        self._held = np.zeros(0, np.float32)
        if len(tail):
            n = min(self._fade, len(tail))
            tail = tail.copy()
            tail[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
        return tail


class SentencePipeline(EngineFront):
    """A SpeechEngine that fronts another one with sentence splitting, look-ahead and seamless joins."""

    def __init__(self, engine: SpeechEngine, max_chars: int) -> None:
        super().__init__(engine)
        self.max_chars = max_chars
        self._sentence_ids: dict[str, list[str]] = {}  # a job's id -> its sentences' ids, while it runs

    async def abort(self, request_id: str) -> None:
        for sentence_id in self._sentence_ids.get(request_id, [request_id]):
            await self.inner.abort(sentence_id)

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        pieces = split_sentences(job.text, self.max_chars)
        if not pieces:
            raise UnsupportedParameter("input", "'input' contains nothing that can be spoken.")
        if isinstance(self.inner, ReadsAhead) and (unreadable := await self.inner.unreadable(pieces)) is not None:
            # refused before the first audio: a later sentence must never cut a stream that already started
            raise UnsupportedParameter("input", f"This voice cannot read {unreadable[:80]!r}.")
        if job.max_new_tokens is not None and len(pieces) > 1:
            pieces = [job.text]  # a token budget applies to the whole text: do not multiply it by the sentences
        jobs = [
            dataclasses.replace(
                job,
                # engines key their work on the id, and two sentences are in flight at once: each gets its own
                request_id=job.request_id if len(pieces) == 1 else f"{job.request_id}-s{index}",
                text=piece,
                seed=None if job.seed is None else job.seed + index,
            )
            for index, piece in enumerate(pieces)
        ]
        self._sentence_ids[job.request_id] = [sentence.request_id for sentence in jobs]
        ahead: tuple[int, Ahead[AudioChunk]] | None = None  # the sentence being synthesized in advance
        started: list[Ahead[AudioChunk]] = []
        try:
            for index, sentence_job in enumerate(jobs):
                if ahead is not None and ahead[0] == index:
                    source: AsyncIterator[AudioChunk] = aiter(ahead[1])
                else:
                    source = self.inner.synthesize(sentence_job)
                joiner: SentenceJoiner | None = None
                fed = emitted = 0  # this sentence's samples: from the engine, and passed on
                words: list[WordTiming] = []  # timed from the start of this sentence's joined audio
                try:
                    async for chunk in source:
                        if joiner is None:
                            first = index == 0 and not job.continues
                            joiner = SentenceJoiner(
                                chunk.sample_rate, pause_after(pieces[index]), first=first, speed=job.speed
                            )
                            if index + 1 < len(jobs):  # the next sentence starts as soon as this one sounds
                                ahead = (index + 1, Ahead(functools.partial(self.inner.synthesize, jobs[index + 1])))
                                started.append(ahead[1])
                        audio = joiner.feed(chunk.samples)
                        words.extend(word.shifted((fed - joiner.dropped) / chunk.sample_rate) for word in chunk.words)
                        fed += len(chunk.samples)
                        emitted += len(audio)
                        if len(audio) or chunk.input_tokens or chunk.output_tokens:
                            yield dataclasses.replace(chunk, samples=audio, words=())
                finally:
                    await _aclose(source)
                if joiner is not None:
                    tail = joiner.finish()
                    if len(tail) or words:
                        # the words go with the sentence's last audio, clamped to it: a word's last phoneme may
                        # run on into the silence the joiner cut
                        rate = joiner.sample_rate
                        end_s = (emitted + len(tail)) / rate
                        timed = tuple(
                            WordTiming(w.word, min(max(w.start_s, 0.0), end_s), min(max(w.end_s, 0.0), end_s))
                            for w in words
                        )
                        yield AudioChunk(tail, rate, words=tuple(w.shifted(-emitted / rate) for w in timed))
                log.debug(
                    "sentence synthesized",
                    extra={
                        "request_id": job.trace_id or job.request_id,
                        "job_id": job.request_id,
                        "event": "sentence_synthesized",
                        "sentence": index,
                        "sentences": len(jobs),
                        "at": time.time(),
                    },
                )
        finally:
            self._sentence_ids.pop(job.request_id, None)
            for prefetched in started:
                prefetched.task.cancel()
            for prefetched in started:
                await prefetched.cancel()


async def _aclose(stream: AsyncIterator[AudioChunk]) -> None:
    if isinstance(stream, AsyncGenerator):
        await stream.aclose()
