"""Request and response bodies of the OpenAI audio API, plus Qwen3-TTS's extensions in the same body."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.text.hygiene import check_multiline, check_single_line

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
StreamFormat = Literal["audio", "sse"]
TaskTypeName = Literal["CustomVoice", "VoiceDesign", "Base"]

MAX_INPUT_CHARS = 4096

# Every text field but `input` (which text normalisation makes speakable): valid Unicode, no control characters.
Name = Annotated[str, AfterValidator(check_single_line)]
FreeText = Annotated[str, AfterValidator(check_multiline)]


class VoiceRef(BaseModel):
    """OpenAI's object form of `voice`: {"id": "..."}."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: Name = Field(min_length=1, max_length=256)


class SpeechRequest(BaseModel):
    """POST /v1/audio/speech. Unknown fields are refused, as OpenAI refuses unrecognized arguments.

    Clients written for vllm-omni's own speech server (`vllm serve --omni`) run unchanged: `model` may be omitted (the
    served model), `stream` selects SSE as it does there, and a VoiceDesign or Base request needs no `voice`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: Name | None = Field(None, min_length=1, max_length=256, description="Omitted: the served model.")
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS, description="Text to speak, 1–4096 characters.")
    voice: Name | VoiceRef = Field(description='A voice name (OpenAI names are aliases) or {"id": ...}.')
    instructions: FreeText | None = Field(
        None,
        max_length=MAX_INPUT_CHARS,
        description="Style instructions. Engines that cannot follow them ignore them, as OpenAI's tts-1 does.",
    )
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: StreamFormat | None = Field(
        None, description="`audio` (raw bytes) or `sse`. Omitted: `sse` when `stream` is true, else `audio`."
    )
    stream: bool = Field(False, description="vllm-omni's switch: true without `stream_format` streams SSE events.")

    # Qwen3-TTS extensions: honoured by engines that support them, otherwise refused with a 400 naming the field.
    language: Name | None = Field(None, min_length=1, max_length=64)
    task_type: TaskTypeName | None = None
    ref_audio: FreeText | None = Field(
        None, min_length=1, description="Reference audio for cloning: base64 or data URI."
    )
    ref_text: FreeText | None = Field(None, max_length=MAX_INPUT_CHARS)
    x_vector_only_mode: bool | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=65536)
    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    sample_rate: int | None = Field(None, ge=8000, le=48000, description="Output rate; resampled server-side.")
    initial_codec_chunk_frames: int | None = Field(
        None, ge=1, le=4096, description="Codec frames in the first audio chunk (TTFA tuning); the deploy default."
    )
    non_streaming_mode: bool | None = Field(
        None,
        description="Qwen3-TTS prompt construction mode (not HTTP streaming). Omitted: the model's default "
        "(Base: false, CustomVoice/VoiceDesign: true).",
    )
    word_timestamps: bool = Field(
        False,
        description="With stream_format sse: `speech.audio.timestamps` events time each word of the input "
        "(as written) in milliseconds from the start of the audio. Engines that cannot time words refuse it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _voice_not_needed(cls, data: Any) -> Any:
        """A designed or cloned voice comes from `instructions` or the reference audio: vllm-omni needs no name."""
        if isinstance(data, dict) and "voice" not in data and data.get("task_type") in ("VoiceDesign", "Base"):
            return {**data, "voice": ""}
        return data

    @model_validator(mode="after")
    def _resolve_stream_format(self) -> SpeechRequest:
        if self.stream_format is None:
            self.stream_format = "sse" if self.stream else "audio"
        return self

    @property
    def voice_name(self) -> str:
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice
