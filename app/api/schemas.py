"""Request and response bodies of the OpenAI audio API, plus Qwen3-TTS's extensions in the same body."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, PrivateAttr, model_validator

from app.api.errors import ErrorDetail
from app.audio.formats import ResponseFormat
from app.speech.encoding import Usage
from app.speech.options import (
    MAX_INPUT_CHARS,
    ModelOption,
    OpenAIVoiceOptions,
    Qwen3Extensions,
    SpeechOptions,
    null_is_omitted_in_schema,
    nullable,
)

StreamFormat = Literal["audio", "sse"]


class TextInput(BaseModel):
    # its longest is this server's (SPEECH_MAX_INPUT_CHARS, at most OpenAI's 4096), checked before any other work on
    # the request (`app.speech.jobs.check_input_length`); the schema only documents OpenAI's (checked here as well, a
    # lower limit was told as 4096 past 4096)
    input: str = Field(
        min_length=1,
        json_schema_extra={"maxLength": MAX_INPUT_CHARS},
        description=f"Text to speak, 1–{MAX_INPUT_CHARS} characters (or fewer where the server's limit is lower: "
        "`max_input_chars` in GET /v1/audio/capabilities).",
    )


class StreamSwitches(BaseModel):
    stream_format: StreamFormat | None = Field(
        None, description="`audio` (raw bytes) or `sse`. Omitted: `sse` when `stream` is true, else `audio`."
    )
    stream: bool = Field(
        False,
        description="vllm-omni's switch: true without `stream_format` streams SSE events; false, sent explicitly "
        "without `stream_format`, answers one whole file with its Content-Length (omitted: the audio streams). "
        "`stream_format`, when sent, decides, as on vllm-omni.",
    )


# the bases' order puts the text second and the stream switches after `speed` (see app.speech.options)
class SpeechRequest(SpeechOptions, Qwen3Extensions, StreamSwitches, OpenAIVoiceOptions, TextInput, ModelOption):
    """POST /v1/audio/speech. Unknown fields are refused, as OpenAI refuses unrecognized arguments.

    Clients written for vllm-omni 0.30's own speech server (`vllm serve --omni`) run unchanged: `model` may be omitted
    (the served model) or be the checkpoint's id, `speaker` is another name for `voice`, `voice` may be omitted or be
    "default" (the model's default voice), `stream` selects SSE as it does there and `stream: false` asks for a whole
    file, and `speaker_embedding` and `extra_params` are honoured where the engine can."""

    _whole_file: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _resolve_stream_format(self) -> SpeechRequest:
        if self.stream_format is None:
            # vllm-omni answers `stream: false` with one whole file; omitted, the audio streams here, as from OpenAI
            self._whole_file = "stream" in self.model_fields_set and not self.stream
            self.stream_format = "sse" if self.stream else "audio"
        return self

    @property
    def whole_file(self) -> bool:
        """`stream: false` sent explicitly: one complete file, as vllm-omni answers it (omitted: streamed audio)."""
        return self._whole_file


# -- POST /v1/audio/speech/batch (vllm-omni 0.30's shape) ------------------------------------------------------------


def word_timestamps_false_only(schema: dict[str, Any]) -> None:
    """`word_timestamps` in a batch's JSON schema: false (or null, omitted) only, as the route takes it; true is
    refused (`app.api.speech_batch.NO_WORD_TIMESTAMPS`), so a client generated from the document is not offered it.
    Pinned to false rather than left out: the schema refuses unknown fields (`additionalProperties: false`), and the
    server takes `"word_timestamps": false`, which a client that sends every field it knows does send; left out, a
    JSON-Schema validator would refuse a body the server takes."""
    properties = schema.get("properties", {})
    if "word_timestamps" not in properties:
        return
    field = properties["word_timestamps"]
    about = {key: field[key] for key in ("title", "default") if key in field}
    properties["word_timestamps"] = nullable(
        {
            "type": "boolean",
            "const": False,
            **about,
            "description": "Only false in a batch: its answer has no headers per item to carry word timings "
            "(true is refused).",
        }
    )


def batch_request_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The batch's JSON schema: its fields as a body's (null for an optional one is omitted), `word_timestamps`
    false only."""
    null_is_omitted_in_schema(schema, model)
    word_timestamps_false_only(schema)


def batch_item_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """An item's JSON schema: its fields as a body's (null for an optional one is omitted), none with a default of its
    own (an item that omits a field takes the batch's value), `word_timestamps` false only."""
    null_is_omitted_in_schema(schema, model)
    for field in schema.get("properties", {}).values():
        field.pop("default", None)
    word_timestamps_false_only(schema)


class SpeechBatchItem(SpeechOptions, Qwen3Extensions, OpenAIVoiceOptions, TextInput, ModelOption):
    """One item of a batch: its `input`, and any field of POST /v1/audio/speech but the stream switches (every item is
    a whole file), with the same limits; `word_timestamps` false only. A field the item omits, or sends as null, takes
    the batch's value; a `voice` or `speaker` of the item's replaces the batch's, named either way."""

    model_config = ConfigDict(json_schema_extra=batch_item_schema)

    # the voice follows from the merged fields (`app.api.speech_batch.checked_item`), not from the item's alone
    @model_validator(mode="before")
    @classmethod
    def _voice_from_speaker(cls, data: Any) -> Any:  # replaces SpeechOptions': the merge applies it
        return data


def as_sent(item: Any) -> Any:
    return item


# An item left as sent (the route checks it), documented as a `$ref` to the SpeechBatchItem component: pydantic's
# SkipValidation wrote the model's schema inline in `items`, which a generated client read as an anonymous type.
UncheckedItem = Annotated[Any, PlainValidator(as_sent, json_schema_input_type=SpeechBatchItem)]


class SpeechBatchRequest(SpeechOptions):
    """POST /v1/audio/speech/batch: `items`, each with its `input` and any option of its own; every option given
    here is the default of every item that does not set it. Unknown fields are refused."""

    model_config = ConfigDict(json_schema_extra=batch_request_schema)

    # Each item is read by the route, one by one (`app.api.speech_batch.checked_item`), so that a bad item (an unknown
    # field, a value out of range, no object at all) fails alone, the others spoken; here the items are left as sent,
    # and documented as the model the route checks each by.
    items: list[UncheckedItem] = Field(
        min_length=1,
        description="The utterances: each its `input` and, where it differs from the batch, its own `voice`, "
        "`response_format`, `language` ... An item at fault fails alone, with its own error.",
    )
    response_format: ResponseFormat = Field("wav", description="The items' format unless one sets its own.")

    @model_validator(mode="before")
    @classmethod
    def _voice_from_speaker(cls, data: Any) -> Any:  # replaces SpeechOptions': each item's voice follows from its own
        return data


class InputTokenDetails(BaseModel):
    text_tokens: int = Field(description="Tokens of the text to speak and of the instructions.")
    audio_tokens: int = Field(description="Tokens of reference audio (voice cloning); 0 without.")


class SpeechUsage(BaseModel):
    """What a response cost, as vllm-omni 0.30 reports it (its SpeechTokenUsage): in the SSE `speech.audio.done`
    event and on each batch item (a whole file carries the same counts in headers)."""

    input_tokens: int = Field(description="Tokens of the input: text_tokens + audio_tokens.")
    output_tokens: int = Field(description="Audio (codec) tokens generated: one per 80 ms frame.")
    total_tokens: int = Field(description="input_tokens + output_tokens.")
    input_token_details: InputTokenDetails

    @classmethod
    def of(cls, usage: Usage) -> SpeechUsage:
        return cls(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            input_token_details=InputTokenDetails(
                text_tokens=usage.input_text_tokens, audio_tokens=usage.input_audio_tokens
            ),
        )


class SpeechBatchItemResult(BaseModel):
    index: int = Field(description="The item's place in `items`.")
    status: Literal["success", "error"]
    audio_data: str | None = Field(None, description="The whole file, base64.")
    media_type: str | None = None
    usage: SpeechUsage | None = Field(None, description="What the item cost.")
    error: ErrorDetail | None = Field(None, description="Why the item failed: the OpenAI error object a request gets.")


class SpeechBatchResponse(BaseModel):
    id: str
    results: list[SpeechBatchItemResult]
    total: int
    succeeded: int
    failed: int
