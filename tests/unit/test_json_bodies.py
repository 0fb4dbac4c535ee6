"""How every JSON body and message of the API is read, whatever its endpoint or transport: `null` for an optional field
is the field omitted (OpenAI's reading; JavaScript and generated clients send it for what they leave unset), a
required one given as `null` is refused by name; a switch is a JSON boolean; an unknown field is refused by name,
the admin's bodies' too; a number too long for Python to read is refused naming where it is, not as a body that is no
JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from app.api import json_body
from app.api.errors import ApiError, validation_error
from app.api.profile import ProfileStart, ProfileStop
from app.api.schemas import SpeechBatchItem, SpeechBatchRequest, SpeechRequest
from app.api.speech_batch import checked_item, shared_fields
from app.api.speech_stream import SessionConfig
from app.server import create_app
from app.settings import Settings
from app.speech.options import field_types, is_switch
from tests.support.asgi import ready_client

# each body or message, with the least it must carry
MINIMAL: dict[type[BaseModel], dict[str, Any]] = {
    SpeechRequest: {"input": "Hello there."},
    SpeechBatchItem: {"input": "Hello there."},
    SpeechBatchRequest: {"items": [{"input": "Hello there."}]},
    SessionConfig: {"type": "session.config"},
    ProfileStart: {},
    ProfileStop: {},
}


def optional_fields() -> list[Any]:
    return [
        pytest.param(model, name, id=f"{model.__name__}.{name}")
        for model in MINIMAL
        for name, field in model.model_fields.items()
        if not field.is_required()
    ]


def switches() -> list[Any]:
    return [
        pytest.param(model, name, id=f"{model.__name__}.{name}")
        for model in MINIMAL
        for name, field in model.model_fields.items()
        if is_switch(field.annotation)
    ]


def refusal(model: type[BaseModel], data: dict[str, Any]) -> Any:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return validation_error(info.value.errors())


# -- null ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "name"), optional_fields())
def test_null_for_an_optional_field_is_the_field_omitted(model: type[BaseModel], name: str) -> None:
    """Every optional field of every body and of a session.config reads null as omitted: its default, and not counted
    as sent. `voice`, `speed`, `stream`, `response_format` and the switches had refused it (no string, number or
    boolean) where the extension fields took it as omitted, and a session.config's format and word timings too."""
    minimal = MINIMAL[model]
    omitted = model.model_validate({k: v for k, v in minimal.items() if k != name})
    sent = model.model_validate({**minimal, name: None})
    assert sent.model_fields_set == omitted.model_fields_set  # not "sent": `stream: null` asks for no whole file
    if model.model_fields[name].default_factory is None:  # (a run's default name is the time it starts)
        assert getattr(sent, name) == getattr(omitted, name)
    if isinstance(sent, SpeechRequest) and isinstance(omitted, SpeechRequest):
        assert (sent.whole_file, sent.stream_format) == (omitted.whole_file, omitted.stream_format)


def test_null_voice_with_speaker_is_the_speaker() -> None:
    """`voice: null` is an omitted voice: `speaker`, vllm-omni's other name for it, names it, as without `voice`."""
    request = SpeechRequest.model_validate({"input": "Hi.", "voice": None, "speaker": "nova"})
    assert request.voice_name == "nova"
    item = SpeechBatchItem.model_validate({"input": "Hi.", "voice": None, "speaker": "nova"})
    assert "voice" not in item.model_fields_set


def test_null_in_a_batch_item_takes_the_batchs_value() -> None:
    """An item's null is an item that does not set the field: it takes the batch's, as an item without it does."""
    batch = SpeechBatchRequest.model_validate({"voice": "nova", "seed": 7, "items": [{}], "response_format": None})
    shared = shared_fields(batch)
    item = checked_item(shared, {"input": "Hi.", "voice": None, "seed": None, "response_format": None}, 0)
    assert isinstance(item, SpeechBatchItem)
    assert (item.voice_name, item.seed, item.response_format) == ("nova", 7, "wav")


