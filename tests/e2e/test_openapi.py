"""The OpenAPI document (/openapi.json) against the server that serves it: a client generated from the document, or
a JSON-Schema validator, checks a body by the document's schema, so the schema takes what the server takes and
refuses what it refuses. Every JSON body takes null for an optional field (the field omitted, as OpenAI's API reads
it), never for a required one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.support.server import RunningServer, start_server

# every JSON body of the document, with what it must send (its required fields); the test sends each other as null
REQUIRED: dict[str, dict[str, Any]] = {
    "/v1/audio/speech": {"input": "Hello there."},
    "/v1/audio/speech/batch": {"items": [{"input": "Hello there."}]},
    "/admin/profile/start": {},
    "/admin/profile/stop": {},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server with every route a JSON body goes to (the profiler's only where SPEECH_PROFILER_DIR is set)."""
    folder = tmp_path_factory.mktemp("openapi")
    running = start_server(folder / "server.log", env={"SPEECH_PROFILER_DIR": str(folder / "profiles")})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def document(served: RunningServer) -> dict[str, Any]:
    response = httpx.get(f"{served.base_url}/openapi.json", timeout=30)
    assert response.status_code == 200
    return response.json()


def body_validator(document: dict[str, Any], path: str) -> Draft202012Validator:
    """The validator of `path`'s JSON body by the document's schema (OpenAPI 3.1: JSON Schema 2020-12)."""
    assert document["openapi"].startswith("3.1.")
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": document["components"]})


def body_model(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The object schema of `path`'s body (the profiler's body may itself be null: the object's branch)."""
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    refs = [schema["$ref"]] if "$ref" in schema else [branch["$ref"] for branch in schema["anyOf"] if "$ref" in branch]
    (ref,) = refs
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]


def taken(response: httpx.Response) -> bool:
    """The body was read as valid: answered, or refused for no field of it (the embedded engine has no profiler)."""
    if response.status_code == 200:
        return True
    error = response.json()["error"]
    return (error["code"], error["param"]) == ("unsupported_engine", None)


def test_every_json_body_of_the_document_is_checked_here(document: dict[str, Any]) -> None:
    bodies = {
        path
        for path, operations in document["paths"].items()
        for operation in operations.values()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }
    assert bodies == set(REQUIRED)


@pytest.mark.parametrize("path", list(REQUIRED))
def test_null_for_every_optional_field_is_valid_by_the_schema_as_the_server_takes_it(
    served: RunningServer, document: dict[str, Any], path: str
) -> None:
    """A generated client sends null for what it leaves unset: the schema said that was invalid (`speed`,
    `response_format`, `voice`, `stream`, the profiler's `run_id` ... had no null), though the server takes it."""
    model = body_model(document, path)
    optional = set(model["properties"]) - set(model.get("required", []))
    body = {**dict.fromkeys(optional, None), **REQUIRED[path]}
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in body_validator(document, path).iter_errors(body)]
    assert not errors, errors
    response = httpx.post(f"{served.base_url}{path}", json=body, timeout=60)
    assert taken(response), response.text[:500]


@pytest.mark.parametrize("path", list(REQUIRED))
def test_each_optional_field_alone_as_null_is_valid(document: dict[str, Any], path: str) -> None:
    """Field by field: each optional field's schema itself takes null (not only the body as a whole)."""
    model = body_model(document, path)
    validator = body_validator(document, path)
    for name in set(model["properties"]) - set(model.get("required", [])):
        assert validator.is_valid({**REQUIRED[path], name: None}), (path, name)


