"""POST /v1/audio/speech: validate, admit, synthesize, encode, stream."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from app import metrics
from app.admission import AdmissionGate, Rejected, Ticket
from app.api.audio_stream import (
    EncodedAudio,
    SpeechResponse,
    StreamStopped,
    WholeFile,
    audio_body,
    sse_events,
    whole_file,
)
from app.api.dependencies import (
    accepted_models,
    get_catalog,
    get_engine,
    get_gate,
    get_lifecycle,
    get_settings,
    get_voice_store,
    served_models,
)
from app.api.docs import error_responses
from app.api.errors import ApiError, engine_not_ready, internal_error, invalid_param
from app.api.job_builder import OutputSpec, build_job
from app.api.schemas import SpeechRequest
from app.audio.fetch import fetch_reference
from app.audio.formats import CONTENT_TYPES
from app.audio.reference import is_url, prepare_reference_audio
from app.engine_protocol import (
    AudioChunk,
    EngineUnavailable,
    ReferenceAudio,
    SpeechEngine,
    SynthesisJob,
    UnsupportedParameter,
)
from app.lifecycle import Lifecycle
from app.settings import Settings
from app.timing import ListenerClock, TtfaTimeline
from app.voice_store import StoredVoice, VoiceNotFound, VoiceStore
from app.voices import VoiceCatalog

log = logging.getLogger(__name__)
router = APIRouter()

# vllm-omni 0.30's budget for X-Word-Timestamps: larger headers become opaque 502s behind common reverse proxies
WORD_TIMESTAMPS_HEADER_LIMIT = 4096

_AUDIO_RESPONSES = {
    200: {
        "description": "Audio, streamed as it is synthesized (or SSE events when stream_format is sse; one whole file "
        "with its Content-Length for `stream: false`).",
        "content": {**{ct: {} for ct in CONTENT_TYPES.values()}, "text/event-stream": {}},
    },
    **error_responses(400, 401, 404, 408, 413, 429, 503, 504),
}


def engine_unavailable(engine: SpeechEngine) -> ApiError:
    return engine_not_ready(engine.health().detail)


def shutting_down() -> ApiError:
    return ApiError(
        503,
        "The server is shutting down; retry on another replica.",
        type="server_error",
        code="server_shutting_down",
        headers={"Retry-After": "1", "Connection": "close"},
    )


async def admit(gate: AdmissionGate) -> Ticket:
    try:
        return await gate.acquire()
    except Rejected as exc:
        metrics.REJECTED.labels(exc.reason).inc()
        if exc.reason == "draining":  # queued when the drain ran out of time
            raise shutting_down() from exc
        message = (
            "The server is at capacity and its queue is full."
            if exc.reason == "queue_full"
            else "The server is at capacity and no slot freed in time."
        )
        raise ApiError(
            429,
            f"{message} Retry after {exc.retry_after_s} s.",
            type="requests",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from exc


async def first_chunk(chunks: AsyncGenerator[AudioChunk], engine: SpeechEngine, request_id: str) -> AudioChunk | None:
    """Wait for the first audio, so that a failure before any audio exists is answered with a proper status."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except UnsupportedParameter as exc:
        raise invalid_param(exc.param, exc.message) from exc
    except EngineUnavailable as exc:
        raise engine_unavailable(engine) from exc
    except Exception as exc:
        log.exception("synthesis failed before the first audio", extra={"request_id": request_id})
        raise internal_error(request_id) from exc


async def decode_reference(value: str, settings: Settings) -> ReferenceAudio:
    policy = settings.fetch_policy()
    try:
        source: str | bytes = await fetch_reference(value.strip(), policy) if is_url(value) else value
        return await asyncio.to_thread(prepare_reference_audio, source, policy.max_bytes)
    except UnsupportedParameter as exc:
        raise invalid_param(exc.param, exc.message) from exc


async def registered_voice(body: SpeechRequest, catalog: VoiceCatalog, store: VoiceStore) -> StoredVoice | None:
    """The registered voice a request names, when the name is not one of the engine's own voices or aliases."""
    if catalog.resolve(body.voice_name) is not None:
        return None
    try:
        return await asyncio.to_thread(store.get, body.voice_name)
    except VoiceNotFound:
        return None


def check_open(engine: SpeechEngine, lifecycle: Lifecycle) -> None:
    """New work is refused while the server drains or before the engine is warm."""
    if lifecycle.draining:
        metrics.REJECTED.labels("draining").inc()
        raise shutting_down()
    if not engine.health().ready:
        raise engine_unavailable(engine)


