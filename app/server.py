"""The ASGI application: routes, error shapes, middleware, and the engine's lifecycle."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from app import IMPORTED_AT, __version__, loop_lag, metrics
from app.admission import AdmissionGate
from app.api import docs, meta, playground, profile, speech, speech_batch, speech_stream, voices
from app.api.auth import ApiKeyMiddleware, load_api_keys
from app.api.errors import install_error_handlers
from app.api.middleware import (
    ApiRequestLogMiddleware,
    BodySizeLimitMiddleware,
    RequestIdMiddleware,
    SpeechAccountingMiddleware,
)
from app.audio.fetch import tls_verification
from app.engine_protocol import SpeechEngine, TimesItsStart, profiled
from app.engines import create_engine
from app.lifecycle import Lifecycle
from app.settings import InvalidSettings, Settings
from app.speech.batch import BatchSlots
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog

log = logging.getLogger(__name__)


def create_app(settings: Settings, engine: SpeechEngine | None = None) -> FastAPI:
    # the files the settings name, read before the engine is made: one at fault stops the start in its own words,
    # not after the engine's model files were read, nor behind what the engine refuses
    keys = load_api_keys(settings.api_keys, settings.api_keys_file)
    check_ca_bundle(settings.ref_audio_ca_bundle)
    engine = engine or create_engine(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.switch_interval_ms is not None:  # before the engine starts its threads in this process
            sys.setswitchinterval(settings.switch_interval_ms / 1000)
            log.info("thread switch interval", extra={"seconds": sys.getswitchinterval()})
        # Load in the background: /health answers at once, /ready turns 200 when the engine is warm.
        lifecycle.engine_loading = True
        loading = asyncio.create_task(start_engine(engine), name="engine-start")
        loading.add_done_callback(_log_start_failure)

        def loaded(task: asyncio.Task[None]) -> None:
            # started, or failed: nothing of it runs on. Cancelled by the shutdown, its thread still loads
            if not task.cancelled():
                lifecycle.engine_loading = False

        loading.add_done_callback(loaded)
        # what a replica that died left of a voice's create or delete, swept beside the engine's start, in a thread:
        # the store may be a slow network volume, which must hold up neither the listening nor the engine
        sweeping = asyncio.create_task(asyncio.to_thread(app.state.voice_store.sweep_leftovers), name="voice-sweep")
        lag = asyncio.create_task(loop_lag.watch(metrics.LOOP_LAG.observe), name="loop-lag")
        try:
            yield
        finally:
            loading.cancel()
            sweeping.cancel()  # a thread still at it is left to finish on its own
            lag.cancel()
            await asyncio.gather(lag, return_exceptions=True)
            await engine.close()

    app = FastAPI(
        title="Speech service",
        version=__version__,
        summary="OpenAI-compatible streaming text-to-speech.",
        lifespan=lifespan,
        docs_url=None,  # served by app.api.docs, from local assets
        redoc_url=None,
        # a path with a trailing slash is a 404, as any unknown route is (its message names the route without the
        # slash), not a 307 to that route: a POST client (the OpenAI SDKs) follows such a redirect poorly
        redirect_slashes=False,
    )
    app.openapi = lambda: docs.openapi_without_422(app)  # type: ignore[method-assign]
    app.state.settings = settings
    app.state.engine = engine
    app.state.catalog = VoiceCatalog(tuple(engine.voices()), settings.voice_aliases)  # an engine's voices are fixed
    known = ", ".join(voice.id for voice in app.state.catalog.voices)
    for alias, target in app.state.catalog.unknown_targets().items():
        log.warning(
            "SPEECH_VOICE_ALIASES: %r names %r, which is no voice of this engine (%s); it speaks in the default voice",
            alias,
            target,
            known,
        )
    for alias, target in app.state.catalog.shadowed_aliases().items():
        log.warning(
            "SPEECH_VOICE_ALIASES: %r names %r, but %r is also a voice of this engine, which a request for it gets",
            alias,
            target,
            alias,
        )
    metrics.BUILD.info({"version": __version__, "engine": engine.name, "model": engine.model_id})
    app.state.gate = admission_gate(settings, engine)
    app.state.voice_store = VoiceStore(settings.voice_store)
    app.state.lifecycle = Lifecycle(settings.drain_timeout_s, app.state.gate)
    app.state.batch_slots = BatchSlots(app.state.gate.max_concurrency, settings.batch_concurrency)
    lifecycle: Lifecycle = app.state.lifecycle
    metrics.READY.set_function(lambda: float(engine.health().ready and not lifecycle.draining))
    install_error_handlers(app)
    app.include_router(speech.router)
    app.include_router(speech_batch.router)
    app.include_router(speech_stream.router)
    app.include_router(meta.router)
    app.include_router(voices.router)
    if settings.profiler_dir:
        app.include_router(profile.router)
        if profiled(engine) is None:
            log.warning(
                "SPEECH_PROFILER_DIR is set, but the %s engine has no profiler: /admin/profile/* answer 400",
                engine.name,
            )
    app.include_router(docs.router)
    app.mount(docs.ASSETS_PATH, StaticFiles(directory=docs.ASSETS_DIR), name="docs-assets")
    app.include_router(playground.router)
    app.mount(playground.STATIC_PATH, StaticFiles(directory=playground.STATIC_DIR), name="static")
    answer_head(app)  # once every route is in
    app.add_middleware(
        BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes, read_timeout_s=settings.request_read_timeout_s
    )
    app.add_middleware(ApiKeyMiddleware, keys=keys, max_concurrency_per_key=settings.api_key_max_concurrency)
    # every response, 413 and 500 included, carries the id; inside the accounting and the request log, so that its
    # own refusal (an X-Request-Id that is no text) is counted and logged as every other refusal is
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(SpeechAccountingMiddleware)
    app.add_middleware(ApiRequestLogMiddleware)  # outside the key check: a refused key is logged too
    if settings.cors_origins:
        # outermost: a preflight is answered before the key check, and a browser can read every error, 401 included
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["*"],  # mirrors what the preflight asks for, Authorization included
            expose_headers=["X-Request-Id", "Retry-After", *speech.WHOLE_FILE_HEADERS],
            max_age=600,
        )
    return app


def check_ca_bundle(path: str | None) -> None:
    """SPEECH_REF_AUDIO_CA_BUNDLE loaded once at start, as each ref_audio fetch loads it: one that is missing,
    unreadable or holds no certificate would otherwise start the server and fail every https fetch instead."""
    try:
        tls_verification(path)
    except OSError as exc:  # ssl.SSLError too: a file of no certificate
        raise InvalidSettings(
            f"SPEECH_REF_AUDIO_CA_BUNDLE: cannot load {path} as CA certificates ({exc}): set a readable PEM file, or "
            "unset it for the system's trust store"
        ) from None


def answer_head(app: FastAPI) -> None:
    """Every GET route answers HEAD too, as HTTP asks (load balancers and uptime checkers probe with it): the GET's
    answer, whose body the server leaves unsent. FastAPI routes only the methods they name: each GET gets a HEAD route
    of its own, left out of the OpenAPI document, where a second operation would repeat the GET's id. Each goes right
    after its GET, ahead of a mount that would take any method on a path under it (the docs' assets)."""
    routes = app.router.routes
    for route in list(routes):
        if isinstance(route, APIRoute) and "GET" in route.methods and "HEAD" not in route.methods:
            at = len(routes)
            app.router.add_api_route(
                route.path,
                route.endpoint,
                methods=["HEAD"],
                include_in_schema=False,
                response_model=route.response_model,
                status_code=route.status_code,
                response_class=route.response_class,
                dependencies=route.dependencies,
                name=route.name,
            )
            routes.insert(routes.index(route) + 1, routes.pop(at))


async def start_engine(engine: SpeechEngine) -> None:
    await engine.start()
    freeze_startup_heap()  # in the same step that made the engine ready: no request runs in between
    record_start(engine)


def record_start(engine: SpeechEngine) -> dict[str, float]:
    """The start's phases as the engine timed them, and its total since the service's first import: logged once and
    exported (`speech_start_seconds`), so that probes and autoscaling can be set from what a start really takes."""
    phases = engine.start_phases() if isinstance(engine, TimesItsStart) else {}
    phases["total"] = round(time.perf_counter() - IMPORTED_AT, 3)
    for phase, seconds in phases.items():
        metrics.START.labels(phase).set(seconds)
    log.info("started", extra={"engine": engine.name, **{f"{phase}_s": s for phase, s in phases.items()}})
    return phases


def freeze_startup_heap() -> None:
    """Everything alive once the engine is warm (libraries, the engine's model code and state) lives as long as the
    process: it is moved out of the garbage collector's reach, so that the full collections serving triggers traverse
    only what serving allocated. In the omni engine's process torch and vLLM make that millions of objects, and every
    full collection over them would stop the event loop, with every stream on it. vLLM's own API server freezes its
    startup heap the same way."""
    gc.collect()
    gc.freeze()


def admission_gate(settings: Settings, engine: SpeechEngine) -> AdmissionGate:
    concurrency = settings.max_concurrency or engine.capabilities().max_concurrency
    queue = settings.max_queue if settings.max_queue is not None else 2 * concurrency
    gate = AdmissionGate(concurrency, queue, settings.queue_timeout_s)
    metrics.IN_FLIGHT.set_function(lambda: gate.in_flight)
    metrics.QUEUE_DEPTH.set_function(lambda: gate.queued)
    log.info("admission", extra={"max_concurrency": concurrency, "max_queue": queue})
    return gate


def _log_start_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("engine failed to start", exc_info=task.exception())
