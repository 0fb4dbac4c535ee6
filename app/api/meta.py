"""Models, voices, health and readiness."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.dependencies import get_batch_slots, get_engine, get_lifecycle, get_settings
from app.api.errors import RETRY_AFTER_DRAINING, RETRY_AFTER_NOT_READY, ApiError, error_responses
from app.audio.formats import DEFAULT_SAMPLE_RATE, FORMATS, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, RESPONSE_FORMATS
from app.audio.reference import REFERENCE_SECONDS
from app.engine_protocol import SpeechEngine
from app.lifecycle import Lifecycle
from app.settings import Settings
from app.speech.batch import BatchSlots
from app.speech.jobs import check_model
from app.speech.models import served_models

router = APIRouter()
_CREATED = 1_767_225_600  # 2026-01-01: models are served, not trained here; a fixed timestamp keeps listings stable


def model_object(model: str, engine: SpeechEngine) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": _CREATED, "owned_by": f"speech-service/{engine.name}"}


@router.get("/v1/models", responses=error_responses(401, 429))
async def list_models(
    engine: Annotated[SpeechEngine, Depends(get_engine)], settings: Annotated[Settings, Depends(get_settings)]
) -> dict[str, Any]:
    return {"object": "list", "data": [model_object(model, engine) for model in served_models(engine, settings)]}


@router.get("/v1/models/{model:path}", responses=error_responses(401, 404, 429))  # ids hold "/"
async def retrieve_model(
    model: str,
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    settings: Annotated[Settings, Depends(get_settings)],
) -> dict[str, Any]:
    """One model of the list (the OpenAI SDKs' `models.retrieve`); a model not served is a 404 `model_not_found`."""
    if not model or model.endswith("/"):  # "/v1/models/", "/v1/models/tts-1/": a path of this router's, no model id
        raise StarletteHTTPException(404)
    check_model(model, served_models(engine, settings))
    return model_object(model, engine)


@router.get("/v1/audio/capabilities", responses=error_responses(401, 429))
async def speech_capabilities(
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    settings: Annotated[Settings, Depends(get_settings)],
    slots: Annotated[BatchSlots, Depends(get_batch_slots)],
) -> dict[str, Any]:
    """What this server's engine honours in a speech request, so that a client (the playground at /) offers only
    that: formats and their sample rates, speeds, instructions, languages, cloning, the Qwen3-TTS task types and word
    timestamps; and the limits a request, a batch, a WebSocket session and a clip to clone from are held to, read
    where the routes read them."""
    caps = engine.capabilities()
    low, high = caps.speed_range
    shortest, longest = REFERENCE_SECONDS
    return {
        "engine": engine.name,
        "model": engine.model_id,
        "response_formats": list(RESPONSE_FORMATS),
        "stream_formats": ["audio", "sse"],
        "sample_rate": DEFAULT_SAMPLE_RATE,
        "sample_rate_range": {"min": MIN_SAMPLE_RATE, "max": MAX_SAMPLE_RATE},
        # per format, from the formats table: the rates its codec carries (null: any in the range) and the rate its
        # decoder gives back whatever was asked (null: the one asked; opus: 48000), which a player is set by
        "formats": {
            name: {
                "content_type": fmt.content_type,
                "sample_rates": sorted(fmt.sample_rates) if fmt.sample_rates is not None else None,
                "decoded_sample_rate": fmt.decoded_rate,
            }
            for name, fmt in FORMATS.items()
        },
        "max_input_chars": min(caps.max_input_chars, settings.max_input_chars),
        "max_body_bytes": settings.max_body_bytes,  # of any request's body: a batch's, a reference audio's
        # POST /v1/audio/speech/batch: its items and their characters in all (`check_size`), the items of all batches
        # synthesized at once (the slots its items take), and its deadline, whole
        "batch": {
            "max_items": settings.batch_max_items,
            "max_chars": settings.batch_max_chars,
            "concurrency": slots.size,
            "timeout_s": settings.request_timeout_s,
        },
        # WS /v1/audio/speech/stream: each message but session.config (which `max_body_bytes` holds), the wait for
        # a session.config, a session's silence before it is closed, and how far its text is read ahead of its speech
        "websocket": {
            "max_message_bytes": settings.ws_max_message_bytes,
            "config_timeout_s": settings.ws_config_timeout_s,
            "idle_timeout_s": settings.ws_idle_timeout_s,
            "max_read_ahead_chars": settings.ws_max_read_ahead_chars,
        },
        # a clip to clone from: a voice upload's `audio_sample`, a request's `ref_audio`
        "reference_audio": {
            "max_bytes": settings.ref_audio_max_bytes,
            "min_seconds": shortest,
            "max_seconds": longest,
        },
        "speed": {"min": low, "max": high},
        "instructions": caps.instructions,
        "languages": list(caps.languages),
        "voice_cloning": caps.voice_cloning,
        "task_types": sorted(t.value for t in caps.task_types),
        "seed": caps.seed,
        "max_new_tokens": caps.max_new_tokens,
        "initial_codec_chunk_frames": list(caps.initial_chunk_frames) if caps.initial_chunk_frames else None,
        "word_timestamps": caps.word_timestamps,
        # vllm-omni 0.30's fields: the width of a `speaker_embedding` this model clones from (null: it cannot), and
        # whether `extra_params` is honoured
        "speaker_embedding_dim": caps.speaker_embedding_dim,
        "extra_params": caps.extra_params,
    }


def engine_failed(name: str, detail: str) -> JSONResponse:
    """Both probes' answer for an engine gone for good: no Retry-After, as no wait here mends it."""
    message = f"The {name} engine has failed: {detail}. Restart the server."
    return ApiError(503, message, type="server_error", code="engine_failed").response()


@router.get("/health", responses=error_responses(503))
async def health(engine: Annotated[SpeechEngine, Depends(get_engine)]) -> JSONResponse:
    """Liveness: the process serves, or will once its engine is warm. 503 only where the engine is gone for good (it
    died, or never started), which only a restart mends; a slow start or a drain answers 200 here."""
    state = engine.health()
    if state.failed:
        return engine_failed(engine.name, state.detail)
    return JSONResponse({"status": "ok"})


@router.get("/ready", responses=error_responses(503))
async def ready(
    engine: Annotated[SpeechEngine, Depends(get_engine)], lifecycle: Annotated[Lifecycle, Depends(get_lifecycle)]
) -> JSONResponse:
    # Retry-After as a request refused for the same reason is told it
    if lifecycle.draining:
        headers = {"Retry-After": RETRY_AFTER_DRAINING}
        message, code = "The server is shutting down.", "server_shutting_down"
        return ApiError(503, message, type="server_error", code=code, headers=headers).response()
    state = engine.health()
    if state.failed:  # as /health says it
        return engine_failed(engine.name, state.detail)
    if not state.ready:
        headers = {"Retry-After": RETRY_AFTER_NOT_READY}
        message = f"The {engine.name} engine is not ready: {state.detail}."
        return ApiError(503, message, type="server_error", code="engine_unavailable", headers=headers).response()
    return JSONResponse({"status": "ready", "engine": engine.name, "detail": state.detail})


@router.get("/metrics")
async def metrics() -> Response:
    """Prometheus exposition of the process registry, where vllm-omni records its own families (`vllm_omni:*`,
    `vllm:*`) when the omni engine runs."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