async def resolve_voice(
    body: SpeechRequest, engine: SpeechEngine, settings: Settings, catalog: VoiceCatalog, store: VoiceStore
) -> tuple[SpeechRequest, ReferenceAudio | None]:
    """The request's reference audio, decoded, and a registered (cloned) voice's reference and transcript in place."""
    caps = engine.capabilities()
    reference = await decode_reference(body.ref_audio, settings) if caps.voice_cloning and body.ref_audio else None
    registered = await registered_voice(body, catalog, store) if reference is None else None
    if registered is None:
        return body, reference
    if not caps.voice_cloning:
        raise invalid_param("voice", f"'{body.voice_name}' is a registered (cloned) voice; this model cannot clone.")
    try:
        reference = await asyncio.to_thread(store.audio, registered)
    except VoiceNotFound:
        raise invalid_param("voice", f"The voice '{body.voice_name}' was just deleted.", "voice_not_found") from None
    body = body.model_copy(
        update={
            "task_type": body.task_type or "Base",
            "ref_text": registered.ref_text,
            "x_vector_only_mode": not registered.has_ref_text,  # without a transcript: the speaker embedding only
        }
    )
    return body, reference


async def admitted(gate: AdmissionGate, lifecycle: Lifecycle, timing: TtfaTimeline) -> Ticket:
    timing.mark("queued")
    ticket = await admit(gate)  # accepted before a drain began: served, queued or not, while the drain lasts
    timing.mark("admitted", ticket.granted_at)
    if lifecycle.drained:  # validated before the drain began, but reached the gate only after it ended
        gate.release(ticket)
        raise shutting_down()
    metrics.QUEUE_WAIT.observe(ticket.queued_s)
    return ticket


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


@dataclasses.dataclass
class SpeechRun:
    """One synthesis from admission to its last byte, with the accounting both transports share: TTFA, E2E, RTF,
    audio seconds, aborts, the slot released and the engine told to stop, exactly once however it ends."""

    engine: SpeechEngine
    gate: AdmissionGate
    lifecycle: Lifecycle
    settings: Settings
    started: float  # perf_counter of arrival: the request's, or the text's that completed a sentence
    timing: TtfaTimeline
    summary: dict[str, object]
    stream_label: str  # the metrics' `stream` label: audio, sse or websocket
    observe_ttfa: bool = True  # a WebSocket utterance observes its TTFA once, not per sentence

    async def open(
        self, job: SynthesisJob, output: OutputSpec, ticket: Ticket, on_first_audio: Callable[[], None] | None = None
    ) -> EncodedAudio:
        """Start the engine and wait for its first audio (a failure before any audio is an ApiError)."""
        started, timing, summary, engine, gate, lifecycle = (
            self.started,
            self.timing,
            self.summary,
            self.engine,
            self.gate,
            self.lifecycle,
        )
        summary.update(voice=job.voice, job_id=job.request_id, queued_s=round(ticket.queued_s, 4))
        chunks = engine.synthesize(job)
        try:
            remaining = self.settings.request_timeout_s - (time.perf_counter() - started)
            first = await asyncio.wait_for(
                first_chunk(chunks, engine, job.trace_id or job.request_id), max(remaining, 0.001)
            )
        except BaseException as exc:
            gate.release(ticket)
            await chunks.aclose()
            if isinstance(exc, asyncio.CancelledError):  # the client left while the engine started
                metrics.ABORTED.labels("client_gone").inc()
                with anyio.CancelScope(shield=True):
                    await engine.abort(job.request_id)
            if isinstance(exc, TimeoutError):
                metrics.ABORTED.labels("timeout").inc()
                raise StreamStopped("timeout") from exc
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
            metrics.E2E.labels(self.stream_label).observe(now - started)
            metrics.AUDIO_SECONDS.inc(audio_s)
            if outcome == "completed":
                if audio_s > 0:
                    metrics.RTF.observe((now - ticket.granted_at) / audio_s)
                if audio.listener is not None and timing.ttfa_s is not None:
                    observe_uninterrupted(output.response_format, self.stream_label, timing.ttfa_s, audio.listener)
            else:
                metrics.ABORTED.labels(outcome).inc()
                await engine.abort(job.request_id)
            summary.update(
                engine_first_audio_s=round((timing.first_chunk or now) - started, 4),
                e2e_s=round(now - started, 4),
                audio_s=round(audio_s, 3),
                outcome=outcome,
                abort_reason=None if outcome == "completed" else outcome,
                completed=outcome == "completed",
            )

        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s - (time.perf_counter() - started)
        audio = EncodedAudio(
            first,
            chunks,
            output.response_format,
            output.sample_rate,
            on_close,
            deadline,
            first_audio_written,
            whole_file=output.whole_file,
        )
        # a WebSocket utterance times its listener itself, across its sentences, as they reach the socket
        audio.listener = ListenerClock(started) if self.observe_ttfa else None
        lifecycle.track(job.request_id, audio)
        return audio


