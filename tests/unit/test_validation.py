"""Request validation without FastAPI: SpeechRequest (schema) -> validation_error (OpenAI shape) -> build_job."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.api.errors import ApiError, to_api_error, validation_error
from app.api.schemas import SpeechBatchRequest, SpeechRequest
from app.api.speech_batch import checked_item
from app.api.speech_stream import SessionConfig
from app.audio.formats import DEFAULT_SAMPLE_RATE, RESPONSE_FORMATS
from app.engine_protocol import EngineCapabilities, ReferenceAudio, SynthesisJob, TaskType, VoiceInfo
from app.settings import MAX_INPUT_CHARS
from app.speech.errors import Refused, SpeechError, too_many_characters
from app.speech.jobs import OutputSpec, build_job
from app.speech.options import VoiceRef
from app.voice_store import ID_PATTERN, NAME_PATTERN
from app.voices import MAX_VOICE_NAME_CHARS, VoiceCatalog

BASE: dict[str, Any] = {"model": "tts-1", "input": "Hello there.", "voice": "alloy"}


def body(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in BASE.items() if k != key}


def schema_error(payload: Any, *, fastapi_loc: bool) -> ApiError:
    """The ApiError a body gets. FastAPI's RequestValidationError prefixes every loc with "body"; pydantic's own
    errors do not. validation_error must handle both."""
    with pytest.raises(ValidationError) as info:
        SpeechRequest.model_validate(payload)
    errors = info.value.errors()
    if fastapi_loc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in errors]
    return validation_error(errors)


# -- schema: what pydantic refuses, and how it is worded ------------------------------------------------------------

_INVALID = [
    pytest.param(without("input"), "input", "missing_required_parameter", id="missing-input"),
    pytest.param(body(foo=1), "foo", "unknown_parameter", id="unknown-field"),
    pytest.param(body(model=""), "model", "invalid_value", id="model-empty"),
    pytest.param(body(input=""), "input", "invalid_value", id="input-empty"),
    pytest.param(body(input=None), "input", "invalid_type", id="input-null"),
    pytest.param(body(speed=0.2), "speed", "invalid_value", id="speed-0.2"),
    pytest.param(body(speed=4.5), "speed", "invalid_value", id="speed-4.5"),
    pytest.param(body(speed="fast"), "speed", "invalid_type", id="speed-string"),
    pytest.param(body(speed=True), "speed", "invalid_type", id="speed-bool"),
    pytest.param(body(response_format="ogg"), "response_format", "invalid_value", id="format-ogg"),
    pytest.param(body(stream_format="chunks"), "stream_format", "invalid_value", id="stream-chunks"),
    pytest.param(body(voice=123), "voice", "invalid_type", id="voice-int"),
    pytest.param(body(voice={"id": ""}), "voice", None, id="voice-empty-id"),
    pytest.param(body(voice={"name": "x"}), "voice", None, id="voice-name-object"),
    pytest.param(body(voice={"id": "alloy", "x": 1}), "voice", None, id="voice-extra-key"),
    pytest.param(body(instructions="a" * 4097), "instructions", "string_too_long", id="instructions-4097"),
    pytest.param(body(sample_rate=7999), "sample_rate", "invalid_value", id="rate-7999"),
    pytest.param(body(sample_rate=48001), "sample_rate", "invalid_value", id="rate-48001"),
    pytest.param(body(sample_rate="24000"), "sample_rate", "invalid_type", id="rate-string"),
    pytest.param(body(seed=-1), "seed", "invalid_value", id="seed-negative"),
    pytest.param(body(seed=2**32), "seed", "invalid_value", id="seed-2^32"),
    pytest.param(body(max_new_tokens=0), "max_new_tokens", "invalid_value", id="max-new-tokens-0"),
    pytest.param(body(task_type="Other"), "task_type", "invalid_value", id="task-type-other"),
    pytest.param(body(x_vector_only_mode="yes"), "x_vector_only_mode", "invalid_type", id="x-vector-yes"),
    pytest.param(body(language=""), "language", "invalid_value", id="language-empty"),
    pytest.param(body(ref_audio=""), "ref_audio", "invalid_value", id="ref-audio-empty"),
    pytest.param(body(stream="true"), "stream", "invalid_type", id="stream-string"),
    pytest.param(body(initial_codec_chunk_frames=0), "initial_codec_chunk_frames", "invalid_value", id="icf-0"),
    pytest.param(body(initial_codec_chunk_frames="4"), "initial_codec_chunk_frames", "invalid_type", id="icf-str"),
    pytest.param(body(initial_codec_chunk_frames=1.5), "initial_codec_chunk_frames", "invalid_type", id="icf-float"),
    pytest.param(body(non_streaming_mode="yes"), "non_streaming_mode", "invalid_type", id="nsm-yes"),
    pytest.param(body(speaker=""), "speaker", "invalid_value", id="speaker-empty"),
    pytest.param(body(speaker=1), "speaker", "invalid_type", id="speaker-int"),
    # `speaker` stands for an omitted `voice`: its fault is its own, never `voice`'s, which the request did not send
    pytest.param(without("voice") | {"speaker": "x\u0007"}, "speaker", "invalid_value", id="speaker-control"),
    pytest.param(without("voice") | {"speaker": "x\u202ey"}, "speaker", "invalid_value", id="speaker-bidi"),
    pytest.param(body(speaker_embedding=[]), "speaker_embedding", "invalid_value", id="embedding-empty"),
    pytest.param(body(speaker_embedding=[0.1, "x"]), "speaker_embedding", "invalid_type", id="embedding-string"),
    pytest.param(body(speaker_embedding=[[0.1]]), "speaker_embedding", "invalid_type", id="embedding-nested"),
    pytest.param(body(speaker_embedding=[0.0] * 8193), "speaker_embedding", "invalid_value", id="embedding-8193"),
    pytest.param(body(extra_params=[1]), "extra_params", "invalid_type", id="extra-params-list"),
]


@pytest.mark.parametrize("fastapi_loc", [False, True], ids=["pydantic", "fastapi"])
@pytest.mark.parametrize(("payload", "param", "code"), _INVALID)
def test_invalid_bodies(payload: dict[str, Any], param: str, code: str | None, fastapi_loc: bool) -> None:
    error = schema_error(payload, fastapi_loc=fastapi_loc)
    assert error.status == 400
    assert error.param == param
    if code is not None:
        assert error.code == code
    assert error.type == "invalid_request_error"
    assert param in error.message
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("name", "shown"),
    [("f" * 100_000, "f" * 64), ("\u202e\u0007evil\u001b[31m", "(a name of unprintable characters)")],
    ids=["long", "control-characters"],
)
def test_an_unknown_fields_name_is_echoed_cut_short_and_only_where_it_is_plain_text(name: str, shown: str) -> None:
    """The caller's own name comes back in `message` and `param`: a megabyte of it came back twice, and control or
    text-direction characters reached whoever reads the error."""
    error = schema_error(body(**{name: 1}), fastapi_loc=True)
    assert error.message == f"Unrecognized request argument supplied: {shown}"
    assert (error.param, error.code) == (shown, "unknown_parameter")


@pytest.mark.parametrize("fastapi_loc", [False, True], ids=["pydantic", "fastapi"])
def test_unknown_field_message_matches_openai(fastapi_loc: bool) -> None:
    error = schema_error(body(foo="bar"), fastapi_loc=fastapi_loc)
    assert error.message == "Unrecognized request argument supplied: foo"
    assert (error.param, error.code) == ("foo", "unknown_parameter")


@pytest.mark.parametrize("fastapi_loc", [False, True], ids=["pydantic", "fastapi"])
def test_missing_field_message(fastapi_loc: bool) -> None:
    error = schema_error(without("input"), fastapi_loc=fastapi_loc)
    assert error.message == "Missing required parameter: 'input'."


@pytest.mark.parametrize(
    ("payload", "voice"),
    [
        pytest.param(without("voice"), "default", id="omitted"),  # vllm-omni 0.30: the model's default voice
        pytest.param(without("voice") | {"speaker": "nova"}, "nova", id="speaker"),
        pytest.param(body(speaker="alloy"), "alloy", id="speaker-and-the-same-voice"),
        pytest.param(without("voice") | {"task_type": "VoiceDesign"}, "", id="voice-design"),
    ],
)
def test_the_voice_vllm_omni_0_30_clients_name(payload: dict[str, Any], voice: str) -> None:
    assert SpeechRequest.model_validate(payload).voice_name == voice


@pytest.mark.parametrize(
    ("changes", "whole_file"),
    [
        ({}, False),
        ({"stream": False}, True),
        ({"stream": True}, False),
        ({"stream": False, "stream_format": "audio"}, False),
    ],
)
def test_only_an_explicit_stream_false_asks_for_a_whole_file(changes: dict[str, Any], whole_file: bool) -> None:
    request = SpeechRequest.model_validate(body(**changes))
    assert request.whole_file is whole_file
    assert request.model_copy(update={"input": "Another."}).whole_file is whole_file  # as the WebSocket copies it


def test_only_the_first_error_is_reported() -> None:
    error = schema_error({}, fastapi_loc=True)
    assert (error.param, error.code) == ("input", "missing_required_parameter")


def test_unknown_field_named_body() -> None:
    error = schema_error(body(body="x"), fastapi_loc=True)
    assert (error.param, error.code) == ("body", "unknown_parameter")


@pytest.mark.parametrize("fastapi_loc", [False, True], ids=["pydantic", "fastapi"])
@pytest.mark.parametrize("name", ["\ud800", "spe\udc00ed"])
def test_a_field_name_that_is_not_unicode_is_refused_as_such(fastapi_loc: bool, name: str) -> None:
    """JSON may write a lone surrogate into a key (`{"\\ud800": 1}`): pydantic cannot read it as a name and reports
    it where the body itself would be at fault. The body is an object; what is wrong is one of its names, said so
    (by code point: the name cannot be written back as UTF-8), not "the body must be a JSON object"."""
    error = schema_error(body(**{name: 1}), fastapi_loc=fastapi_loc)
    assert error.code == "unknown_parameter"
    half = next(ch for ch in name if "\ud800" <= ch <= "\udfff")
    assert f"U+{ord(half):04X}" in error.message and "JSON object" not in error.message
    error.response()  # the answer can be written (a surrogate in it would fail to encode: a 500)
    with pytest.raises(ValidationError) as info:  # a WebSocket's session.config alike
        SessionConfig.model_validate({"type": "session.config", name: 1})
    assert validation_error(info.value.errors()).code == "unknown_parameter"


@pytest.mark.parametrize("field", ["input", "voice", "speaker", "model", "instructions", "language"])
def test_a_lone_surrogate_in_any_text_field_is_said_alike(field: str) -> None:
    """Where pydantic cannot read a value as a string (a lone surrogate, JSON's "\\ud800"), the answer says what the
    text checks of the other fields say: not valid Unicode, and where; not "unable to parse raw data"."""
    error = schema_error(body(**{field: "ab\ud800"}), fastapi_loc=True)
    assert error.param == field
    assert "not valid Unicode (a lone surrogate, U+D800, at position 2)" in error.message, error.message
    error.response()  # the answer can be written


# -- schema: what it accepts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(BASE, id="minimal"),
        pytest.param(body(voice={"id": "alloy"}), id="voice-object"),
        pytest.param(body(speed=0.25), id="speed-min"),
        pytest.param(body(speed=4.0), id="speed-max"),
        pytest.param(body(speed=1), id="speed-int"),
        pytest.param(body(input="a" * 4096), id="input-4096"),
        pytest.param(body(instructions="a" * 4096), id="instructions-4096"),
        pytest.param(body(sample_rate=8000), id="rate-8000"),
        pytest.param(body(sample_rate=48000), id="rate-48000"),
        pytest.param(body(seed=0), id="seed-0"),
        pytest.param(body(seed=2**32 - 1), id="seed-max"),
        pytest.param(body(stream_format="sse"), id="sse"),
        pytest.param(body(task_type="Base", x_vector_only_mode=False, max_new_tokens=1), id="extensions"),
        *[pytest.param(body(response_format=fmt), id=f"format-{fmt}") for fmt in RESPONSE_FORMATS],
    ],
)
def test_valid_bodies(payload: dict[str, Any]) -> None:
    request = SpeechRequest.model_validate(payload)
    assert request.model == payload["model"]
    assert request.voice_name == "alloy"
    assert request.speed == float(payload.get("speed", 1.0))
    assert request.response_format == payload.get("response_format", "mp3")


def test_defaults() -> None:
    request = SpeechRequest.model_validate(BASE)
    assert (request.response_format, request.speed, request.stream_format) == ("mp3", 1.0, "audio")
    assert request.instructions is request.language is request.task_type is request.seed is request.sample_rate is None


def test_voice_object_form() -> None:
    request = SpeechRequest.model_validate(body(voice={"id": "heart"}))
    assert request.voice == VoiceRef(id="heart")
    assert request.voice_name == "heart"


# -- a voice's name: as long as any voice's, and no longer -----------------------------------------------------------

HUGE_VOICE = "v" * (2 * 1024 * 1024)  # megabytes: no voice's name, which an error once quoted back whole


def voice_fields(form: str, voice: str) -> dict[str, Any]:
    """The fields that name `voice`, in each way a request may: a name, OpenAI's object, vllm-omni's `speaker`."""
    return {"name": {"voice": voice}, "object": {"voice": {"id": voice}}, "speaker": {"speaker": voice}}[form]


def voice_refusal(where: str, fields: dict[str, Any]) -> ApiError | None:
    """The 400 the fields get where a voice is named (None where they are accepted): a POST body, a session.config, a
    batch (its shared voice, or an item's own)."""
    try:
        match where:
            case "body":
                SpeechRequest.model_validate({"input": "Hi.", **fields})
            case "session.config":
                SessionConfig.model_validate({"type": "session.config", **fields})
            case "batch":
                SpeechBatchRequest.model_validate({"items": [{"input": "Hi."}], **fields})
            case "batch item":
                item = checked_item({}, {"input": "Hi.", **fields}, 0)
                return item if isinstance(item, ApiError) else None
    except ValidationError as exc:
        return validation_error(exc.errors())
    return None


VOICE_PLACES = ["body", "session.config", "batch", "batch item"]


@pytest.mark.parametrize("form", ["name", "object", "speaker"])
@pytest.mark.parametrize("where", VOICE_PLACES)
@pytest.mark.parametrize("length", [MAX_VOICE_NAME_CHARS + 1, len(HUGE_VOICE)], ids=["limit+1", "megabytes"])
def test_a_voice_name_longer_than_any_voices_is_refused_saying_the_limit_not_the_name(
    where: str, form: str, length: int
) -> None:
    """A name no voice can have is refused before it is looked up: a 400 naming the field sent, which says the limit
    and the length, never the name (an error's message is read by the client and logged by it)."""
    param = "speaker" if form == "speaker" else "voice"
    error = voice_refusal(where, voice_fields(form, HUGE_VOICE[:length]))
    assert error is not None
    assert (error.status, error.param, error.code) == (400, param, "string_too_long")
    assert error.type == "invalid_request_error"
    assert error.message == too_many_characters(param, MAX_VOICE_NAME_CHARS, length)
    assert "vvvv" not in error.message


LONGEST_UPLOADED_NAME = "n" * 64
VOICE_ID = "voice_" + "0123456789abcdef" * 2


@pytest.mark.parametrize("form", ["name", "object", "speaker"])
@pytest.mark.parametrize("where", VOICE_PLACES)
@pytest.mark.parametrize(
    "voice",
    [
        pytest.param(LONGEST_UPLOADED_NAME, id="longest-uploaded-name"),
        pytest.param(VOICE_ID, id="voice-id"),
        pytest.param(f"  {LONGEST_UPLOADED_NAME}  ", id="spaces-around"),  # resolution ignores them
        pytest.param("v" * MAX_VOICE_NAME_CHARS, id="at-the-limit"),
    ],
)
def test_every_name_a_voice_can_have_is_taken(where: str, form: str, voice: str) -> None:
    assert NAME_PATTERN.fullmatch(LONGEST_UPLOADED_NAME) and ID_PATTERN.fullmatch(VOICE_ID)
    assert voice_refusal(where, voice_fields(form, voice)) is None


def test_an_unknown_voice_is_quoted_at_most_as_long_as_a_voice_name_may_be() -> None:
    """The unknown voice's error quotes its name ("Unknown voice '...'"): one at the limit whole, one past it never
    reaches that error."""
    at_limit = "n" * MAX_VOICE_NAME_CHARS
    error = build_error(body(voice=at_limit))
    assert (error.param, error.code) == ("voice", "voice_not_found") and f"'{at_limit}'" in error.message
    with pytest.raises(ValidationError):
        build(body(voice=HUGE_VOICE))


# -- build_job: what depends on the engine ---------------------------------------------------------------------------

CAPS = EngineCapabilities(
    task_types=frozenset({TaskType.CUSTOM_VOICE}),
    voice_cloning=False,
    instructions=False,
    languages=("Auto", "English"),
    max_input_chars=4096,
    seed=True,
    max_new_tokens=False,
    sample_rate=24_000,
)
CATALOG = VoiceCatalog(voices=(VoiceInfo("heart", "Heart", ("English",)),), aliases={"alloy": ""})
MODELS = ["hibari", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]


def build(payload: dict[str, Any], caps: EngineCapabilities = CAPS) -> tuple[SynthesisJob, OutputSpec]:
    request = SpeechRequest.model_validate(payload)
    return build_job(
        request,
        request.input,
        request_id="req-1",
        caps=caps,
        catalog=CATALOG,
        served_models=MODELS,
        whole_file=request.whole_file,
    )


def build_error(payload: dict[str, Any], caps: EngineCapabilities = CAPS) -> ApiError:
    """The error a client reads, as both transports word it."""
    with pytest.raises(SpeechError) as info:
        build(payload, caps)
    return to_api_error(info.value)


def test_valid_job() -> None:
    job, output = build(body(speed=1.5, seed=42, response_format="wav"))
    assert job.request_id.startswith("req-1-") and job.trace_id == "req-1"
    assert job == SynthesisJob(
        request_id=job.request_id,
        text="Hello there.",
        voice="heart",
        speed=1.5,
        task_type=TaskType.CUSTOM_VOICE,
        seed=42,
        trace_id="req-1",
    )
    again, _ = build(body(speed=1.5, seed=42, response_format="wav"))
    assert again.request_id != job.request_id  # a caller's repeated id never makes two jobs share one
    assert output == OutputSpec("wav", DEFAULT_SAMPLE_RATE)
    assert DEFAULT_SAMPLE_RATE == 24_000


def test_unknown_model_is_404() -> None:
    error = build_error(body(model="gpt-5-tts"))
    assert (error.status, error.param, error.code) == (404, "model", "model_not_found")
    assert "gpt-5-tts" in error.message
    assert "hibari" in error.message  # the available models are listed


@pytest.mark.parametrize("model", MODELS)
def test_every_served_model_is_accepted(model: str) -> None:
    job, _ = build(body(model=model))
    assert job.voice == "heart"


def test_model_names_are_exact() -> None:
    assert build_error(body(model="TTS-1")).status == 404


def test_unknown_voice() -> None:
    error = build_error(body(voice="nobody"))
    assert (error.status, error.param, error.code) == (400, "voice", "voice_not_found")
    assert "nobody" in error.message and "heart" in error.message


@pytest.mark.parametrize("voice", ["alloy", "ALLOY", " alloy ", {"id": "alloy"}, "heart", "Heart", {"id": "HEART"}])
def test_voice_resolution(voice: Any) -> None:
    job, _ = build(body(voice=voice))
    assert job.voice == "heart"


@pytest.mark.parametrize("text", ["\x00\x01\x02", "   ", "...", "?!", "\n\n"])
def test_unspeakable_input(text: str) -> None:
    error = build_error(body(input=text))
    assert (error.status, error.param) == (400, "input")


def test_input_longer_than_the_engine_allows() -> None:
    caps = EngineCapabilities(**{**_caps_fields(), "max_input_chars": 100})
    error = build_error(body(input="a" * 101), caps)
    assert (error.status, error.param, error.code) == (400, "input", "string_too_long")
    assert error.message == "Invalid value for 'input': at most 100 characters, not 101."
    job, _ = build(body(input="a" * 100), caps)
    assert len(job.text) == 100


def test_input_over_openais_limit_is_refused_by_the_servers_own() -> None:
    """One condition, one check: an `input` past OpenAI's 4096 is refused where a lower SPEECH_MAX_INPUT_CHARS is
    (the engine's request), with that limit told; refused by the schema first, it was told 4096 under a limit of
    20. The schema still documents 4096."""
    over = body(input="a" * (MAX_INPUT_CHARS + 1))
    SpeechRequest.model_validate(over)
    assert SpeechRequest.model_json_schema()["properties"]["input"]["maxLength"] == MAX_INPUT_CHARS
    limit = MAX_INPUT_CHARS
    for caps_limit in (limit, 20):
        error = build_error(over, EngineCapabilities(**{**_caps_fields(), "max_input_chars": caps_limit}))
        assert (error.status, error.param, error.code) == (400, "input", "string_too_long")
        assert error.message == f"Invalid value for 'input': at most {caps_limit} characters, not {limit + 1}."


@pytest.mark.parametrize(("language", "expected"), [("english", "English"), ("ENGLISH", "English"), (" auto ", "Auto")])
def test_language_is_normalised(language: str, expected: str) -> None:
    job, _ = build(body(language=language))
    assert job.language == expected


def test_unsupported_language() -> None:
    error = build_error(body(language="French"))
    assert (error.status, error.param) == (400, "language")
    assert "French" in error.message and "English" in error.message


def test_no_language_stays_none() -> None:
    job, _ = build(BASE)
    assert job.language is None


@pytest.mark.parametrize("task_type", ["Base", "VoiceDesign"])
def test_unsupported_task_type(task_type: str) -> None:
    error = build_error(body(task_type=task_type))
    assert (error.status, error.param) == (400, "task_type")
    assert task_type in error.message


def test_supported_task_type_is_passed_on() -> None:
    job, _ = build(body(task_type="CustomVoice"))
    assert job.task_type is TaskType.CUSTOM_VOICE


@pytest.mark.parametrize(
    ("field", "value"),
    [("ref_audio", "UklGRg=="), ("ref_text", "hello"), ("x_vector_only_mode", True), ("x_vector_only_mode", False)],
)
def test_cloning_fields_are_refused_without_cloning(field: str, value: Any) -> None:
    error = build_error(body(**{field: value}))
    assert (error.status, error.param) == (400, field)
    assert field in error.message


def test_cloning_job_carries_the_decoded_reference_and_infers_base() -> None:
    caps = EngineCapabilities(**{**_caps_fields(), "voice_cloning": True, "task_types": frozenset(TaskType)})
    reference = ReferenceAudio(np.zeros(24_000, np.float32), 24_000)
    request = SpeechRequest.model_validate(body(voice="anyone", ref_audio="UklGRg==", ref_text="hello"))
    job, _ = build_job(
        request, request.input, request_id="r", caps=caps, catalog=CATALOG, served_models=MODELS, ref_audio=reference
    )
    assert job.task_type == TaskType.BASE  # implied by the reference audio
    assert job.ref_audio is reference and job.ref_text == "hello"
    assert job.voice == "anyone"  # a cloned voice is not looked up among the preset voices
    job, _ = build(body(task_type="Base", ref_text="hello", x_vector_only_mode=True), caps)
    assert (job.task_type, job.ref_text, job.x_vector_only_mode) == (TaskType.BASE, "hello", True)


def test_max_new_tokens_refused_when_unsupported() -> None:
    error = build_error(body(max_new_tokens=100))
    assert (error.status, error.param) == (400, "max_new_tokens")
    caps = EngineCapabilities(**{**_caps_fields(), "max_new_tokens": True})
    job, _ = build(body(max_new_tokens=100), caps)
    assert job.max_new_tokens == 100


def test_seed() -> None:
    job, _ = build(body(seed=1234))
    assert job.seed == 1234
    caps = EngineCapabilities(**{**_caps_fields(), "seed": False})
    error = build_error(body(seed=1234), caps)
    assert (error.status, error.param) == (400, "seed")


def test_instructions_ignored_when_unsupported() -> None:
    job, _ = build(body(instructions="Speak like a pirate."))
    assert job.instructions is None
    caps = EngineCapabilities(**{**_caps_fields(), "instructions": True})
    job, _ = build(body(instructions="Speak like a pirate."), caps)
    assert job.instructions == "Speak like a pirate."


@pytest.mark.parametrize(
    ("fmt", "rate", "ok"),
    [
        ("opus", 22_050, False),
        ("opus", 44_100, False),
        ("opus", 16_000, True),
        ("opus", 48_000, True),
        ("mp3", 22_050, True),
        ("mp3", 8001, False),
        ("aac", 44_100, True),
        ("aac", 12_345, False),
        ("wav", 22_050, True),
        ("pcm", 8001, True),
        ("flac", 47_999, True),
    ],
)
def test_sample_rate_against_format(fmt: str, rate: int, ok: bool) -> None:
    payload = body(response_format=fmt, sample_rate=rate)
    if ok:
        _, output = build(payload)
        assert output == OutputSpec(fmt, rate)
    else:
        error = build_error(payload)
        assert (error.status, error.param) == (400, "sample_rate")
        assert str(rate) in error.message and fmt in error.message


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_default_rate_works_for_every_format(fmt: str) -> None:
    _, output = build(body(response_format=fmt, stream_format="sse"))
    assert output == OutputSpec(fmt, 24_000)


def test_checks_run_in_order_model_first() -> None:
    error = build_error(body(model="nope", voice="nobody", language="French", input="\x00"))
    assert error.param == "model"
    error = build_error(body(voice="nobody", language="French", input="\x00"))
    assert error.param == "input"
    error = build_error(body(voice="nobody", language="French"))
    assert error.param == "voice"


def _caps_fields() -> dict[str, Any]:
    return {name: getattr(CAPS, name) for name in CAPS.__dataclass_fields__}


def test_voice_design_takes_the_voice_as_a_label() -> None:
    caps = EngineCapabilities(
        **{**_caps_fields(), "task_types": frozenset({TaskType.VOICE_DESIGN}), "instructions": True}
    )
    empty = VoiceCatalog(voices=(), aliases={})
    request = SpeechRequest.model_validate(body(voice="narrator", instructions="A warm, low voice."))
    job, _ = build_job(request, request.input, request_id="r", caps=caps, catalog=empty, served_models=MODELS)
    assert job.task_type == TaskType.VOICE_DESIGN and job.voice == "narrator"
    assert job.instructions == "A warm, low voice."


def test_speed_outside_the_engines_range_is_refused() -> None:
    fixed = EngineCapabilities(**{**_caps_fields(), "speed_range": (1.0, 1.0)})
    error = build_error(body(speed=1.5), fixed)
    assert (error.status, error.param) == (400, "speed") and "1" in error.message
    job, _ = build(body(speed=1.0), fixed)
    assert job.speed == 1.0


# -- vllm-omni's request fields (clients of `vllm serve --omni` run unchanged) -----------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected", "whole_file"),
    [
        ({}, "audio", False),
        ({"stream": False}, "audio", True),  # vllm-omni: stream=false, sent explicitly, is one whole file
        ({"stream": True}, "sse", False),  # vllm-omni: stream=true without stream_format is SSE
        ({"stream": True, "stream_format": "audio"}, "audio", False),
        ({"stream": False, "stream_format": "sse"}, "sse", False),
    ],
)
def test_stream_selects_the_stream_format_as_vllm_omni_does(
    changes: dict[str, Any], expected: str, whole_file: bool
) -> None:
    request = SpeechRequest.model_validate(body(**changes))
    assert (request.stream_format, request.whole_file) == (expected, whole_file)
    _, output = build(body(**changes))
    assert output.whole_file is whole_file  # the job's output is one whole file exactly when the body asked for it


def test_an_omitted_model_is_the_served_model() -> None:
    request = SpeechRequest.model_validate(without("model"))
    assert request.model is None
    job, _ = build(without("model"))
    assert job.voice == "heart"


@pytest.mark.parametrize("task_type", ["VoiceDesign", "Base"])
def test_designed_and_cloned_voices_need_no_name(task_type: str) -> None:
    request = SpeechRequest.model_validate({"input": "Hi.", "task_type": task_type})
    assert request.voice_name == ""


def test_first_chunk_size_is_checked_against_the_engine() -> None:
    omni_caps = EngineCapabilities(**{**_caps_fields(), "initial_chunk_frames": (1, 25), "prompt_modes": True})
    job, _ = build(body(initial_codec_chunk_frames=4, non_streaming_mode=False), omni_caps)
    assert (job.initial_codec_chunk_frames, job.non_streaming_mode) == (4, False)
    error = build_error(body(initial_codec_chunk_frames=26), omni_caps)
    assert (error.status, error.param) == (400, "initial_codec_chunk_frames")
    assert "between 1 and 25" in error.message
    for field, value in (("initial_codec_chunk_frames", 4), ("non_streaming_mode", True)):
        error = build_error(body(**{field: value}))  # an engine without them refuses them, naming the field
        assert (error.status, error.param) == (400, field)


def test_cors_origins_setting() -> None:
    from app.settings import Settings

    assert Settings(_env_file=None).cors_origins == []  # type: ignore[call-arg]
    assert Settings(cors_origins="*").cors_origins == ["*"]  # type: ignore[arg-type]
    two = Settings(cors_origins="https://app.example.com/, http://127.0.0.1:5173")  # type: ignore[arg-type]
    assert two.cors_origins == ["https://app.example.com", "http://127.0.0.1:5173"]
    with pytest.raises(ValueError, match="scheme"):
        Settings(cors_origins="app.example.com")  # type: ignore[arg-type]


def test_word_timestamps_need_an_engine_that_times_words() -> None:
    """Whatever carries the timings (SSE events over HTTP, which the HTTP handler requires; JSON frames on the
    WebSocket), the engine must be able to time words."""
    timed = dataclasses.replace(CAPS, word_timestamps=True)
    for stream_format in ("sse", "audio"):
        job, _ = build(body(stream_format=stream_format, word_timestamps=True), timed)
        assert job.word_timestamps
    error = build_error(body(stream_format="sse", word_timestamps=True), CAPS)
    assert error.status == 400 and error.body()["error"]["param"] == "word_timestamps"


# -- vllm-omni 0.30's fields -----------------------------------------------------------------------------------------

CLONING = dataclasses.replace(
    CAPS,
    task_types=frozenset({TaskType.CUSTOM_VOICE, TaskType.BASE}),
    voice_cloning=True,
    speaker_embedding_dim=4,
    extra_params=True,
)


@pytest.mark.parametrize(
    "payload",
    [without("voice"), body(voice="default"), body(voice="DEFAULT"), without("voice") | {"speaker": "default"}],
)
def test_the_generic_voice_is_the_default_voice(payload: dict[str, Any]) -> None:
    job, _ = build(payload)
    assert job.voice == "heart"


def test_a_voice_named_default_is_that_voice() -> None:
    catalog = VoiceCatalog(voices=(VoiceInfo("heart", "Heart", ()), VoiceInfo("default", "Default", ())), aliases={})
    request = SpeechRequest.model_validate(body(voice="default"))
    job, _ = build_job(request, request.input, request_id="r", caps=CAPS, catalog=catalog, served_models=MODELS)
    assert job.voice == "default"


def test_speaker_names_the_voice_and_may_not_contradict_it() -> None:
    job, _ = build(without("voice") | {"speaker": "heart"})
    assert job.voice == "heart"
    two = VoiceCatalog(voices=(VoiceInfo("heart", "Heart", ()), VoiceInfo("ryan", "Ryan", ())), aliases={"alloy": ""})
    request = SpeechRequest.model_validate(body(voice="ryan", speaker="heart"))  # which one was meant?
    with pytest.raises(Refused) as refused:
        build_job(request, request.input, request_id="r", caps=CAPS, catalog=two, served_models=MODELS)
    assert refused.value.param == "speaker"


def test_an_unknown_speaker_sent_alone_is_named_as_speaker() -> None:
    """The field the client sent, not the one `speaker` fills in for it."""
    with pytest.raises(Refused) as refused:
        build(without("voice") | {"speaker": "nope"})
    assert (refused.value.param, refused.value.code) == ("speaker", "voice_not_found")
    with pytest.raises(Refused) as refused:
        build(body(voice="nope"))
    assert refused.value.param == "voice"


@pytest.mark.parametrize(("voice", "speaker"), [("alloy", "heart"), ("heart", "Heart"), ("ALLOY", " alloy ")])
def test_speaker_naming_the_same_voice_as_voice_otherwise_is_accepted(voice: str, speaker: str) -> None:
    """An alias, another spelling: the same voice either way, so nothing to choose between (docs/api.md: only both
    naming different voices is a 400)."""
    job, _ = build(body(voice=voice, speaker=speaker))
    assert job.voice == "heart"


def test_speaker_embedding_is_refused_by_an_engine_that_cannot_take_one() -> None:
    error = build_error(body(speaker_embedding=[0.1, 0.2, 0.3, 0.4]))
    assert (error.status, error.param) == (400, "speaker_embedding")


def test_an_engine_that_clones_from_audio_only_says_so_when_refusing_an_embedding() -> None:
    audio_only = dataclasses.replace(CLONING, speaker_embedding_dim=None)
    error = build_error(without("voice") | {"speaker_embedding": [0.1, 0.2], "task_type": "Base"}, audio_only)
    assert (error.status, error.param) == (400, "speaker_embedding")
    message = error.body()["error"]["message"]
    assert "ref_audio" in message and "cannot clone" not in message


def test_speaker_embedding_clones_x_vector_only() -> None:
    job, _ = build(without("voice") | {"speaker_embedding": [0.1, 0.2, 0.3, 0.4], "task_type": "Base"}, CLONING)
    assert job.task_type == TaskType.BASE and job.x_vector_only_mode
    assert job.speaker_embedding == (0.1, 0.2, 0.3, 0.4) and job.ref_audio is None
    inferred, _ = build(without("voice") | {"speaker_embedding": [0.1, 0.2, 0.3, 0.4]}, CLONING)
    assert inferred.task_type == TaskType.BASE  # as ref_audio implies Base


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"speaker_embedding": [0.1, 0.2], "task_type": "Base"}, id="wrong-width"),
        pytest.param({"speaker_embedding": [0.1] * 4, "task_type": "CustomVoice"}, id="not-base"),
        pytest.param({"speaker_embedding": [0.1] * 4, "ref_audio": "data:,", "task_type": "Base"}, id="with-ref-audio"),
    ],
)
def test_speaker_embedding_is_checked_as_vllm_omni_checks_it(changes: dict[str, Any]) -> None:
    error = build_error(body(**changes), CLONING)
    assert (error.status, error.param) == (400, "speaker_embedding")