@pytest.mark.parametrize(
    ("model", "data", "param"),
    [
        (SpeechRequest, {"input": None}, "input"),
        (SpeechBatchItem, {"input": None}, "input"),
        (SpeechBatchRequest, {"items": None}, "items"),
        (SpeechRequest, {"input": "Hi.", "voice": {"id": None}}, "voice"),
        (SessionConfig, {"type": None}, "type"),
    ],
)
def test_null_for_a_required_field_is_refused_naming_it(model: type[BaseModel], data: dict, param: str) -> None:
    error = refusal(model, data)
    assert (error.status, error.param) == (400, param)
    assert f"'{param}" in error.message


@pytest.mark.parametrize("model", list(MINIMAL), ids=lambda model: model.__name__)
def test_the_json_schema_takes_null_where_the_model_does(model: type[BaseModel]) -> None:
    """Each body's JSON schema says what the body reads (the OpenAPI document's and a batch item's and a
    session.config's, which no document carries): null for any optional field, never for a required one. The schema
    of a field with a default and no `| None` (`speed`, `voice`, `stream`, `response_format`, the switches, a run's
    `run_id`) held null invalid."""
    validator = Draft202012Validator(model.model_json_schema())
    minimal = MINIMAL[model]
    for name, field in model.model_fields.items():
        if field.is_required():
            assert not validator.is_valid({**minimal, name: None}), name
            with pytest.raises(ValidationError):
                model.model_validate({**minimal, name: None})
        else:
            assert validator.is_valid({**minimal, name: None}), name
            model.model_validate({**minimal, name: None})


# -- switches ------------------------------------------------------------------------------------------------------


def test_every_switch_is_found() -> None:
    """The switches the server (and the tests below) find in the bodies, all of them: one missed would be read as
    its model reads it, and tested by nothing."""
    names = {name for param in switches() for name in param.values[1:]}
    assert names == {
        "stream",
        "word_timestamps",
        "ignore_eos",
        "x_vector_only_mode",
        "non_streaming_mode",
        "stream_audio",
        "timeline",
    }


@pytest.mark.parametrize("value", ["yes", "true", "false", 1, 0, 1.0, [], {}])
@pytest.mark.parametrize(("model", "name"), switches())
def test_a_switch_is_a_json_boolean(model: type[BaseModel], name: str, value: object) -> None:
    """`"word_timestamps": "yes"` was a true switch in a session.config (pydantic's lax reading, which takes "on",
    "1" and 1 alike): every switch of every body and message takes `true` or `false` only, and the refusal names the
    field and says a boolean is expected, and what came instead."""
    error = refusal(model, {**MINIMAL[model], name: value})
    assert (error.status, error.param, error.code) == (400, name, "invalid_type")
    assert error.message.startswith(f"Invalid value for '{name}': must be true or false (a JSON boolean), not ")


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("model", "name"), switches())
def test_a_switch_takes_true_and_false(model: type[BaseModel], name: str, value: bool) -> None:
    assert getattr(model.model_validate({**MINIMAL[model], name: value}), name) is value


def test_a_session_config_still_reads_numbers_sent_as_text() -> None:
    """vllm-omni reads a session.config's numbers from text, and so does this server; its switches are booleans."""
    config = SessionConfig.model_validate({"type": "session.config", "speed": "1.5", "seed": "7"})
    assert (config.speed, config.seed) == (1.5, 7)
    assert refusal(SessionConfig, {"type": "session.config", "word_timestamps": "true"}).param == "word_timestamps"


def integer_fields() -> list[Any]:
    return [
        pytest.param(model, name, id=f"{model.__name__}.{name}")
        for model in MINIMAL
        for name, field in model.model_fields.items()
        if field_types(field.annotation) == (int,)
    ]