@pytest.mark.parametrize(
    ("path", "field"), [(path, field) for path in REQUIRED for field in REQUIRED[path]], ids=lambda value: value
)
def test_null_for_a_required_field_is_invalid_by_the_schema_as_the_server_refuses_it(
    served: RunningServer, document: dict[str, Any], path: str, field: str
) -> None:
    assert field in body_model(document, path)["required"]
    body = {**REQUIRED[path], field: None}
    assert not body_validator(document, path).is_valid(body)
    response = httpx.post(f"{served.base_url}{path}", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/v1/audio/speech", "speed", 4.5),  # bounds
        ("/v1/audio/speech", "response_format", "ogg"),  # an enum
        ("/v1/audio/speech", "stream", "true"),  # a switch is a boolean
        ("/v1/audio/speech", "voice", 7),  # a name or {"id": ...}
        ("/v1/audio/speech", "sample_rate", 7999),
        ("/v1/audio/speech", "temperature", 0.5),  # no such field
        ("/v1/audio/speech/batch", "items", []),
        ("/v1/audio/speech/batch", "task_type", "Karaoke"),
        ("/admin/profile/start", "run_id", "../up"),  # a pattern
        ("/admin/profile/stop", "run_id", ""),
    ],
)
def test_a_value_the_server_refuses_is_still_invalid_by_the_schema(
    served: RunningServer, document: dict[str, Any], path: str, field: str, value: object
) -> None:
    """Taking null changed nothing else a field's schema says: its bounds, its values, its type."""
    body = {**REQUIRED[path], field: value}
    assert not body_validator(document, path).is_valid(body)
    response = httpx.post(f"{served.base_url}{path}", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text


def test_the_descriptions_and_defaults_stay_beside_the_field(document: dict[str, Any]) -> None:
    """A field that now takes null keeps its title, description and default where a documentation page reads them."""
    speech = document["components"]["schemas"]["SpeechRequest"]["properties"]
    assert speech["speed"]["default"] == 1.0 and speech["speed"]["title"] == "Speed"
    assert speech["stream"]["description"].startswith("vllm-omni's switch") and speech["stream"]["default"] is False
    assert speech["response_format"]["default"] == "mp3"
    assert speech["input"]["description"].startswith("Text to speak") and "anyOf" not in speech["input"]


BATCH = "/v1/audio/speech/batch"


def batch_item_schema(document: dict[str, Any]) -> dict[str, Any]:
    """The schema the document gives an item of a batch (a `$ref` followed): the item model's, by its name."""
    item = body_model(document, BATCH)["properties"]["items"]["items"]
    if "$ref" in item:
        item = document["components"]["schemas"][item["$ref"].rsplit("/", 1)[1]]
    assert item.get("title") == "SpeechBatchItem", item  # the name a generated client gives its class
    return item


def test_a_batch_item_is_documented_by_the_fields_the_server_checks_it_by(document: dict[str, Any]) -> None:
    """A batch's items were documented as any JSON object: a generated client saw none of an item's fields. They are
    a request's fields but the stream switches, with their bounds and values; an item that omits one, or sends it as
    null, takes the batch's (so no default of its own is documented)."""
    item = batch_item_schema(document)
    speech = body_model(document, "/v1/audio/speech")
    assert set(item["properties"]) == set(speech["properties"]) - {"stream", "stream_format"}
    assert item["required"] == ["input"] and item["additionalProperties"] is False
    for name, field in item["properties"].items():
        assert "default" not in field, (name, field)
        if name == "word_timestamps":  # false only (see below)
            continue
        mine = {key: value for key, value in field.items() if key not in ("default", "description")}
        theirs = {
            key: value for key, value in speech["properties"][name].items() if key not in ("default", "description")
        }
        assert mine == theirs, name  # the same values, bounds and nullability as a request's


@pytest.mark.parametrize(
    "item",
    [
        {"input": "Hi.", "temperature": 0.5},  # no such field
        {"input": "Hi.", "stream": True},  # no stream switches in an item: each is a whole file
        {"input": "Hi.", "response_format": "ogg"},  # an enum
        {"input": "Hi.", "task_type": "Karaoke"},
        {"input": "Hi.", "speed": 9},  # bounds
        {"input": "Hi.", "voice": 7},
        {"input": ""},
        {"input": None},  # required: no null
        {"text": "no input"},
        "Not an object.",
    ],
    ids=repr,
)
def test_an_item_the_server_refuses_is_invalid_by_the_schema_and_fails_alone(
    served: RunningServer, document: dict[str, Any], item: object
) -> None:
    """The schema refuses what the server refuses of an item; the server still answers the item with its own error,
    the batch's other items spoken."""
    good = {"input": "Hello there.", "speed": None, "response_format": "pcm", "voice": {"id": "alloy"}}
    assert body_validator(document, BATCH).is_valid({"items": [good]})
    assert not body_validator(document, BATCH).is_valid({"items": [good, item]})
    response = httpx.post(
        f"{served.base_url}{BATCH}", json={"response_format": "pcm", "items": [good, item]}, timeout=120
    )
    assert response.status_code == 200, response.text
    first, second = response.json()["results"]
    assert first["status"] == "success" and second["status"] == "error", second
    assert second["error"]["param"].startswith("items[1]"), second["error"]


def test_each_optional_field_of_an_item_alone_as_null_is_valid(document: dict[str, Any]) -> None:
    """An item's null is its field omitted (the batch's value), as a body's is."""
    item = batch_item_schema(document)
    validator = body_validator(document, BATCH)
    for name in set(item["properties"]) - {"input"}:
        assert validator.is_valid({"items": [{"input": "Hi.", name: None}]}), name


def test_a_batch_item_is_a_named_component_the_items_refer_to(document: dict[str, Any]) -> None:
    """The item's schema was written inline in the batch's `items`, so a generated client gave an item an anonymous
    type (and the `SpeechBatchItem` component beside it, referred to by nothing, a second class of its own)."""
    items = body_model(document, BATCH)["properties"]["items"]
    assert items["type"] == "array" and items["items"] == {"$ref": "#/components/schemas/SpeechBatchItem"}, items
    assert document["components"]["schemas"]["SpeechBatchItem"]["title"] == "SpeechBatchItem"


GOOD_ITEM = {"input": "Hello there.", "response_format": "pcm"}


@pytest.mark.parametrize(
    ("where", "body", "param"),
    [
        ("batch", {"items": [GOOD_ITEM], "word_timestamps": True}, "word_timestamps"),
        ("item", {"items": [GOOD_ITEM, {**GOOD_ITEM, "word_timestamps": True}]}, "items[1].word_timestamps"),
    ],
    ids=["batch", "item"],
)
def test_a_batch_offers_no_word_timestamps_as_the_server_refuses_them(
    served: RunningServer, document: dict[str, Any], where: str, body: dict[str, Any], param: str
) -> None:
    """A batch has no headers per item to carry word timings: `word_timestamps: true` is refused (the batch's whole,
    an item's alone), so the document offered a generated client a switch that could only fail. It is documented as
    false alone, which the server takes (as it takes null, the field omitted)."""
    model = batch_item_schema(document) if where == "item" else body_model(document, BATCH)
    field = Draft202012Validator({**model["properties"]["word_timestamps"], "components": document["components"]})
    assert not field.is_valid(True) and field.is_valid(False) and field.is_valid(None)
    validator = body_validator(document, BATCH)
    assert not validator.is_valid(body)
    response = httpx.post(f"{served.base_url}{BATCH}", json=body, timeout=120)
    if where == "batch":
        assert response.status_code == 400, response.text
        error = response.json()["error"]
    else:
        assert response.status_code == 200, response.text
        error = response.json()["results"][1]["error"]
    assert error["param"] == param and "not available in a batch" in error["message"], error
    for value in (False, None):  # what the document takes, the server takes
        pinned = {**body, "items": [{**item, "word_timestamps": value} for item in body["items"]]}
        pinned |= {"word_timestamps": value} if where == "batch" else {}
        assert validator.is_valid(pinned), value
        response = httpx.post(f"{served.base_url}{BATCH}", json=pinned, timeout=120)
        assert response.status_code == 200, response.text
        assert all(result["status"] == "success" for result in response.json()["results"]), response.text
