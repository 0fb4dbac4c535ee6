"""One synthesis from admission to its last byte, whatever the transport: the checks before any work (draining, the
engine warm), admission, the engine's first audio awaited (so that a failure before any audio is still a proper
error), the encoded audio, and the accounting both transports share (TTFA and its phases, E2E, RTF, audio seconds,
aborts), with the slot released and the engine told to stop exactly once however it ends."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Callable

import anyio

from app import metrics
from app.admission import AdmissionGate, Rejected, Ticket
from app.engine_protocol import AudioChunk, EngineUnavailable, SpeechEngine, SynthesisJob, UnsupportedParameter
from app.lifecycle import Lifecycle
from app.settings import Settings
from app.speech.encoding import EncodedAudio
from app.speech.errors import EngineFailed, Failed, Full, Refused, ShuttingDown, Stopped, Unavailable
from app.speech.jobs import OutputSpec, build_job, check_input_length, check_model
from app.speech.models import accepted_models, served_models
from app.speech.options import SpeechOptions
from app.speech.voice import Decoder, Options, Voice, resolve_voice
from app.timing import ListenerClock, TtfaTimeline
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SpeechService:
    """What serves a request for speech on either transport: the engine, the settings, the voices, the admission gate
    and the lifecycle."""

    engine: SpeechEngine
    settings: Settings
    catalog: VoiceCatalog
    store: VoiceStore
    gate: AdmissionGate
    lifecycle: Lifecycle

    def check_open(self) -> None:
        """New work is refused while the server drains or before the engine is warm."""
        self.check_not_draining()
        self.check_ready()

    def check_not_draining(self) -> None:
        """`ShuttingDown`, counted as a refusal, while the server drains."""
        if self.lifecycle.draining:
            metrics.REJECTED.labels("draining").inc()
            raise ShuttingDown()

    def check_ready(self) -> None:
        state = self.engine.health()
        if state.failed:
            raise EngineFailed(state.detail)
        if not state.ready:
            raise Unavailable(state.detail)

    async def resolve_voice(self, options: Options, decode: Decoder | None = None) -> Voice[Options]:
        return await resolve_voice(options, self.engine, self.settings, self.catalog, self.store, decode)

    def check_input(self, text: str) -> None:
        """`Refused` where `text` is longer than this server takes: before its voice is resolved (a reference audio
        fetched and decoded), as `build_job` checks it again for the texts that come without a request."""
        check_input_length(text, self.engine.capabilities())

    def check_model(self, model: str | None) -> None:
        """`UnknownModel` where `model` names none this server serves (None: the engine's own)."""
        served = served_models(self.engine, self.settings)
        check_model(model or served[0], served, accepted_models(self.engine, self.settings))

    def build_job(
        self,
        voice: Voice[SpeechOptions],
        text: str,
        request_id: str,
        whole_file: bool = False,
        continues: bool = False,
    ) -> tuple[SynthesisJob, OutputSpec]:
        """`text`, in `voice`, as a job this engine can honour (or `Refused`, naming the field that it cannot);
        `continues`: the text is an utterance's next sentence (`SynthesisJob.continues`)."""
        return build_job(
            voice.options,
            text,
            request_id=request_id,
            caps=self.engine.capabilities(),
            catalog=self.catalog,
            served_models=served_models(self.engine, self.settings),
            ref_audio=voice.reference,
            also_accepted=accepted_models(self.engine, self.settings),
            whole_file=whole_file,
            continues=continues,
        )

    async def admitted(
        self,
        timing: TtfaTimeline,
        chars: int,
        deadline: float | None,
        count_refusal: bool = True,
        summary: dict[str, object] | None = None,
    ) -> Ticket:
        """A slot for a job of `chars` characters: `Full` when none comes, by the queue's timeout or by the request's
        own `deadline` (`SpeechRun.deadline`; None: none), whichever comes first, `ShuttingDown` when the drain ends
        first, or had ended before it came (the request's `summary`, where given, then ends as the drain's, never
        begun: `ended_as`); each counted as the gate's refusal.
        `count_refusal=False` leaves a refusal to whoever counts the request it belongs to (a batch's items: one
        request or several, known only when every item has ended; `gate_refusal` reads the reason)."""
        timing.mark("queued")
        try:
            # accepted before a drain began: served, queued or not, while the drain lasts
            ticket = await admit(self.gate, count_refusal, deadline)
            timing.mark("admitted", ticket.granted_at)
            if self.lifecycle.drained:  # validated before the drain began, but reached the gate only after it ended
                self.gate.release(ticket)
                # the drain's refusal as every other 503 of a drain is, counted here alone: one the gate turned away
                # in its queue was counted by `admit`, and never gets here; the cause lets a batch count its item
                refusal = Rejected("draining", 1)
                if count_refusal:
                    metrics.REJECTED.labels(refusal.reason).inc()
                raise ShuttingDown() from refusal
        except ShuttingDown:  # still queued when the drain ran out of time: stopped by it before any synthesis
            if summary is not None:
                ended_as(summary, "drain", aborted=False)
            raise
        metrics.QUEUE_WAIT.observe(ticket.queued_s)
        metrics.INPUT_CHARACTERS.inc(chars)
        return ticket


async def admit(gate: AdmissionGate, count_refusal: bool = True, deadline: float | None = None) -> Ticket:
    try:
        return await gate.acquire(deadline)
    except Rejected as exc:
        if count_refusal:
            metrics.REJECTED.labels(exc.reason).inc()
        if exc.reason == "draining":  # queued when the drain ran out of time
            raise ShuttingDown() from exc
        raise Full(exc.reason, exc.retry_after_s) from exc


def gate_refusal(error: BaseException | None) -> str | None:
    """The reason the admission gate gave where `error` is its refusal (`Full`, or `ShuttingDown` for a drain that
    ran out while it queued); None for any other error."""
    if isinstance(error, Full):
        return error.reason
    cause = error.__cause__ if error is not None else None
    return cause.reason if isinstance(cause, Rejected) else None


async def first_chunk(chunks: AsyncGenerator[AudioChunk], engine: SpeechEngine, request_id: str) -> AudioChunk | None:
    """Wait for the first audio, so that a failure before any audio exists is answered with a proper status."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except UnsupportedParameter as exc:
        raise Refused(exc.param, exc.message) from exc
    except EngineUnavailable as exc:
        raise Unavailable(engine.health().detail) from exc
    except Exception as exc:
        log.exception("synthesis failed before the first audio", extra={"request_id": request_id})
        raise Failed(request_id) from exc


def ended_as(summary: dict[str, object], outcome: str, aborted: bool) -> None:
    """How a request ended, as its log line says it and the metrics count it, in one step: its `outcome`, and where
    its synthesis had begun and was stopped the reason it was aborted for (`abort_reason`, counted in
    `speech_aborted_total` under it); none where it ran to its end or was stopped before any synthesis began (still
    queued: among the requests, not the aborts)."""
    summary.update(outcome=outcome, abort_reason=outcome if aborted else None, completed=outcome == "completed")
    if aborted:
        metrics.ABORTED.labels(outcome).inc()


def has_ended(summary: dict[str, object]) -> bool:
    """Whether `ended_as` has said how the request ended: its run did, once its synthesis had begun, and its admission
    where a drain that ran out of time turned it away while it queued."""
    return "outcome" in summary


def observe_ttfa(response_format: str, stream: str, ttfa_s: float, phases: dict[str, float]) -> None:
    """One TTFA and its phases (which add up to it), as the metrics count them for every transport."""
    metrics.TTFA.labels(response_format, stream).observe(ttfa_s)
    for phase, seconds in phases.items():
        metrics.TTFA_PHASE.labels(phase).observe(seconds)


def observe_uninterrupted(response_format: str, stream: str, ttfa_s: float, listener: ListenerClock) -> None:
    """A completed stream's time to uninterrupted audio (its TTFA plus the largest deficit its writes show), and
    whether it ran dry. A stream cut short is not observed: what it would have needed is unknown."""
    if listener.deficit_s is None:  # no audio written to the client (nothing to listen to)
        return
    metrics.UNINTERRUPTED.labels(response_format, stream).observe(ttfa_s + listener.deficit_s)
    if listener.ran_dry:
        metrics.RAN_DRY.labels(response_format, stream).inc()


class Delivery:
    """The delivery of a run's audio where it comes after the synthesis instead of with it: a WebSocket sentence is
    synthesized ahead of its delivery, and a session cut off delivers none of the sentence synthesized ahead and only
    the beginning of the one it was delivering. The run's end is counted once both have ended, as the delivery ended
    (`SpeechRun.delivery`)."""

    def __init__(self) -> None:
        self._count: Callable[[bool, float, float | None], None] | None = None  # the run's, once its synthesis ended
        self._ended: tuple[bool, float, float | None] | None = None

    def synthesized(self, count: Callable[[bool, float, float | None], None]) -> None:
        """The run's synthesis ended: `count` counts its end, told how its delivery ended (`ended`'s arguments)."""
        self._count = count
        self._counted()

    def ended(self, whole: bool, audio_s: float, at: float | None) -> None:
        """The delivery ended: `whole`, all of the audio was delivered; `audio_s` of it were; `at` is when
        (perf_counter), None where it never began (the stream ended first). Only its first end counts."""
        if self._ended is None:
            self._ended = (whole, audio_s, at)
            self._counted()

    def _counted(self) -> None:
        if self._count is not None and self._ended is not None:
            count, self._count = self._count, None
            count(*self._ended)


@dataclasses.dataclass
class SpeechRun:
    """One synthesis from admission to its last byte, with the accounting both transports share: TTFA, E2E, RTF,
    audio seconds, aborts, the slot released and the engine told to stop, exactly once however it ends."""

    service: SpeechService
    started: float  # perf_counter of arrival: the request's, or the text's that completed a sentence
    timing: TtfaTimeline
    summary: dict[str, object]
    stream_label: str  # the metrics' `stream` label: audio, sse, file or websocket
    observe_ttfa: bool = True  # a WebSocket utterance observes its TTFA once, not per sentence
    # why the stream a WebSocket sentence belongs to ended, once it has (None: still open, or not a stream's)
    stream_ended_as: Callable[[], str | None] | None = None
    # perf_counter the deadline counts from, where not from arrival: a WebSocket sentence's turn (its session speaks
    # its sentences one after another; waiting for the ones before it is not its synthesis)
    deadline_from: float | None = None
    # its audio counted as delivered when it ends (`speech_audio_seconds_total`): a batch's items are counted by the
    # batch once it answers with them
    counts_audio: bool = True
    # where its audio is delivered after its synthesis, not as it is made (a WebSocket sentence): its end is counted
    # as delivered, once the delivery has ended too (E2E up to it, the audio delivered, completed only where all of
    # it was, else aborted as its stream was cut); None: its end is its synthesis's
    delivery: Delivery | None = None
    # words timed as a player of the response plays them (mp3's and aac's decoder lead); False: as synthesized, as a
    # WebSocket sentence's are, beside its trailing words and its length
    words_as_played: bool = True

    @property
    def deadline(self) -> float:
        """When the request's time is up (a `time.perf_counter()` time): `SPEECH_REQUEST_TIMEOUT_S` from its arrival,
        or from its turn (`deadline_from`). Its wait for a slot ends there at the latest, and its synthesis too."""
        counted_from = self.started if self.deadline_from is None else self.deadline_from
        return counted_from + self.service.settings.request_timeout_s

    async def admitted(self, chars: int, count_refusal: bool = True) -> Ticket:
        """A slot for this request's job of `chars` characters (`SpeechService.admitted`), waited for no longer than
        the request's own deadline: a request whose deadline passes while it is queued is refused as the queue
        refuses one (`queue_timeout`), never sent to the engine with no time left. Its summary ends as the drain's
        where a drain turns it away."""
        return await self.service.admitted(self.timing, chars, self.deadline, count_refusal, self.summary)

    def cancelled_as(self) -> str:
        """The outcome of a cancellation from outside: the stream's reason where it has one, else a client that left
        (a stream that cut off a client not reading is not one whose client left)."""
        return (self.stream_ended_as() if self.stream_ended_as else None) or "client_gone"

    async def open(
        self, job: SynthesisJob, output: OutputSpec, ticket: Ticket, on_first_audio: Callable[[], None] | None = None
    ) -> EncodedAudio:
        """Start the engine and wait for its first audio (a failure before any audio is a SpeechError)."""
        started, timing, summary = self.started, self.timing, self.summary
        engine, gate, lifecycle = self.service.engine, self.service.gate, self.service.lifecycle
        job = dataclasses.replace(job, timing=timing)
        summary.update(voice=job.voice, job_id=job.request_id, queued_s=round(ticket.queued_s, 4))
        chunks = engine.synthesize(job)
        try:
            remaining = self.deadline - time.perf_counter()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns a result that came in the step its caller
            # was cancelled and drops the cancel, so a request whose client left as its first audio came ran on, its
            # slot held and the engine synthesizing to the end; awaited here, in the request's task, the cancel stands
            async with asyncio.timeout(max(remaining, 0.001)):
                first = await first_chunk(chunks, engine, job.trace_id or job.request_id)
        except BaseException as exc:
            gate.release(ticket)
            await chunks.aclose()
            if isinstance(exc, asyncio.CancelledError):  # the client left (or was cut off) while the engine started
                ended_as(summary, self.cancelled_as(), aborted=True)
                with anyio.CancelScope(shield=True):
                    await engine.abort(job.request_id)
            if isinstance(exc, TimeoutError):
                ended_as(summary, "timeout", aborted=True)
                raise Stopped("timeout") from exc
            raise
        timing.mark("first_chunk")

        def first_audio_written() -> None:
            written = time.perf_counter()
            timing.mark("first_byte", written)
            ttfa = written - started
            phases = timing.phases()
            if self.observe_ttfa:  # a WebSocket utterance observes both itself, at its first bytes on the socket
                observe_ttfa(output.response_format, self.stream_label, ttfa, phases)
            summary["ttfa_s"] = round(ttfa, 4)
            summary["ttfa_phases_s"] = {phase: round(seconds, 4) for phase, seconds in phases.items()}
            if on_first_audio is not None:
                on_first_audio()

        async def on_close(outcome: str) -> None:
            gate.release(ticket)
            lifecycle.untrack(job.request_id)
            now = time.perf_counter()
            audio_s = audio.usage.audio_samples / first.sample_rate if first else 0.0
            summary.update(
                engine_first_audio_s=round((timing.first_chunk or now) - started, 4),
                e2e_s=round(now - started, 4),
                audio_s=round(audio_s, 3),
            )

            def count_end(whole: bool, delivered_s: float, delivered_at: float | None) -> None:
                # completed where all of its audio was delivered; a synthesis that completed for audio never
                # delivered whole ended as its stream was cut. Its E2E up to its delivery's end: none where none began
                ended = outcome if outcome != "completed" or whole else self.cancelled_as()
                if delivered_at is not None:
                    metrics.E2E.labels(self.stream_label).observe(delivered_at - started)
                if self.counts_audio:
                    metrics.AUDIO_SECONDS.inc(delivered_s)
                ended_as(summary, ended, aborted=ended != "completed")  # counted as an abort where it was one
                if ended == "completed":
                    if audio_s > 0:
                        metrics.RTF.observe((now - ticket.granted_at) / audio_s)
                    if audio.listener is not None and timing.ttfa_s is not None:
                        observe_uninterrupted(output.response_format, self.stream_label, timing.ttfa_s, audio.listener)
                # an error or the deadline after the 200 (before it, the 5xx or 504 is counted): a drain's stop is
                # no failure, nor a client that left
                elif ended in ("error", "timeout") and self.stream_label in metrics.HTTP_STREAMS:
                    metrics.STREAM_ERRORS.labels(self.stream_label).inc()

            if self.delivery is None:  # delivered as it was made; a whole file cut short was never sent
                sent_s = audio_s if outcome == "completed" or not output.whole_file else 0.0
                count_end(outcome == "completed", sent_s, now)
            else:
                self.delivery.synthesized(count_end)
            if outcome != "completed":
                await engine.abort(job.request_id)

        deadline = asyncio.get_running_loop().time() + self.deadline - time.perf_counter()
        audio = EncodedAudio(
            first,
            chunks,
            output.response_format,
            output.sample_rate,
            on_close,
            deadline,
            first_audio_written,
            whole_file=output.whole_file,
            cancelled_as=self.cancelled_as,
            words_as_played=self.words_as_played,
        )
        # a WebSocket utterance times its listener itself, across its sentences, as they reach the socket
        audio.listener = ListenerClock(started) if self.observe_ttfa else None
        lifecycle.track(job.request_id, audio, job.trace_id or job.request_id)  # logged as the job's lines are
        return audio