def outcome(model: type[BaseModel], data: dict[str, Any], name: str) -> tuple[str, Any]:
    try:
        value = getattr(model.model_validate(data), name)
    except ValidationError as exc:
        error = validation_error(exc.errors())
        return ("refused", (error.param, error.code))
    return ("taken", (type(value), value))


def test_every_integer_field_is_found() -> None:
    assert {p.values[1] for p in integer_fields()} >= {"seed", "max_new_tokens", "sample_rate"}


@pytest.mark.parametrize("number", [1, 24000])
@pytest.mark.parametrize(("model", "name"), integer_fields())
def test_an_integer_field_takes_a_whole_number_written_with_a_fraction(
    model: type[BaseModel], name: str, number: int
) -> None:
    """`"sample_rate": 24000.0` was refused as no integer, though JSON has one kind of number and JSON Schema's
    `integer`, as /openapi.json documents these fields, is any number without a fraction (a Python client's float,
    `json.dumps(24000.0)`, sends it so): it is read as the integer, taken or refused as that integer is."""
    data = {**MINIMAL[model], name: number}
    assert outcome(model, {**data, name: float(number)}, name) == outcome(model, data, name)
    schema = model.model_json_schema()
    if outcome(model, data, name)[0] == "taken":
        assert not list(Draft202012Validator(schema).iter_errors({**data, name: float(number)}))


@pytest.mark.parametrize("value", [1.5, 1e-9, float("inf"), float("nan")])
@pytest.mark.parametrize(("model", "name"), integer_fields())
def test_an_integer_field_refuses_a_number_with_a_fraction(model: type[BaseModel], name: str, value: float) -> None:
    error = refusal(model, {**MINIMAL[model], name: value})
    assert (error.status, error.param) == (400, name)


# -- the admin's bodies --------------------------------------------------------------------------------------------


async def refused(path: str, profiler_dir: Path | None = None, **request: Any) -> dict[str, Any]:
    """The error an embedded server's app answers a POST to `path` with (`request`: httpx's arguments), a 400;
    `profiler_dir` turns its profiler's routes on."""
    settings = Settings(engine="embedded", profiler_dir=None if profiler_dir is None else str(profiler_dir))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://test") as c:
        answer = await c.post(path, **request)
    assert answer.status_code == 400, answer.text
    return answer.json()["error"]


@pytest.mark.parametrize("route", ["start", "stop"])
@pytest.mark.parametrize("field", ["run-id", "timeline_"])
async def test_an_admin_profile_body_refuses_an_unknown_field_by_name(tmp_path: Path, route: str, field: str) -> None:
    """As every other body does: a misspelt field (`run-id`) was dropped unnoticed, the run named by the default (or
    the profiler run where the timeline was meant)."""
    assert await refused(f"/admin/profile/{route}", tmp_path / "profiles", json={field: "r1"}) == {
        "message": f"Unrecognized request argument supplied: {field}",
        "type": "invalid_request_error",
        "param": field,
        "code": "unknown_parameter",
    }


# -- numbers too long to read --------------------------------------------------------------------------------------

