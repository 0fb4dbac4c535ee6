"""What route handlers get injected: the engine, the settings and the voice catalog, all held on app.state."""

from __future__ import annotations

from fastapi import Request

from app.admission import AdmissionGate
from app.engines.base import SpeechEngine
from app.lifecycle import Lifecycle
from app.settings import Settings
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog


def get_engine(request: Request) -> SpeechEngine:
    return request.app.state.engine


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_gate(request: Request) -> AdmissionGate:
    return request.app.state.gate


def get_lifecycle(request: Request) -> Lifecycle:
    return request.app.state.lifecycle


def get_voice_store(request: Request) -> VoiceStore:
    return request.app.state.voice_store


def get_catalog(request: Request) -> VoiceCatalog:
    engine: SpeechEngine = request.app.state.engine
    settings: Settings = request.app.state.settings
    return VoiceCatalog(tuple(engine.voices()), settings.voice_aliases)


def served_models(engine: SpeechEngine, settings: Settings) -> list[str]:
    return [engine.model_id, *(alias for alias in settings.model_aliases if alias != engine.model_id)]
