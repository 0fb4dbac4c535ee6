"""Every error is OpenAI-shaped, with the right status and `param`, and carries a request id."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from tests.support.server import RunningServer, raw_answer

VALID = {"model": "tts-1", "input": "Hello.", "voice": "alloy"}


def assert_openai_error(response: httpx.Response, status: int, param: str | None, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"]
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert "Traceback" not in response.text
    return error


def with_(**changes: object) -> dict[str, object]:
    body = {**VALID, **changes}
    return {k: v for k, v in body.items() if v is not ...}


CASES = [
    ("missing input", with_(input=...), 400, "input", "missing_required_parameter"),
    ("empty input", with_(input=""), 400, "input", None),
    ("input too long", with_(input="a" * 4097), 400, "input", None),
    ("control characters only", with_(input="\u0000\u0001\u0002\u0007"), 400, "input", None),
    ("punctuation only", with_(input="... !!! ???"), 400, "input", None),
    ("input not a string", with_(input=42), 400, "input", "invalid_type"),
    ("unknown voice", with_(voice="nobody"), 400, "voice", "voice_not_found"),
    ("voice wrong type", with_(voice=7), 400, "voice", None),
    ("voice object without id", with_(voice={"name": "alloy"}), 400, "voice", None),
    ("voice too long", with_(voice="v" * 1_000_000), 400, "voice", "string_too_long"),
    ("bad response_format", with_(response_format="ogg"), 400, "response_format", None),
    ("bad stream_format", with_(stream_format="chunks"), 400, "stream_format", None),
    ("speed too low", with_(speed=0.2), 400, "speed", None),
    ("speed too high", with_(speed=4.01), 400, "speed", None),
    ("speed not a number", with_(speed="fast"), 400, "speed", "invalid_type"),
    ("instructions too long", with_(instructions="x" * 4097), 400, "instructions", None),
    ("unknown field", with_(temperature=0.5), 400, "temperature", "unknown_parameter"),
    ("unknown language", with_(language="Klingon"), 400, "language", None),
    ("task type unsupported", with_(task_type="Base"), 400, "task_type", None),
    ("task type unknown", with_(task_type="Karaoke"), 400, "task_type", None),
    ("ref_audio without cloning", with_(ref_audio="UklGRg=="), 400, "ref_audio", None),
    ("ref_text without cloning", with_(ref_text="hello"), 400, "ref_text", None),
    ("x_vector_only_mode without cloning", with_(x_vector_only_mode=True), 400, "x_vector_only_mode", None),
    ("max_new_tokens unsupported", with_(max_new_tokens=100), 400, "max_new_tokens", None),
    ("first chunk size unsupported", with_(initial_codec_chunk_frames=4), 400, "initial_codec_chunk_frames", None),
    ("prompt mode unsupported", with_(non_streaming_mode=True), 400, "non_streaming_mode", None),
    ("max_new_tokens invalid", with_(max_new_tokens=0), 400, "max_new_tokens", None),
    ("seed negative", with_(seed=-1), 400, "seed", None),
    ("sample_rate too low", with_(sample_rate=7999), 400, "sample_rate", None),
    ("sample_rate too high", with_(sample_rate=48001), 400, "sample_rate", None),
    ("sample_rate the codec cannot carry", with_(sample_rate=44100, response_format="opus"), 400, "sample_rate", None),
    ("unknown model", with_(model="tts-9"), 404, "model", "model_not_found"),
    ("text this English voice cannot read", with_(input="你好世界。"), 400, "input", None),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_speech_validation(server: RunningServer, body: dict, status: int, param: str, code: str | None) -> None:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=30)
    assert_openai_error(response, status, param, code)


def test_the_websocket_address_over_plain_http_says_it_needs_an_upgrade(server: RunningServer) -> None:
    """A 426 naming the upgrade, not a 404 as if the endpoint did not exist."""
    response = httpx.get(f"{server.base_url}/v1/audio/speech/stream", timeout=30)
    assert_openai_error(response, 426, None, "upgrade_required")
    assert response.headers["upgrade"] == "websocket"


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT A REQUEST\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Note: a\x01b\r\n\r\n",  # a control byte in a header
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",  # a space in a header's name
    ],
    ids=["request-line", "header-value", "header-name"],
)
def test_a_request_no_http_parser_reads_is_an_openai_400_with_a_request_id(server: RunningServer, raw: bytes) -> None:
    """The HTTP parser refuses it before the application sees it: it was answered in plain text, with no request id."""
    status, headers, body = raw_answer(server, raw)  # the server closes the connection
    assert status.startswith("HTTP/1.1 400 "), (status, body[:300])
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    assert re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", headers["x-request-id"])
    error = json.loads(body)["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_http")
    assert error["message"]


@pytest.mark.parametrize(
    "raw", [b"{not json", b"", b"[1, 2]", b'"just a string"', b"null", b'{"model": "tts-1", "input": "a",']
)
def test_malformed_body(server: RunningServer, raw: bytes) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=raw, headers={"content-type": "application/json"}, timeout=30
    )
    assert_openai_error(response, 400, None)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (with_(instructions="x" * 4097), "at most 4096 characters, not 4097"),  # a string's length, not its "items"
        (with_(model=""), "at least 1 character"),
        (with_(voice={"name": "alloy"}), "'voice.id'"),  # the object form's missing key, not the field itself
        (with_(voice="nobody"), "alloy"),  # the names a request may give, OpenAI's among them
        (with_(voice="v" * 1_000_000), "at most 256 characters, not 1000000"),  # the limit, not the name
    ],
    ids=[
        "string-too-long",
        "string-too-short",
        "voice-object-without-id",
        "unknown-voice-lists-aliases",
        "voice-too-long",
    ],
)
def test_validation_messages_say_what_is_wrong_with_the_field(server: RunningServer, body: dict, says: str) -> None:
    error = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=30).json()["error"]
    assert says in error["message"], error
    assert "vvvv" not in error["message"], error["message"][:200]  # the voice too long is not quoted back


@pytest.mark.parametrize(
    ("raw", "content_type", "says"),
    [
        (b'{"input": "\xff"}', "application/json", "JSON"),  # not UTF-8
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "JSON"),  # nested past any parser's depth
        (b'{"model": "tts-1", "voice": "alloy", "input": "Hi."}', "text/plain", "Content-Type: application/json"),
        (b'"{\\"input\\": \\"Hi.\\"}"', "application/json", "not a JSON string"),  # json=json.dumps(body)
    ],
    ids=["invalid-utf8", "nested-too-deep", "json-sent-as-text", "json-encoded-twice"],
)
def test_a_body_that_is_not_json_says_so(server: RunningServer, raw: bytes, content_type: str, says: str) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=raw, headers={"content-type": content_type}, timeout=30
    )
    error = assert_openai_error(response, 400, None)
    assert says in error["message"] and error["code"] in ("invalid_json", "invalid_request"), error


def test_body_over_the_cap_is_413(server: RunningServer) -> None:
    huge = b'{"model": "tts-1", "voice": "alloy", "input": "' + b"a" * (26 * 1024 * 1024) + b'"}'
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=huge, headers={"content-type": "application/json"}, timeout=60
    )
    assert_openai_error(response, 413, None, "request_too_large")


def test_chunked_body_over_the_cap_is_413(server: RunningServer) -> None:
    def body():
        yield b'{"model": "tts-1", "voice": "alloy", "input": "'
        for _ in range(27):
            yield b"a" * (1024 * 1024)
        yield b'"}'

    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=body(), headers={"content-type": "application/json"}, timeout=60
    )
    assert_openai_error(response, 413, None, "request_too_large")


def test_unknown_route_and_method(server: RunningServer) -> None:
    assert_openai_error(httpx.get(f"{server.base_url}/v1/nothing-here"), 404, None, "not_found")
    assert_openai_error(httpx.get(f"{server.base_url}/v1/audio/speech"), 405, None, "method_not_allowed")


def test_request_id_is_propagated_or_generated(server: RunningServer) -> None:
    given = httpx.post(
        f"{server.base_url}/v1/audio/speech", json=with_(voice="nobody"), headers={"X-Request-Id": "abc-123"}
    )
    assert given.headers["x-request-id"] == "abc-123"
    generated = httpx.get(f"{server.base_url}/health")
    assert len(generated.headers["x-request-id"]) == 32
    unsafe = httpx.get(f"{server.base_url}/health", headers={"X-Request-Id": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"] != "bad id\twith spaces"


def test_openai_sdk_raises_typed_errors(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad_voice:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hello.")
    assert bad_voice.value.param == "voice"
    with pytest.raises(openai.NotFoundError) as bad_model:
        client.audio.speech.create(model="tts-9", voice="alloy", input="Hello.")
    assert bad_model.value.code == "model_not_found"
