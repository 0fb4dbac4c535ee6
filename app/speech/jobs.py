"""Validated options and a text become a SynthesisJob, checked against what the engine can honour.

Schema checks (types, ranges, unknown fields) happen in pydantic (`app.speech.options`); this module checks what
depends on the engine and the server's configuration: served models, voices, languages, task types and the Qwen3-TTS
extensions. A refusal is a `Refused` naming the field (`UnknownModel` for the model).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from app.audio.formats import DEFAULT_SAMPLE_RATE, FORMATS
from app.engine_protocol import EngineCapabilities, ReferenceAudio, SynthesisJob, TaskType
from app.speech.errors import Refused, UnknownModel, too_many_characters
from app.speech.options import SpeechOptions
from app.text.normalize import UnreadableText, first_non_latin, normalize_text
from app.voices import VoiceCatalog


@dataclass(frozen=True, slots=True)
class OutputSpec:
    response_format: str
    sample_rate: int
    whole_file: bool = False  # one complete file with its length (`stream: false`), not a stream


# vllm-omni 0.30 sets these keys of `extra_params` on the talker's sampling parameters, past vLLM's own checks: the
# values are checked here instead, so that a bad one is a 400 rather than a failed request inside the engine.
def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_SAMPLING_EXTRA_PARAMS = {
    "temperature": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "top_p": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "top_k": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= -1, "an integer >= -1 (-1: off)"),
}


def check_model(model: str, served_models: list[str], also_accepted: Sequence[str] = ()) -> None:
    if model not in served_models and model not in also_accepted:
        raise UnknownModel(f"The model '{model}' does not exist. Available models: {', '.join(served_models)}.")


def _check_language(language: str | None, caps: EngineCapabilities) -> str | None:
    if language is None:
        return None
    for known in caps.languages:
        if known.casefold() == language.strip().casefold():
            return known
    raise Refused("language", f"Unsupported language '{language}'. Supported: {', '.join(caps.languages)}.")


def _task_type(request: SpeechOptions, caps: EngineCapabilities) -> TaskType:
    """The requested task type, else what the request implies: cloning when it brings reference audio, else the
    model's preset voices, else the one task the model has."""
    if request.task_type:
        return TaskType(request.task_type)
    clones = request.ref_audio is not None or request.ref_text is not None or request.speaker_embedding is not None
    if caps.voice_cloning and clones:
        return TaskType.BASE
    if TaskType.CUSTOM_VOICE in caps.task_types or len(caps.task_types) != 1:
        return TaskType.CUSTOM_VOICE
    return next(iter(caps.task_types))


def _check_extensions(request: SpeechOptions, caps: EngineCapabilities) -> TaskType:
    task_type = _task_type(request, caps)
    if task_type not in caps.task_types:
        supported = ", ".join(sorted(t.value for t in caps.task_types))
        raise Refused("task_type", f"task_type '{task_type.value}' is not supported by this model ({supported}).")
    if not caps.voice_cloning:
        for param in ("ref_audio", "ref_text", "x_vector_only_mode"):
            if getattr(request, param) is not None:
                raise Refused(param, f"'{param}' is not supported: this model cannot clone voices.")
    low, high = caps.speed_range
    if not low <= request.speed <= high:
        message = (
            f"This model speaks at speed {low:g} only."
            if low == high
            else f"'speed' must be between {low:g} and {high:g} for this model."
        )
        raise Refused("speed", message)
    if request.max_new_tokens is not None and not caps.max_new_tokens:
        raise Refused("max_new_tokens", "'max_new_tokens' is not supported by this model.")
    if request.seed is not None and not caps.seed:
        raise Refused("seed", "'seed' is not supported by this model.")
    frames = request.initial_codec_chunk_frames
    if frames is not None:
        if caps.initial_chunk_frames is None:
            message = "'initial_codec_chunk_frames' is not supported by this model or deployment."
            raise Refused("initial_codec_chunk_frames", message)
        low_frames, high_frames = caps.initial_chunk_frames
        if not low_frames <= frames <= high_frames:
            raise Refused(
                "initial_codec_chunk_frames",
                f"'initial_codec_chunk_frames' must be between {low_frames} and {high_frames} on this deployment.",
            )
    if request.non_streaming_mode is not None and not caps.prompt_modes:
        raise Refused("non_streaming_mode", "'non_streaming_mode' is not supported by this model.")
    _check_speaker_embedding(request, caps, task_type)
    _check_extra_params(request, caps)
    return task_type


