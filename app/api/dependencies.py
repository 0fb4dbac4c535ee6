"""What route handlers get injected: the engine, the settings and the voice catalog, all held on app.state.

Every provider is a coroutine function: FastAPI runs a plain function in a worker thread, and a thread hop per
dependency per request costs the event loop more than reading an attribute."""

from __future__ import annotations

from fastapi import Request
from starlette.datastructures import State

from app.engine_protocol import SpeechEngine
from app.lifecycle import Lifecycle
from app.settings import Settings
from app.speech.batch import BatchSlots
from app.speech.run import SpeechService
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog


async def get_engine(request: Request) -> SpeechEngine:
    return request.app.state.engine


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_lifecycle(request: Request) -> Lifecycle:
    return request.app.state.lifecycle


async def get_voice_store(request: Request) -> VoiceStore:
    return request.app.state.voice_store


async def get_catalog(request: Request) -> VoiceCatalog:
    return request.app.state.catalog


def service_of(state: State) -> SpeechService:
    """What serves speech, for either transport (the WebSocket has no dependency injection of its own)."""
    return SpeechService(state.engine, state.settings, state.catalog, state.voice_store, state.gate, state.lifecycle)


async def get_service(request: Request) -> SpeechService:
    return service_of(request.app.state)


async def get_batch_slots(request: Request) -> BatchSlots:
    return request.app.state.batch_slots
