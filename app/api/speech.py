"""POST /v1/audio/speech: validate, synthesize, encode, stream."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from app.api.audio_stream import EncodedAudio, sse_events
from app.api.dependencies import get_catalog, get_engine, get_settings, served_models
from app.api.errors import ApiError, internal_error, invalid_param
from app.api.job_builder import build_job
from app.api.schemas import SpeechRequest
from app.audio.encoders import CONTENT_TYPES
from app.audio.reference import decode_reference_audio
from app.engines.base import AudioChunk, EngineUnavailable, ReferenceAudio, SpeechEngine, UnsupportedParameter
from app.settings import Settings
from app.voices import VoiceCatalog

log = logging.getLogger(__name__)
router = APIRouter()

_AUDIO_RESPONSES = {
    200: {
        "description": "Audio, streamed as it is synthesized (or SSE events when stream_format is sse).",
        "content": {**{ct: {} for ct in CONTENT_TYPES.values()}, "text/event-stream": {}},
    }
}


def engine_unavailable(engine: SpeechEngine) -> ApiError:
    return ApiError(
        503,
        f"The speech engine is not ready ({engine.health().detail}). Retry shortly.",
        type="server_error",
        code="engine_unavailable",
        headers={"Retry-After": "5"},
    )


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


async def decode_reference(value: str) -> ReferenceAudio:
    try:
        return await asyncio.to_thread(decode_reference_audio, value)
    except UnsupportedParameter as exc:
        raise invalid_param(exc.param, exc.message) from exc


@router.post("/v1/audio/speech", responses=_AUDIO_RESPONSES, response_class=StreamingResponse)
async def create_speech(
    body: SpeechRequest,
    request: Request,
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    settings: Annotated[Settings, Depends(get_settings)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
) -> StreamingResponse:
    started = time.perf_counter()
    request_id: str = request.state.request_id
    if not engine.health().ready:
        raise engine_unavailable(engine)
    caps = engine.capabilities()
    reference = await decode_reference(body.ref_audio) if caps.voice_cloning and body.ref_audio else None
    job, output = build_job(
        body,
        request_id=request_id,
        caps=caps,
        catalog=catalog,
        served_models=served_models(engine, settings),
        ref_audio=reference,
    )
    chunks = engine.synthesize(job)
    first = await first_chunk(chunks, engine, request_id)
    first_audio_s = time.perf_counter() - started

    async def on_close(completed: bool) -> None:
        if not completed:
            await engine.abort(request_id)
        log.info(
            "speech request",
            extra={
                "request_id": request_id,
                "model": body.model,
                "voice": job.voice,
                "response_format": output.response_format,
                "stream_format": output.stream_format,
                "chars": len(body.input),
                "engine_first_audio_s": round(first_audio_s, 4),
                "e2e_s": round(time.perf_counter() - started, 4),
                "audio_s": round(audio.usage.audio_samples / first.sample_rate, 3) if first else 0.0,
                "completed": completed,
            },
        )

    audio = EncodedAudio(first, chunks, output.response_format, output.sample_rate, on_close)
    if output.stream_format == "sse":
        return StreamingResponse(
            sse_events(audio, request_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return StreamingResponse(audio.bytes(), media_type=CONTENT_TYPES[output.response_format])
