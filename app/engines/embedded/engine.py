"""The embedded engine: hibari-tts, a small neural TTS that runs on the CPU with its default voice inside the wheel.

Each piece of text (a sentence: `app.speech.sentences.SentencePipeline` fronts this engine) is synthesized in a
worker thread, so the event loop never waits on the model. A fixed pool of workers, each with its own model
instance, bounds CPU use. A sentence nobody will hear any more (its caller left, or its request was aborted) is
stopped at its next step (`stop.py`), its worker freed for the requests waiting for one; so is every sentence in
progress when the engine is closed, and those still waiting for a worker never run. Only the bundled voice is
offered: hibari's other voices are downloaded from a hub on first use, which a production service must never do
behind a caller's back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import re
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from app.audio.transforms import time_stretch
from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    EngineHealth,
    EngineUnavailable,
    SynthesisJob,
    TaskType,
    UnsupportedParameter,
    VoiceInfo,
)
from app.engines.embedded import alignment
from app.engines.embedded.reader import text_reader
from app.engines.embedded.stop import Stop, SynthesisStopped
from app.settings import MAX_INPUT_CHARS
from app.text.normalize import ReadingRules
from app.text.words import WordTiming, align_words, written_words

if TYPE_CHECKING:
    from typing import Any

    from hibari import Hibari

    from app.settings import EmbeddedSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

SAMPLE_RATE = 24_000
FRAME_SAMPLES = 300  # the model's acoustic frame: 12.5 ms at 24 kHz; counted as output tokens
# hibari's own speed control rounds each sound to a whole number of its 25-ms steps, and most sounds last 1 to 3:
# asked for 1.25 it made speech 1.09-1.17x as fast, for 0.75 0.72x. So FFmpeg's atempo alone sets the speed up to
# FAST_SPEED, exactly and as intelligibly (Whisper tiny.en over five sentences, mean WER, atempo alone against
# hibari's speed within its range and atempo for the rest: 0.25x 0.073 / 0.073, 0.75x 0.073 / 0.109, 1.25x 0.073 /
# 0.073, 1.5x 0.088 / 0.073, 2x 0.067 / 0.073). Above it hibari speaks at FAST_MODEL_SPEED first (3x: 0.32 against
# 0.78 with atempo alone; 4x: 0.89 against 0.95), and atempo makes up what its steps fell short by, counted from
# hibari's durations at 1.0.
FAST_SPEED = 2.0
FAST_MODEL_SPEED = 1.25
MAX_PHONEMES = 400  # hibari's own limit per synthesis call
VOICE_ID = "heart"
LANGUAGES = ("English",)
_PHONEME_CLAUSE = re.compile(r"(?<=[,;:—])\s+")
_WARMUP_TEXT = "Warming up the speech engine."
# The voice is English: other scripts are refused up front (hibari would skip them in silence). Digits of any script
# and numbers past a quadrillion are its reader's to read (`reader.py`), the text left as written.
READING = ReadingRules(latin_only=True)
# How long close() waits for the workers it told to stop. A stopped sentence ends within one step, of which only a
# phoneme piece's vocoder pass cannot be cut short (about a second on a busy CPU); this bound is only against a step
# that never ends, so that close() returns and the server's shutdown goes on (the process's exit still joins the
# worker threads: Python's, not ours).
CLOSE_WAIT_S = 10.0
CLOSED = "the embedded engine closed"  # what a synthesis the close stopped, or dropped before it ran, raises


def model_speed_for(speed: float) -> float:
    """The speed hibari is asked for, for a requested `speed`; atempo makes up the rest (see FAST_SPEED)."""
    return FAST_MODEL_SPEED if speed > FAST_SPEED else 1.0


def chunk_phonemes(phonemes: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut a phoneme string at clause punctuation, then at spaces, into pieces of at most `limit` characters."""
    if len(phonemes) <= limit:
        return [phonemes]
    pieces: list[str] = []
    for clause in _PHONEME_CLAUSE.split(phonemes):
        words = clause.split(" ") if len(clause) > limit else [clause]
        for word in words:
            for start in range(0, len(word), limit):  # a single "word" over the limit: hard cut, nothing dropped
                part = word[start : start + limit]
                if pieces and len(pieces[-1]) + 1 + len(part) <= limit:
                    pieces[-1] = f"{pieces[-1]} {part}"
                else:
                    pieces.append(part)
    return pieces


@dataclass(frozen=True, slots=True)
class SentenceAudio:
    samples: np.ndarray
    phoneme_ids: int
    frames: int
    words: tuple[WordTiming, ...] = ()


@dataclass(frozen=True, slots=True)
class Voice:
    """One worker's model: hibari's text reader and vocabulary, and its network returning phoneme durations too."""

    model: Hibari
    session: Any


