"""WS /v1/audio/speech/stream: a message over SPEECH_WS_MAX_MESSAGE_BYTES is refused on its length, before it is
parsed. Parsing megabytes of JSON (arrays nested deep, a million numbers) holds the event loop, and every other
session with it, for as long as it takes, for a message refused anyway. A session.config may be longer (its reference
audio, up to SPEECH_MAX_BODY_BYTES), however JSON spells its type, and is still parsed to be told."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api import json_body, speech_stream
from app.server import create_app
from app.settings import MIN_MESSAGE_BYTES, Settings
from tests.support.asgi import ready_client

PATH = "/v1/audio/speech/stream"
LIMIT = MIN_MESSAGE_BYTES  # SPEECH_WS_MAX_MESSAGE_BYTES; SPEECH_MAX_BODY_BYTES keeps its default, far above
# the refusal as a client has always been told it: one `error` message, then the close (1008, as before a
# session.config any refusal is)
TOO_LARGE = {
    "type": "error",
    "message": f"The message exceeds the limit of {LIMIT} bytes.",
    "code": "message_too_large",
    "param": None,
    "error": {
        "message": f"The message exceeds the limit of {LIMIT} bytes.",
        "type": "invalid_request_error",
        "param": None,
        "code": "message_too_large",
    },
}


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The UTF-8 size of every message the session parses as JSON."""
    sizes: list[int] = []

    def loads(raw: str) -> Any:
        sizes.append(len(raw.encode()))
        return json_body.loads(raw)

    monkeypatch.setattr(speech_stream, "loads", loads)
    yield sizes


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with ready_client(create_app(Settings(engine="embedded", ws_max_message_bytes=LIMIT))) as client:
        yield client


def answer(client: TestClient, raw: str) -> tuple[dict[str, Any], int]:
    """The `error` a new session's first message `raw` is answered with, and the code the session is closed with."""
    with client.websocket_connect(PATH) as ws:
        ws.send_text(raw)
        error = ws.receive_json()
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    return error, closed.value.code


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"type": "input.text", "text": "x" * LIMIT}),
        json.dumps({"type": "input.text", "text": "€" * (LIMIT // 3)}, ensure_ascii=False),  # fewer characters than
        # the limit, more UTF-8 bytes: the limit is in bytes, as it was
        '{"type": "input.text", "text": "hi", "n": ' + "[" * LIMIT + "]" * LIMIT + "}",  # too deep for Python's parser
        '{"type": "input.text", "text": "' + "x" * LIMIT,  # not even JSON
        json.dumps({"type": "input.done", "padding": [1] * LIMIT}),
        json.dumps({"type": "SESSION.CONFIG", "voice": "alloy", "padding": "x" * LIMIT}),  # no session.config
        json.dumps({"type": "input.text", "text": "\u00e9" * LIMIT}),  # escapes, none spelling a session.config
    ],
    ids=["text", "multibyte", "nested", "not-json", "numbers", "upper-case", "escaped"],
)
def test_a_message_over_the_limit_is_refused_without_being_parsed(
    client: TestClient, parsed: list[int], raw: str
) -> None:
    assert len(raw.encode()) > LIMIT
    assert answer(client, raw) == (TOO_LARGE, speech_stream.CLOSE_POLICY)
    assert parsed == []


def test_a_message_within_the_limit_is_parsed_as_before(client: TestClient, parsed: list[int]) -> None:
    raw = json.dumps({"type": "input.text", "text": "€" * (LIMIT // 4)}, ensure_ascii=False)
    assert len(raw) < len(raw.encode()) <= LIMIT
    error, code = answer(client, raw)
    assert (error["code"], code) == ("session_config_required", speech_stream.CLOSE_POLICY)
    assert parsed == [len(raw.encode())]


@pytest.mark.parametrize(
    "kind",
    ['"session.config"', '"session\\u002econfig"', '"\\u0073ession.confi\\u0067"', '"session\\u002Econfig"'],
)
def test_a_session_config_over_the_message_limit_is_still_parsed(
    client: TestClient, parsed: list[int], kind: str
) -> None:
    """Only the body limit applies to a session.config, however JSON spells its type (it need not come first): a
    field it does not have is named, not refused for its size."""
    raw = '{"voice": "alloy", "padding": "' + "x" * LIMIT + '", "type": ' + kind + "}"
    assert json.loads(raw)["type"] == "session.config"
    error, code = answer(client, raw)
    assert ((error["code"], error["param"]), code) == (("unknown_parameter", "padding"), speech_stream.CLOSE_POLICY)
    assert parsed == [len(raw.encode())]


def test_a_message_that_only_holds_the_string_session_config_is_refused_for_its_size_after_all(
    client: TestClient, parsed: list[int]
) -> None:
    """Where the string is not its type, it could be a session.config until parsed: parsed, then refused as before."""
    raw = json.dumps({"type": "input.text", "text": "x" * LIMIT, "session.config": "session.config"})
    assert answer(client, raw) == (TOO_LARGE, speech_stream.CLOSE_POLICY)
    assert parsed == [len(raw.encode())]