DIGITS = "1" * 5000  # past Python's 4300 digits of an int read from text
TOO_LONG = "a number of 5000 digits, longer than the 4300 this server reads"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/audio/speech", '{"input": "Hi.", "seed": ' + DIGITS + "}", "seed"),
        ("/v1/audio/speech", '{"input": "Hi.", "seed": -' + DIGITS + "}", "seed"),
        ("/v1/audio/speech", '{"input": "Hi.", "extra_params": {"top_k": ' + DIGITS + "}}", "extra_params.top_k"),
        ("/v1/audio/speech", '{"input": "Hi.", "speaker_embedding": [0.5, ' + DIGITS + "]}", "speaker_embedding[1]"),
        ("/v1/audio/speech/batch", '{"items": [{"input": "A."}, {"seed": ' + DIGITS + "}]}", "items[1].seed"),
        ("/admin/profile/start", '{"run_id": ' + DIGITS + "}", "run_id"),
    ],
    ids=["seed", "negative", "nested", "in-a-list", "batch-item", "admin"],
)
async def test_a_number_too_long_to_read_is_refused_naming_where_it_is(
    tmp_path: Path, path: str, body: str, param: str
) -> None:
    """It was told as a body that is no JSON (`invalid_json`, naming nothing): the body is JSON, and one of its
    numbers has more digits than Python reads into an int. Each is far past any limit of any field."""
    assert await refused(path, tmp_path, content=body, headers={"content-type": "application/json"}) == {
        "message": f"Invalid value for '{param}': {TOO_LONG}.",
        "type": "invalid_request_error",
        "param": param,
        "code": "invalid_value",
    }


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ('{"input": "Hi.", "seed": ' + "1" * 4300 + "}", "invalid_value", "seed"),  # read: past the field's range
        ('{"input": "Hi.", "seed": ' + DIGITS + ", }", "invalid_json", None),  # no JSON after all
        ('{"input": "Hi.", "speed": ' + DIGITS + ".5}", "invalid_value", "speed"),  # a float: read, infinite
    ],
    ids=["at-the-limit", "not-json-after-it", "float"],
)
async def test_around_a_number_too_long(body: str, code: str, param: str | None) -> None:
    error = await refused("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
    assert (error["code"], error["param"]) == (code, param)


def test_a_number_too_long_in_a_websocket_message_is_refused_naming_its_field() -> None:
    with (
        ready_client(create_app(Settings(engine="embedded"))) as client,
        client.websocket_connect("/v1/audio/speech/stream") as ws,
    ):
        ws.send_text('{"type": "session.config", "speed": ' + DIGITS + "}")
        error = ws.receive_json()
    assert (error["code"], error["param"], error["message"]) == (
        "invalid_value",
        "speed",
        f"Invalid value for 'speed': {TOO_LONG}.",
    )


def test_a_long_number_in_a_large_body_is_refused_without_reading_the_body_again(monkeypatch: Any) -> None:
    """Past `REREAD_MAX_CHARS` the body is not read a second time to find where the number is: that reading and the
    walk after it held the event loop for seconds on a 25-MB body of numbers. The refusal says why, naming no field."""

    def never(text: str | bytes) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(json_body, "read_past_long_numbers", never)
    padding = "[" + ",".join(["1"] * (json_body.REREAD_MAX_CHARS // 2)) + "]"
    with pytest.raises(ApiError) as refused:
        json_body.loads('{"input": "Hi.", "padding": ' + padding + ', "seed": ' + DIGITS + "}")
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "invalid_value", None)
    assert refused.value.message == "A number of more digits than the 4300 this server reads."


def test_where_a_long_number_is_cannot_be_told_of_a_key_given_twice() -> None:
    """The last value of a key given twice is kept: the long number is nowhere in what was read, and the refusal
    names no field rather than taking the whole body for the number."""
    with pytest.raises(ApiError) as refused:
        json_body.loads('{"seed": ' + DIGITS + ', "seed": 1}')
    assert (refused.value.code, refused.value.param) == ("invalid_value", None)
    assert refused.value.message == f"{TOO_LONG[0].upper()}{TOO_LONG[1:]}."


def test_the_path_to_a_value_follows_the_text_through_objects_and_arrays() -> None:
    target = object()
    data = {"a": [1, {"b": 2}], "items": [{"x": 1}, {"y": [0, 0, target]}], "z": target}
    assert json_body.path_to(data, target) == "items[1].y[2]"
    assert json_body.path_to(data, object()) is None and json_body.path_to(target, target) == ""


def test_a_large_body_that_is_no_utf8_is_told_so_not_taken_for_a_long_number() -> None:
    """A UnicodeDecodeError is a ValueError too: past `REREAD_MAX_CHARS` it was answered as a number too long."""
    body = b'{"input": "' + b"a" * json_body.REREAD_MAX_CHARS + b'\xff"}'
    with pytest.raises(UnicodeDecodeError):
        json_body.loads(body)