def word_timestamps_headers(file: WholeFile) -> dict[str, str]:
    """vllm-omni 0.30's headers for a whole file's word timings: `X-Word-Timestamps`, a JSON list of {word, start_ms,
    end_ms} (ASCII-escaped), or past 4 KB `X-Word-Timestamps-Omitted` saying so."""
    if file.words is None:
        return {}
    timings = json.dumps([word.as_dict() for word in file.words])
    if len(timings) <= WORD_TIMESTAMPS_HEADER_LIMIT:
        return {"X-Word-Timestamps": timings}
    return {"X-Word-Timestamps-Omitted": f"oversize; bytes={len(timings)}; limit={WORD_TIMESTAMPS_HEADER_LIMIT}"}


async def whole_file_response(audio: EncodedAudio, response_format: str, words: bool, request_id: str) -> Response:
    """`stream: false`: the complete file, sent once all of it exists, with its Content-Length and exact headers."""
    try:
        file = await whole_file(audio, words)
    except ApiError:
        raise
    except Exception as exc:
        log.exception("synthesis failed", extra={"request_id": request_id})
        raise internal_error(request_id) from exc
    finally:
        # however it ended, even cancelled before the audio was first read: the slot is released, the engine told
        with anyio.CancelScope(shield=True):
            await audio.close_if_never_streamed()
    audio.first_audio_sent()  # the TTFA of a whole file: when it is complete and about to be written
    headers = word_timestamps_headers(file)
    return Response(file.data, media_type=CONTENT_TYPES[response_format], headers=headers)


@router.post("/v1/audio/speech", responses=_AUDIO_RESPONSES, response_class=StreamingResponse)
async def create_speech(
    body: SpeechRequest,
    request: Request,
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    settings: Annotated[Settings, Depends(get_settings)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
    gate: Annotated[AdmissionGate, Depends(get_gate)],
    lifecycle: Annotated[Lifecycle, Depends(get_lifecycle)],
    store: Annotated[VoiceStore, Depends(get_voice_store)],
) -> StreamingResponse:
    timing = request.state.ttfa_timeline = TtfaTimeline(request.state.started_at)  # logged by the accounting
    request_id: str = request.state.request_id
    summary: dict[str, object] = {
        "model": body.model or engine.model_id,
        "response_format": body.response_format,
        # the metrics' `stream` label: audio, sse, or file (a whole file, `stream: false`)
        "stream_format": "file" if body.whole_file else body.stream_format,
        "chars": len(body.input),
    }
    request.state.speech = summary  # logged and counted once per request by SpeechAccountingMiddleware
    if body.word_timestamps and body.stream_format != "sse" and not body.whole_file:
        message = (
            "'word_timestamps' needs stream_format 'sse' (the timings arrive as SSE events) or 'stream': false "
            "(a whole file, the timings in its X-Word-Timestamps header)."
        )
        raise invalid_param("word_timestamps", message)
    check_open(engine, lifecycle)
    body, reference = await resolve_voice(body, engine, settings, catalog, store)
    job, output = build_job(
        body,
        request_id=request_id,
        caps=engine.capabilities(),
        catalog=catalog,
        served_models=served_models(engine, settings),
        ref_audio=reference,
        also_accepted=accepted_models(engine, settings),
    )
    job = dataclasses.replace(job, timing=timing)
    ticket = await admitted(gate, lifecycle, timing)
    metrics.INPUT_CHARACTERS.inc(len(body.input))
    label = str(summary["stream_format"])
    run = SpeechRun(engine, gate, lifecycle, settings, request.state.started_at, timing, summary, label)
    audio = await run.open(job, output, ticket)
    if output.whole_file:
        return await whole_file_response(audio, output.response_format, job.word_timestamps, request_id)
    if output.stream_format == "sse":
        return SpeechResponse(
            sse_events(audio, request_id),
            audio,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return SpeechResponse(audio_body(audio), audio, media_type=CONTENT_TYPES[output.response_format])
