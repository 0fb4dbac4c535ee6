"""Voices: the engine's own (with their aliases) and voices registered for cloning, shared by every replica."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from fastapi.responses import JSONResponse

from app.api.dependencies import get_catalog, get_engine, get_settings, get_voice_store
from app.api.errors import ApiError, error_responses, invalid_param, media_type, shown_name
from app.audio.reference import REFERENCE_SECONDS, prepare_reference_audio
from app.engine_protocol import SpeechEngine, UnsupportedParameter
from app.settings import Settings
from app.speech.errors import invalid_value, too_many_characters
from app.text.hygiene import text_problem
from app.voice_store import ID_PATTERN, NAME_PATTERN, StoredVoice, VoiceExists, VoiceNotFound, VoiceStore
from app.voices import GENERIC_VOICE, MAX_VOICE_NAME_CHARS, VoiceCatalog

router = APIRouter()


def _builtin(catalog: VoiceCatalog, engine: SpeechEngine) -> list[dict[str, Any]]:
    return [
        {
            "id": voice.id,
            "name": voice.name,
            "type": "builtin",
            "languages": list(voice.languages),
            "engine": engine.name,
            "aliases": catalog.aliases_of(voice.id),
        }
        for voice in catalog.voices
    ]


def _uploaded(voice: StoredVoice, engine: SpeechEngine) -> dict[str, Any]:
    languages = [lang for lang in engine.languages() if lang != "Auto"]
    # named by its name or its id wherever a voice is named; no other name, as a built-in voice may have
    return {**voice.public(), "type": "uploaded", "languages": languages, "engine": engine.name, "aliases": []}


def _check_name(name: str) -> None:
    """A name from the path: echoed in errors, so it must be clean text first, and no longer than a voice's name may
    be in a request (the server reads a path of any length: a longer one was quoted back whole)."""
    if len(name) > MAX_VOICE_NAME_CHARS:
        raise invalid_param("name", too_many_characters("name", MAX_VOICE_NAME_CHARS, len(name)), "string_too_long")
    if (problem := text_problem(name)) is not None:
        raise invalid_param("name", f"Invalid voice name: {problem}.")


def _not_found(name: str) -> ApiError:
    return ApiError(404, f"No voice named '{name}'.", param="name", code="voice_not_found")


def _uploaded_0_30(voice: StoredVoice) -> dict[str, Any]:
    """A registered voice as vllm-omni 0.30 lists it under `uploaded_voices`."""
    entry: dict[str, Any] = {
        "name": voice.name,
        "consent": "",  # vllm-omni keeps a consent recording's id; this server keeps that consent was given
        "created_at": voice.created_at,
        "mime_type": "audio/wav",
        "embedding_source": "audio",
        "embedding_dim": None,
    }
    if voice.ref_text:
        entry["ref_text"] = voice.ref_text
    return entry


@router.get("/v1/audio/voices", responses=error_responses(401, 429))
async def list_voices(
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
    store: Annotated[VoiceStore, Depends(get_voice_store)],
) -> dict[str, Any]:
    """vllm-omni 0.30's listing, which its clients read unchanged: `voices`, the names a request may give (with the
    generic "default"), and `uploaded_voices`; beside them `data`, this server's own listing: one object per voice
    with its id, name, type (builtin or uploaded), languages, engine and aliases."""
    # an engine that cannot clone never reads the store (which it may not even be able to create)
    uploaded = await asyncio.to_thread(store.list) if engine.capabilities().voice_cloning else []
    # the model's default voice first (what a client that takes the first name speaks with), the generic name last
    names = [voice.id for voice in catalog.voices] + [voice.name for voice in uploaded]
    if catalog.resolve(GENERIC_VOICE) is not None and GENERIC_VOICE not in names:
        names.append(GENERIC_VOICE)
    return {
        "voices": names,
        "uploaded_voices": [_uploaded_0_30(voice) for voice in uploaded],
        "object": "list",
        "data": [*_builtin(catalog, engine), *(_uploaded(voice, engine) for voice in uploaded)],
    }


@router.get("/v1/audio/voices/{name}", responses=error_responses(401, 404, 429))
async def get_voice(
    name: str,
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
    store: Annotated[VoiceStore, Depends(get_voice_store)],
) -> dict[str, Any]:
    _check_name(name)
    speaks_with = catalog.resolve(name)  # an id, an alias, "default": the engine voice a request naming it gets
    for voice in _builtin(catalog, engine):
        if voice["id"] == speaks_with:
            return voice
    if not engine.capabilities().voice_cloning:  # a registered voice this engine cannot speak, as the list hides it
        raise _not_found(name)
    try:
        return _uploaded(await asyncio.to_thread(store.get, name), engine)
    except VoiceNotFound:
        raise _not_found(name) from None


UPLOAD_FIELDS = ("name", "audio_sample", "consent", "ref_text")
AUDIO_SAMPLE = (
    "{:g}–{:g} s of the voice, no larger than SPEECH_REF_AUDIO_MAX_BYTES (`reference_audio` in GET "
    "/v1/audio/capabilities): wav, mp3, flac, ogg, m4a..."
).format(*REFERENCE_SECONDS)


def cloning_unsupported(engine: SpeechEngine) -> ApiError:
    """An upload to an engine that cannot clone: a voice stored here could never be spoken."""
    return ApiError(
        400,
        f"This server's model ('{engine.model_id}', {engine.name} engine) cannot clone voices, so it cannot "
        "register one. Voice cloning needs a Qwen3-TTS Base checkpoint on the omni engine.",
        code="voice_cloning_unsupported",
    )


async def multipart_form(request: Request, engine: Annotated[SpeechEngine, Depends(get_engine)]) -> None:
    """The upload is a multipart form (it carries a file): any other body is told so, before its fields are read
    (which would name a field missing that a JSON body did send). Each field once, and no other (as a JSON body's
    unknown argument is refused): a field sent twice had one of its values taken silently, a misspelt one ignored."""
    if not engine.capabilities().voice_cloning:
        # said first, whatever the body: no form would register a voice here (raised from this dependency, it comes
        # before the route's own fields are checked, as their refusals would otherwise)
        raise cloning_unsupported(engine)
    kind = media_type(request)
    if kind != "multipart/form-data":
        raise ApiError(
            400,
            "POST /v1/audio/voices takes a multipart/form-data body (fields name, audio_sample: the file, consent, "
            f"and ref_text if you have it), not {kind or 'a body without a Content-Type'}.",
            code="invalid_request",
        )
    sent = Counter(field for field, _ in (await request.form()).multi_items())  # the form the route's fields read
    for field, times in sent.items():
        if field not in UPLOAD_FIELDS:
            shown = shown_name(field)
            fields = f"{', '.join(UPLOAD_FIELDS[:-1])} and {UPLOAD_FIELDS[-1]}"
            raise invalid_param(shown, f"Unknown field '{shown}': an upload has {fields}.")
        if times > 1:
            raise invalid_param(field, f"'{field}' was sent {times} times; send it once.")


@router.post(
    "/v1/audio/voices",
    status_code=201,
    responses=error_responses(400, 401, 408, 409, 413, 415, 429),
    dependencies=[Depends(multipart_form)],
)
async def create_voice(
    name: Annotated[str, Form(description="[a-z0-9_-]{1,64}")],
    audio_sample: Annotated[UploadFile, File(description=AUDIO_SAMPLE)],
    consent: Annotated[bool, Form(description="The speaker agreed to have their voice cloned: must be true.")],
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
    store: Annotated[VoiceStore, Depends(get_voice_store)],
    settings: Annotated[Settings, Depends(get_settings)],
    ref_text: Annotated[str | None, Form(max_length=4096, description="What the sample says.")] = None,
) -> JSONResponse:
    if not NAME_PATTERN.fullmatch(name):
        raise invalid_param("name", "'name' must be 1–64 characters of a-z, 0-9, '_' and '-'.")
    if ID_PATTERN.fullmatch(name):
        raise invalid_param("name", "'name' cannot have the shape of a voice's id ('voice_' and 32 hex digits).")
    if ref_text is not None and (problem := text_problem(ref_text, multiline=True)) is not None:
        raise invalid_param("ref_text", invalid_value("ref_text", problem))
    if not consent:
        raise invalid_param("consent", "Registering a voice needs 'consent' = true: the speaker's agreement.")
    if catalog.resolve(name) is not None:
        raise ApiError(409, f"'{name}' is a built-in voice or alias.", param="name", code="voice_exists")
    max_bytes = settings.ref_audio_max_bytes  # as a request's `ref_audio` is held to it
    data = await audio_sample.read(max_bytes + 1)
    if len(data) > max_bytes:
        message = f"'audio_sample' is larger than {max_bytes} bytes."
        raise ApiError(413, message, param="audio_sample", code="file_too_large")
    try:
        reference = await asyncio.to_thread(prepare_reference_audio, data)
    except UnsupportedParameter as exc:
        raise invalid_param("audio_sample", exc.message.replace("ref_audio", "audio_sample")) from exc
    try:
        voice = await asyncio.to_thread(store.create, name, reference, ref_text)
    except VoiceExists:
        raise ApiError(409, f"A voice named '{name}' already exists.", param="name", code="voice_exists") from None
    return JSONResponse(voice.public(), status_code=201, headers={"Location": f"/v1/audio/voices/{name}"})


@router.delete("/v1/audio/voices/{name}", status_code=204, responses=error_responses(400, 401, 404, 429))
async def delete_voice(
    name: str,
    engine: Annotated[SpeechEngine, Depends(get_engine)],
    catalog: Annotated[VoiceCatalog, Depends(get_catalog)],
    store: Annotated[VoiceStore, Depends(get_voice_store)],
) -> Response:
    _check_name(name)
    if catalog.resolve(name) is not None:
        raise invalid_param("name", f"'{name}' is a built-in voice; only uploaded voices can be deleted.")
    if not engine.capabilities().voice_cloning:  # not found here, as by name: replicas that clone share the store
        raise _not_found(name)
    try:
        await asyncio.to_thread(store.delete, name)
    except VoiceNotFound:
        raise _not_found(name) from None
    return Response(status_code=204)
