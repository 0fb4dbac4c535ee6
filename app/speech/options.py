"""The fields both transports accept, with their limits: POST /v1/audio/speech's body (`app.api.schemas.SpeechRequest`)
and the WebSocket's `session.config` (`app.api.speech_stream.SessionConfig`) extend `SpeechOptions`, each with what is
its own (the text and the stream switches over HTTP; the session's switches over the WebSocket). What depends on the
engine and the server's configuration is checked later, by `app.speech.jobs`."""

from __future__ import annotations

import functools
import math
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.audio.formats import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, ResponseFormat
from app.settings import MAX_INPUT_CHARS
from app.text.hygiene import check_multiline, check_single_line
from app.voices import GENERIC_VOICE, MAX_VOICE_NAME_CHARS

TaskTypeName = Literal["CustomVoice", "VoiceDesign", "Base"]

MAX_EMBEDDING_DIM = 8192  # vllm-omni 0.30's bound on `speaker_embedding`
# vllm-omni 0.30's generic voice: the model's default speaker, unless a voice of that name exists
DEFAULT_VOICE = GENERIC_VOICE

# Every text field but `input` (which text normalisation makes speakable): valid Unicode, no control characters.
Name = Annotated[str, AfterValidator(check_single_line)]
FreeText = Annotated[str, AfterValidator(check_multiline)]
# A voice's name or id, however it is sent (`voice`, {"id": ...}, `speaker`): no longer than any voice's, its length
# checked first (before it is scanned, looked up, or quoted back in an "Unknown voice" error), and refused with that
# limit, never the name.
VoiceName = Annotated[str, StringConstraints(max_length=MAX_VOICE_NAME_CHARS), AfterValidator(check_single_line)]