def test_a_speaker_embedding_of_non_finite_numbers_is_refused_by_the_schema() -> None:
    error = schema_error(body(speaker_embedding=[0.1, float("nan")]), fastapi_loc=False)
    assert (error.status, error.param) == (400, "speaker_embedding") and "finite" in error.message


def test_extra_params_reach_the_job_where_the_engine_takes_them() -> None:
    params = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1}
    job, _ = build(body(extra_params=params), CLONING)
    assert job.extra_params == params
    error = build_error(body(extra_params=params))
    assert (error.status, error.param) == (400, "extra_params")


@pytest.mark.parametrize(
    "params", [{"temperature": -1}, {"temperature": "hot"}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": 2.5}, {"top_k": -2}]
)
def test_extra_params_sampling_values_are_checked(params: dict[str, Any]) -> None:
    error = build_error(body(extra_params=params), CLONING)
    assert (error.status, error.param) == (400, "extra_params")
    assert next(iter(params)) in error.message


def test_a_checkpoint_id_is_accepted_but_not_listed() -> None:
    request = SpeechRequest.model_validate(body(model="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"))
    checkpoint = ["Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"]
    job, _ = build_job(
        request,
        request.input,
        request_id="r",
        caps=CAPS,
        catalog=CATALOG,
        served_models=MODELS,
        also_accepted=checkpoint,
    )
    assert job.voice == "heart"
    error = build_error(body(model="Qwen/Qwen3-TTS-12Hz-0.6B-Base"))
    assert error.status == 404 and "Qwen" not in error.message.split("Available models:")[1]


def test_whole_file_output() -> None:
    _, output = build(body(stream=False, response_format="flac"))
    assert output == OutputSpec("flac", DEFAULT_SAMPLE_RATE, whole_file=True)


def test_the_body_keeps_its_documented_field_order() -> None:
    """SpeechRequest extends SpeechOptions, whose fields pydantic would put first: the body keeps the order its clients
    have always read, and validation follows it (a body with several faults hears of the first)."""
    assert list(SpeechRequest.model_fields)[:9] == [
        "model",
        "input",
        "voice",
        "speaker",
        "instructions",
        "response_format",
        "speed",
        "stream_format",
        "stream",
    ]
    assert schema_error(body(input="", speed=9.0), fastapi_loc=True).param == "input"


def test_session_config_takes_the_bodys_limits_and_null_as_omitted() -> None:
    """session.config is checked as the body is (the same fields and limits), and a null option is an omitted one,
    as vllm-omni clients send them (tests/unit/test_json_bodies.py: every field of every body alike)."""
    config = SessionConfig.model_validate(
        {"type": "session.config", "voice": None, "speaker": "heart", "speed": None, "response_format": None}
    )
    assert (config.voice_name, config.speed, config.response_format) == ("heart", 1.0, "wav")
    for field, value in (("speed", 9.0), ("model", ""), ("sample_rate", 1), ("seed", -1)):
        with pytest.raises(ValidationError) as info:
            SessionConfig.model_validate({"type": "session.config", field: value})
        assert validation_error(info.value.errors()).param == field


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("speed", True),
        ("seed", True),
        ("max_new_tokens", False),
        ("seed", "1_000"),
        ("sample_rate", "24_000"),
        ("speed", "1_0"),
        ("speaker_embedding", [True, 0.1]),
    ],
)
def test_a_session_config_number_is_a_number_not_a_switch_or_digits_with_underscores(field: str, value: object) -> None:
    """Numbers may come as text (as vllm-omni reads them), but `true` is no speed (it had read as 1.0) and "1_0" no
    number a client meant (Python's float() reads it as 10)."""
    with pytest.raises(ValidationError) as info:
        SessionConfig.model_validate({"type": "session.config", field: value})
    error = validation_error(info.value.errors())
    assert (error.param, error.code) == (field, "invalid_type")  # as "fast" for a speed is


def test_session_config_reads_numbers_sent_as_text_as_vllm_omni_does_where_the_body_refuses_them() -> None:
    """docs/websocket.md: `"speed": "1.5"` is a speed in a session.config (vllm-omni's config is read that way), a
    400 naming `speed` in a POST body; text that is not a number is refused in both. A switch is a boolean in both
    (tests/unit/test_json_bodies.py)."""
    config = SessionConfig.model_validate({"type": "session.config", "speed": "1.5", "seed": "7"})
    assert (config.speed, config.seed) == (1.5, 7)
    with pytest.raises(ValidationError) as info:
        SpeechRequest.model_validate(body(speed="1.5"))
    assert (validation_error(info.value.errors()).param, validation_error(info.value.errors()).code) == (
        "speed",
        "invalid_type",
    )
    for payload in ({"type": "session.config", "speed": "fast"}, body(speed="fast")):
        model = SessionConfig if "type" in payload else SpeechRequest
        with pytest.raises(ValidationError) as info:
            model.model_validate(payload)
        assert validation_error(info.value.errors()).param == "speed"