def _check_speaker_embedding(request: SpeechOptions, caps: EngineCapabilities, task_type: TaskType) -> None:
    """vllm-omni 0.30's rules: Base only, not with ref_audio, the talker's own width."""
    embedding = request.speaker_embedding
    if embedding is None:
        return
    if caps.speaker_embedding_dim is None:
        message = (
            "'speaker_embedding' is not supported: this engine clones from reference audio only ('ref_audio', with "
            "'ref_text' or 'x_vector_only_mode')."
            if caps.voice_cloning
            else "'speaker_embedding' is not supported: this model cannot clone voices."
        )
        raise Refused("speaker_embedding", message)
    if task_type != TaskType.BASE:
        raise Refused("speaker_embedding", "'speaker_embedding' is only valid for task_type Base.")
    if request.ref_audio is not None:
        raise Refused("speaker_embedding", "'speaker_embedding' and 'ref_audio' are mutually exclusive.")
    if len(embedding) != caps.speaker_embedding_dim:
        raise Refused(
            "speaker_embedding",
            f"'speaker_embedding' has {len(embedding)} dimensions; this model's are {caps.speaker_embedding_dim}.",
        )


def _check_extra_params(request: SpeechOptions, caps: EngineCapabilities) -> None:
    if request.extra_params is None:
        return
    if not caps.extra_params:
        raise Refused("extra_params", "'extra_params' is not supported by this model.")
    for name, (valid, expected) in _SAMPLING_EXTRA_PARAMS.items():
        value = request.extra_params.get(name)
        if value is not None and not valid(value):
            raise Refused("extra_params", f"'extra_params.{name}' must be {expected}.")


def check_word_timestamps(language: str | None, text: str, caps: EngineCapabilities) -> None:
    """Word timestamps for this text in this language, or a 400 naming `word_timestamps` before any audio.
    `language` is the resolved one (None: omitted)."""
    if not caps.word_timestamps:
        missing = f": {caps.word_timestamps_missing}" if caps.word_timestamps_missing else ""
        raise Refused("word_timestamps", f"'word_timestamps' is not supported by this model{missing}.")
    timed = caps.word_timestamps_languages
    if timed is None:
        return
    if language is not None and language != "Auto" and language not in timed:
        raise Refused(
            "word_timestamps",
            f"'word_timestamps' can time {', '.join(timed)} speech only on this model, not {language}: "
            "omit word_timestamps for this language.",
        )
    if language in (None, "Auto") and (foreign := first_non_latin(text)) is not None:
        raise Refused(
            "word_timestamps",
            f"'word_timestamps' can time {', '.join(timed)} speech only on this model and cannot time "
            f"{foreign.describe()}: omit word_timestamps for this text.",
        )


def _output_spec(request: SpeechOptions, whole_file: bool) -> OutputSpec:
    sample_rate = request.sample_rate or DEFAULT_SAMPLE_RATE
    allowed = FORMATS[request.response_format].sample_rates
    if allowed is not None and sample_rate not in allowed:
        rates = ", ".join(str(r) for r in sorted(allowed))
        raise Refused("sample_rate", f"{request.response_format} cannot carry {sample_rate} Hz; choose one of {rates}.")
    return OutputSpec(request.response_format, sample_rate, whole_file)


def same_voice(a: str, b: str, catalog: VoiceCatalog) -> bool:
    """Two names of one voice: the same name in any case, or names (an alias, a voice id) of the same engine voice."""
    if a.strip().casefold() == b.strip().casefold():
        return True
    voice = catalog.resolve(a)
    return voice is not None and voice == catalog.resolve(b)


def check_input_length(text: str, caps: EngineCapabilities) -> None:
    """`Refused` naming `input` where `text` is longer than this server takes (SPEECH_MAX_INPUT_CHARS, within the
    engine's own): checked before any other work on the request (a reference audio to fetch)."""
    if len(text) > caps.max_input_chars:
        raise Refused("input", too_many_characters("input", caps.max_input_chars, len(text)), "string_too_long")


def build_job(
    request: SpeechOptions,
    text: str,
    *,
    request_id: str,
    caps: EngineCapabilities,
    catalog: VoiceCatalog,
    served_models: list[str],
    ref_audio: ReferenceAudio | None = None,
    also_accepted: Sequence[str] = (),
    whole_file: bool = False,
    continues: bool = False,
) -> tuple[SynthesisJob, OutputSpec]:
    """`text` is spoken as `request` asks; `whole_file`: the audio is one complete file, not a stream (the encoder
    then writes exact headers). `ref_audio` is the request's reference audio, already decoded by the caller (decoding
    is CPU work that belongs off the event loop). `served_models` starts with the engine's own model, which an omitted
    `model` means; `also_accepted`: other ids `model` may name (a checkpoint's), not listed in errors. `continues`:
    `text` is a WebSocket utterance's next sentence (joined to the audio before it; SSML is told by its first)."""
    check_model(request.model or served_models[0], served_models, also_accepted)
    if request.speaker is not None and not same_voice(request.speaker, request.voice_name, catalog):
        raise Refused("speaker", "'speaker' is another name for 'voice': send one of them, or the same voice.")
    check_input_length(text, caps)
    try:
        normalized = normalize_text(text, caps.reading, continues)
    except UnreadableText as exc:
        raise Refused("input", str(exc)) from None
    task_type = _check_extensions(request, caps)
    # A cloned or designed voice comes from the reference audio or the instructions; the name then only labels it.
    voice = (
        request.voice_name
        if task_type in (TaskType.BASE, TaskType.VOICE_DESIGN)  # the voice comes from reference audio or a description
        else catalog.resolve(request.voice_name)
    )
    # where `speaker` alone named the voice, the refusal names the field the client sent
    voice_field = "speaker" if request.speaker is not None and request.speaker == request.voice_name else "voice"
    if (
        task_type == TaskType.BASE
        and ref_audio is None
        and request.task_type is None
        and request.ref_text is None
        and request.speaker_embedding is None
    ):
        # nothing but a name on a model that only clones: the caller meant a registered voice that does not exist
        message = (
            f"Unknown voice '{request.voice_name}'. This model speaks in cloned voices: name a voice registered with "
            "POST /v1/audio/voices, or send 'ref_audio' (with its 'ref_text')."
        )
        raise Refused(voice_field, message, "voice_not_found")
    if voice is None:
        known = ", ".join(v.id for v in catalog.voices)
        aliases = sorted(catalog.aliases)
        also = f"; or their aliases: {', '.join(aliases)}" if aliases else ""
        message = f"Unknown voice '{request.voice_name}'. Available voices: {known}{also} (GET /v1/audio/voices)."
        raise Refused(voice_field, message, "voice_not_found")
    language = _check_language(request.language, caps)
    if request.word_timestamps:
        check_word_timestamps(language, normalized, caps)
    job = SynthesisJob(
        # the caller's id may repeat (a retry): the job gets its own, which still starts with it
        request_id=f"{request_id}-{uuid.uuid4().hex[:8]}",
        trace_id=request_id,
        text=normalized,
        voice=voice,
        language=language,
        instructions=request.instructions if caps.instructions else None,
        speed=request.speed,
        task_type=task_type,
        ref_audio=ref_audio,
        ref_text=request.ref_text,
        max_new_tokens=request.max_new_tokens,
        ignore_eos=request.ignore_eos,
        seed=request.seed,
        initial_codec_chunk_frames=request.initial_codec_chunk_frames,
        non_streaming_mode=request.non_streaming_mode,
        word_timestamps=request.word_timestamps,
        speaker_embedding=None if request.speaker_embedding is None else tuple(request.speaker_embedding),
        x_vector_only_mode=bool(request.x_vector_only_mode) or request.speaker_embedding is not None,
        extra_params=request.extra_params,
        continues=continues,
    )
    return job, _output_spec(request, whole_file)