def json_kind(value: Any) -> str:
    """What a JSON value is, in words (for a refusal that says what came instead)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), "a number")


def field_types(annotation: Any) -> tuple[Any, ...]:
    """The types a field's values may have, its `Annotated` metadata and `None` aside: `float | None` is (float,)."""
    if get_origin(annotation) is Annotated:
        return field_types(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return tuple(kind for arg in get_args(annotation) if arg is not type(None) for kind in field_types(arg))
    return (annotation,)


def is_switch(annotation: Any) -> bool:
    """A field of `bool` or `bool | None`."""
    return field_types(annotation) == (bool,)


@functools.cache
def fields_of_type(model: type[BaseModel], kind: type) -> frozenset[str]:
    """The fields of `model` whose values are of `kind` alone (`bool`: its switches, `bool | None` too; `int`: its
    integers), read once per model: its fields do not change once it is built."""
    return frozenset(name for name, field in model.model_fields.items() if field_types(field.annotation) == (kind,))


def null_is_omitted(model: type[BaseModel], data: Any) -> Any:
    """`data` without the optional fields of `model` sent as null: OpenAI's API reads null for an optional parameter
    as not given, and JavaScript and generated clients send it for what they leave unset. Omitted, not set to their
    default: a field sent counts (`stream: false` asks for a whole file; a batch item's field replaces the batch's),
    and null is no value sent. A required field sent as null, and an unknown one, stay for validation to refuse."""
    if not isinstance(data, dict) or not any(value is None for value in data.values()):
        return data
    fields = model.model_fields
    return {
        name: value
        for name, value in data.items()
        if value is not None or name not in fields or fields[name].is_required()
    }


# what a field's JSON schema says of the field rather than of its values: it stays beside the field, outside the
# alternatives a value may match
_FIELD_ANNOTATIONS = ("title", "description", "default", "examples", "deprecated")


def takes_null(schema: dict[str, Any]) -> bool:
    """Whether a field's JSON schema lets its value be null."""
    kind = schema.get("type")
    return (
        kind == "null" or (isinstance(kind, list) and "null" in kind) or any(map(takes_null, schema.get("anyOf", [])))
    )


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's JSON schema that takes null beside its values, as pydantic writes an Optional field's: the values'
    alternatives and null in `anyOf`, the field's title, description and default beside it."""
    about = {key: value for key, value in schema.items() if key in _FIELD_ANNOTATIONS}
    values = {key: value for key, value in schema.items() if key not in _FIELD_ANNOTATIONS}
    alternatives = values["anyOf"] if values.keys() == {"anyOf"} else [values]
    return {"anyOf": [*alternatives, {"type": "null"}], **about}


def null_is_omitted_in_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The JSON schema of `model` as `null_is_omitted` reads its data: every optional field takes null, a required
    one does not. The type of a field with a default (`speed: float = 1.0`) says nothing of null, and a client
    generated from the OpenAPI document, or a JSON-Schema validator, held null invalid there, which the server takes."""
    properties = schema.get("properties", {})
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in properties and not field.is_required() and not takes_null(properties[key]):
            properties[key] = nullable(properties[key])


class JsonFields(BaseModel):
    """A JSON object's fields as every body and message of the API reads them, whatever the endpoint or transport:
    an unknown field is refused (as OpenAI refuses unrecognized arguments), each value must be of its field's JSON
    type (strict: no "1.5" for a number, unless a model says otherwise), null for an optional field is the field
    omitted (and its JSON schema says so), an integer may be written with a zero fraction (`24000.0`), and a switch is
    `true` or `false` only, in every model (pydantic's lax reading, where a model asks for it, takes "yes", "off", 1
    and 0 for switches: a client that sends them has a bug worth hearing of)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=null_is_omitted_in_schema)

    @model_validator(mode="before")
    @classmethod
    def _null_is_omitted(cls, data: Any) -> Any:
        return null_is_omitted(cls, data)

    @field_validator("*", mode="before")
    @classmethod
    def _switches_are_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, bool) and info.field_name in fields_of_type(cls, bool):
            raise PydanticCustomError(
                "bool_type", "must be true or false (a JSON boolean), not {kind}", {"kind": json_kind(value)}
            )
        # JSON has one kind of number, and JSON Schema's `integer` (as /openapi.json documents these fields) is any
        # number without a fraction: 24000.0 (a Python client's float) is the integer, which strict reading refused
        if type(value) is float and value.is_integer() and info.field_name in fields_of_type(cls, int):
            return int(value)
        return value


class VoiceRef(BaseModel):
    """OpenAI's object form of `voice`: {"id": "..."}."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: VoiceName = Field(min_length=1)


def check_speaker_embedding(value: list[float] | None) -> list[float] | None:
    """vllm-omni 0.30's checks on `speaker_embedding`: a non-empty vector of finite numbers."""
    if value is None:
        return None
    if not value:
        raise ValueError("must be a non-empty list of numbers")
    if not all(math.isfinite(x) for x in value):
        raise ValueError("values must be finite (no NaN or Inf)")
    return value


# The options come in three parts so that a body that extends them can put its own fields between the parts: pydantic
# declares (documents and validates) the fields of a model's bases from the last base to the first, so
# `SpeechRequest(SpeechOptions, Qwen3Extensions, StreamSwitches, OpenAIVoiceOptions, TextInput, ModelOption)` reads
# model, input, voice ... speed, stream_format, stream, language ..., the order its clients have always read.


class ModelOption(BaseModel):
    model: Name | None = Field(None, min_length=1, max_length=256, description="Omitted: the served model.")


class OpenAIVoiceOptions(BaseModel):
    """OpenAI's own fields, after the text."""

    voice: VoiceName | VoiceRef = Field(
        DEFAULT_VOICE,
        description='A voice name (OpenAI names are aliases) or {"id": ...}. `speaker` is another name for it. '
        'Omitted or "default": the model\'s default voice.',
    )
    speaker: VoiceName | None = Field(None, min_length=1, description="vllm-omni's other name for `voice`.")
    instructions: FreeText | None = Field(
        None,
        max_length=MAX_INPUT_CHARS,
        description="Style instructions. Engines that cannot follow them ignore them, as OpenAI's tts-1 does.",
    )
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0, allow_inf_nan=False)  # NaN: "a finite number", not "at most 4"


