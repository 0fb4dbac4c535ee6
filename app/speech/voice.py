"""The voice a request speaks in, resolved once per request (per session.config over the WebSocket): its reference
audio decoded (fetched first when it is a URL), or a registered (cloned) voice's reference and transcript put in
place of the name."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.audio.fetch import fetch_reference
from app.audio.reference import is_url, prepare_reference_audio
from app.engine_protocol import ReferenceAudio, SpeechEngine, UnsupportedParameter
from app.settings import Settings
from app.speech.errors import Refused
from app.speech.options import SpeechOptions
from app.voice_store import StoredVoice, VoiceNotFound, VoiceStore
from app.voices import VoiceCatalog

Options = TypeVar("Options", bound=SpeechOptions)  # an HTTP body or a session.config: it keeps its own fields


@dataclass(frozen=True)
class Voice(Generic[Options]):
    """Options whose voice is resolved: every text spoken with them is built from `options` (a registered voice's
    task type, transcript and mode in place) and `reference` (the decoded reference audio, if any)."""

    options: Options
    reference: ReferenceAudio | None


async def decode_reference(value: str, settings: Settings) -> ReferenceAudio:
    policy = settings.fetch_policy()
    try:
        source: str | bytes = await fetch_reference(value.strip(), policy) if is_url(value) else value
        return await asyncio.to_thread(prepare_reference_audio, source, policy.max_bytes)
    except UnsupportedParameter as exc:
        raise Refused(exc.param, exc.message) from exc


async def registered_voice(options: SpeechOptions, catalog: VoiceCatalog, store: VoiceStore) -> StoredVoice | None:
    """The registered voice a request names, when the name is not one of the engine's own voices or aliases."""
    if catalog.resolve(options.voice_name) is not None:
        return None
    try:
        return await asyncio.to_thread(store.get, options.voice_name)
    except VoiceNotFound:
        return None


Decoder = Callable[[str], Awaitable[ReferenceAudio]]


async def resolve_voice(
    options: Options,
    engine: SpeechEngine,
    settings: Settings,
    catalog: VoiceCatalog,
    store: VoiceStore,
    decode: Decoder | None = None,
) -> Voice[Options]:
    """The request's reference audio, decoded (by `decode` where given: a batch decodes each reference once), and a
    registered (cloned) voice's reference and transcript in place."""
    caps = engine.capabilities()
    decode = decode or functools.partial(decode_reference, settings=settings)
    reference = await decode(options.ref_audio) if caps.voice_cloning and options.ref_audio else None
    registered = await registered_voice(options, catalog, store) if reference is None else None
    if registered is None:
        return Voice(options, reference)
    name = options.voice_name
    if not caps.voice_cloning:
        raise Refused("voice", f"'{name}' is a registered (cloned) voice; this model cannot clone.")
    try:
        reference = await asyncio.to_thread(store.audio, registered)
    except VoiceNotFound:
        raise Refused("voice", f"The voice '{name}' was just deleted.", "voice_not_found") from None
    options = options.model_copy(
        update={
            "task_type": options.task_type or "Base",
            "ref_text": registered.ref_text,
            "x_vector_only_mode": not registered.has_ref_text,  # without a transcript: the speaker embedding only
        }
    )
    return Voice(options, reference)