class EmbeddedEngine:
    name = "embedded"
    model_id = "hibari"

    def __init__(self, settings: EmbeddedSettings, *, max_input_chars: int = MAX_INPUT_CHARS) -> None:
        """`settings` are the engine's own; of the service's it needs only the longest input it accepts."""
        self._workers = settings.workers
        self._threads_per_worker = settings.threads_per_worker
        self._max_input_chars = max_input_chars
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="hibari")
        self._models: queue.SimpleQueue[Voice] = queue.SimpleQueue()
        self._active: dict[str, set[Stop]] = {}  # request id -> the stops of its syntheses in progress
        self._work: set[concurrent.futures.Future[Any]] = set()  # what the workers run or have queued, until done
        self._ready = False
        self._closed = False
        self._detail = "loading"
        self._failed = False  # failed to load: a restart is the only way back
        self._start_phases: dict[str, float] = {}  # seconds per phase, once started

    # -- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        started = time.perf_counter()
        try:
            models = await asyncio.gather(*(self._submit(self._load_model) for _ in range(self._workers)))
        except Exception as exc:
            self._detail = f"failed to load: {exc}"
            self._failed = True
            raise
        for model in models:
            self._models.put(model)
        self._ready = True
        self._detail = "ready"
        self._start_phases = {"load": round(time.perf_counter() - started, 3)}
        log.info("embedded engine ready", extra={"workers": self._workers, "load_s": self._start_phases["load"]})

    def start_phases(self) -> dict[str, float]:
        """load (one model and word-timing session per worker, in parallel)."""
        return dict(self._start_phases)

    def _load_model(self) -> Voice:
        from hibari import Hibari

        model = Hibari(voice=VOICE_ID, threads=self._threads_per_worker, g2p=text_reader(VOICE_ID))
        voice = Voice(model, alignment.load_session(model, self._threads_per_worker))
        model.sess = None  # the session above replaces it: one copy of the network per worker
        # loads the G2P and runs the graph once so the first request is not slow
        self._models.put(voice)
        self._synthesize_sentence(_WARMUP_TEXT, 1.0, 0, Stop(), word_timestamps=True)
        return self._models.get()

    async def close(self) -> None:
        """Refuse new work, drop what waits for a worker, and stop the sentences in progress at their next step
        (their streams raise `EngineUnavailable`); return once the workers have ended, or after CLOSE_WAIT_S. Left to
        run on, a sentence begun before the shutdown would hold a CPU, and the process's exit, for audio nobody gets."""
        self._ready = False
        self._closed = True
        self._detail = "closed"
        for stops in self._active.values():
            for stop in stops:
                stop.set()
        self._executor.shutdown(wait=False, cancel_futures=True)  # what no worker has taken yet never runs
        # nothing is submitted after the shutdown: what is in the set now is all there is to wait for
        if not await asyncio.to_thread(self._join_workers, self._work.copy(), CLOSE_WAIT_S):
            log.warning("embedded engine closed with syntheses still running", extra={"running": len(self._work)})

    def _join_workers(self, work: set[concurrent.futures.Future[Any]], timeout_s: float) -> bool:
        """Whether `work` has ended within `timeout_s`, its workers with it (waited off the event loop)."""
        _, running = concurrent.futures.wait(work, timeout_s)
        if running:
            return False
        self._executor.shutdown(wait=True)  # each worker is past its last job: it exits at once
        return True

    async def _result(self, pending: asyncio.Future[T]) -> T:
        """What a worker returns for `pending` (`_submit`'s); `EngineUnavailable` where close() dropped it before a
        worker took it (the executor cancels what waits): not the caller's own cancellation, which propagates."""
        try:
            return await pending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._closed or (task is not None and task.cancelling()):
                raise
            raise EngineUnavailable(CLOSED) from None

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` on a worker, awaitable; close() waits for it (or drops it, if no worker has taken it yet)."""
        work = self._executor.submit(fn, *args)
        self._work.add(work)
        work.add_done_callback(self._work.discard)
        return asyncio.wrap_future(work)

    def health(self) -> EngineHealth:
        return EngineHealth(ready=self._ready, detail=self._detail, failed=self._failed)

    # -- description ----------------------------------------------------------------------------------------------
    def voices(self) -> list[VoiceInfo]:
        return [VoiceInfo(id=VOICE_ID, name="Heart (American English, female)", languages=LANGUAGES)]

    def languages(self) -> list[str]:
        return ["Auto", *LANGUAGES]

    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(
            task_types=frozenset({TaskType.CUSTOM_VOICE}),
            voice_cloning=False,
            instructions=False,
            languages=tuple(self.languages()),
            max_input_chars=self._max_input_chars,
            seed=True,
            max_new_tokens=False,
            sample_rate=SAMPLE_RATE,
            max_concurrency=self._workers,
            reading=READING,
            word_timestamps=True,
        )

    # -- synthesis ------------------------------------------------------------------------------------------------
    async def abort(self, request_id: str) -> None:
        """Stop `request_id`'s syntheses in progress at their next step: they end without audio."""
        for stop in self._active.get(request_id, ()):
            stop.set()

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        """One piece of text (the sentence pipeline in front of this engine cuts long text into sentences) as one
        chunk, synthesized in a worker thread."""
        if not self._ready:
            raise EngineUnavailable("the embedded engine is not ready")
        stop = Stop()  # this job's alone: another job of the same request (or of none) runs on
        self._active.setdefault(job.request_id, set()).add(stop)
        if job.timing is not None:
            job.timing.mark("submitted")
        pending = self._submit(self._synthesize_sentence, job.text, job.speed, job.seed, stop, job.word_timestamps)
        try:
            try:
                audio: SentenceAudio | None = await self._result(pending)
            except SynthesisStopped:
                audio = None
            if self._closed:  # closed under it: the caller hears that the engine went away, not a sentence cut short
                raise EngineUnavailable(CLOSED)
            if audio is None:
                return  # aborted: it ends without audio, as an aborted request's synthesis always has
            if not audio.phoneme_ids:  # e.g. Chinese text: this English voice has no phonemes for it
                raise UnsupportedParameter(
                    "input", f"This voice speaks English only and cannot read: {job.text[:80]!r}."
                )
            if not stop.is_set and len(audio.samples):  # not aborted after its thread was done
                yield AudioChunk(audio.samples, SAMPLE_RATE, audio.phoneme_ids, audio.frames, audio.words)
        finally:
            # Here the caller has its audio, or it left (its task was cancelled, or it closed this stream while the
            # sentence was synthesized): nobody waits for the sentence any more. A thread still running it stops at
            # its next step rather than spend a worker's CPU on audio nobody will hear; one that had not started yet
            # never runs. Once the audio is here, the stop changes nothing.
            stop.set()
            pending.cancel()
            stops = self._active[job.request_id]
            stops.discard(stop)
            if not stops:
                del self._active[job.request_id]

    async def unreadable(self, pieces: list[str]) -> str | None:
        """The first piece this voice has no phonemes for (or that its text reader fails on), if any: only the
        text-to-phoneme step runs, a millisecond or so per sentence."""
        if not self._ready:
            raise EngineUnavailable("the embedded engine is not ready")
        return await self._result(self._submit(self._first_unreadable, pieces))

    def _first_unreadable(self, pieces: list[str]) -> str | None:
        voice = self._models.get()
        model = voice.model
        try:
            for piece in pieces:
                try:
                    phonemes, _ = alignment.phonemize(model.g2p, piece)  # as the sentence will be read
                    readable = any(len(model.ids(part)) > 2 for part in chunk_phonemes(phonemes))
                except Exception:
                    log.warning("the text reader failed on a sentence", exc_info=True)
                    readable = False
                if not readable:
                    return piece
            return None
        finally:
            self._models.put(voice)

    def _synthesize_sentence(
        self, sentence: str, speed: float, seed: int | None, stop: Stop, word_timestamps: bool = False
    ) -> SentenceAudio:
        """`sentence`'s audio, or `SynthesisStopped` once `stop` is set: checked before the text is read, before each
        phoneme piece's network run and its vocoding, before the time-stretch, and inside a network run."""
        stop.check()  # stopped while it waited for a worker
        voice = self._models.get()
        try:
            rng = np.random.default_rng(seed)
            model_speed = model_speed_for(speed)
            phonemes, spoken = alignment.phonemize(voice.model.g2p, sentence)
            clock = alignment.PhonemeClock(phonemes, voice.model.vocab)
            parts: list[np.ndarray] = []
            phoneme_ids = 0
            made = at_one = 0  # above FAST_SPEED, hibari's steps summed: as made at its speed, and as at 1.0
            for piece in chunk_phonemes(phonemes):
                ids = voice.model.ids(piece)
                if len(ids) <= 2:  # only the padding: nothing in this piece the model can say
                    continue
                phoneme_ids += len(ids)
                audio, durations = alignment.synthesize_ids(voice.session, ids, model_speed, rng, stop)
                if model_speed != 1.0:
                    made += int(durations.sum())
                    at_one += alignment.frames_at(voice.session, ids, 1.0, stop)
                clock.add(piece, durations, len(audio))
                parts.append(audio)
        finally:
            self._models.put(voice)  # stopped or not: the next request's
        stop.check()  # before the time-stretch (FFmpeg's atempo) and the word timing
        samples = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        frames = len(samples) // FRAME_SAMPLES
        # what hibari's whole steps fell short of the speed asked of it is atempo's to make up
        tempo = speed * made / at_one if made and at_one else speed
        stretched = time_stretch(samples, SAMPLE_RATE, tempo)
        words: tuple[WordTiming, ...] = ()
        if word_timestamps:
            stretch = len(stretched) / len(samples) if len(samples) else 1.0
            words = tuple(align_words(written_words(sentence), clock.words(spoken, SAMPLE_RATE, stretch)))
        return SentenceAudio(stretched, phoneme_ids, frames, words)