class Qwen3Extensions(BaseModel):
    """Qwen3-TTS's extensions: honoured by engines that support them, otherwise refused with a 400 naming the field."""

    language: Name | None = Field(None, min_length=1, max_length=64)
    task_type: TaskTypeName | None = None
    ref_audio: FreeText | None = Field(
        None, min_length=1, description="Reference audio for cloning: base64 or data URI."
    )
    ref_text: FreeText | None = Field(None, max_length=MAX_INPUT_CHARS)
    x_vector_only_mode: bool | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=65536)
    ignore_eos: bool = Field(
        False,
        description="vLLM's benchmark field (`vllm bench serve` sends it with its random dataset): with "
        "`max_new_tokens`, the talker does not stop at its end-of-speech token and the audio is exactly that many "
        "codec frames long (a fixed-length benchmark). Without `max_new_tokens` there is no length to run to, and "
        "it changes nothing, as on engines without an end-of-speech token (the embedded one).",
    )
    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    sample_rate: int | None = Field(
        None, ge=MIN_SAMPLE_RATE, le=MAX_SAMPLE_RATE, description="Output rate; resampled server-side."
    )
    initial_codec_chunk_frames: int | None = Field(
        None, ge=1, le=4096, description="Codec frames in the first audio chunk (TTFA tuning); the deploy default."
    )
    non_streaming_mode: bool | None = Field(
        None,
        description="Qwen3-TTS prompt construction mode (not HTTP streaming). Omitted: the model's default "
        "(Base: false, CustomVoice/VoiceDesign: true).",
    )
    speaker_embedding: list[float] | None = Field(
        None,
        min_length=1,
        max_length=MAX_EMBEDDING_DIM,
        description="Voice cloning from a precomputed speaker embedding (task_type Base; implies x_vector_only_mode; "
        "not with ref_audio). Engines that cannot take one refuse it.",
    )
    extra_params: dict[str, Any] | None = Field(
        None,
        description="vllm-omni's model-specific parameters: temperature, top_p and top_k set the talker's sampling, "
        "and the whole object reaches the model as extra arguments. Engines without them refuse it.",
    )
    word_timestamps: bool = Field(
        False,
        description="With stream_format sse: `speech.audio.timestamps` events time each word of the input "
        "(as written) in milliseconds from the start of the audio; with `stream: false`, the whole file's timings "
        "in an `X-Word-Timestamps` header, as vllm-omni 0.30 sends them. Engines that cannot time words refuse it.",
    )


def voice_from_speaker(data: Any) -> Any:
    """The voice of a request's fields where `voice` is absent or null: `speaker` (vllm-omni 0.30's alias; two
    different names are refused by the job builder, naming `speaker`), or none for a designed or cloned voice, which
    comes from `instructions` or the reference audio (vllm-omni needs no name)."""
    # a null voice is an omitted one (`JsonFields` drops it, after this has run)
    if not isinstance(data, dict) or data.get("voice") is not None:
        return data
    if isinstance(data.get("speaker"), str):
        return {**data, "voice": data["speaker"]}
    if data.get("task_type") in ("VoiceDesign", "Base"):
        return {**data, "voice": ""}
    return data


class SpeechOptions(Qwen3Extensions, OpenAIVoiceOptions, ModelOption, JsonFields):
    """How to speak: the model, the voice and the Qwen3-TTS extensions, whatever the transport, read as every JSON
    body is (`JsonFields`: unknown fields refused, null for an optional field omitted, switches true or false)."""

    _check_speaker_embedding = field_validator("speaker_embedding")(check_speaker_embedding)

    @model_validator(mode="before")
    @classmethod
    def _voice_from_speaker(cls, data: Any) -> Any:
        return voice_from_speaker(data)

    @property
    def voice_name(self) -> str:
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice
