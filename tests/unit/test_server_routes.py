"""The application's routes as a client meets them, on the server's own stack (app/server.py) with an engine that is
never started: what a path with a trailing slash answers, and HEAD beside every GET."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from app.server import create_app
from app.settings import Settings
from app.speech.errors import too_many_characters
from app.voices import MAX_VOICE_NAME_CHARS


@pytest_asyncio.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(engine="embedded", voice_store=str(tmp_path / "voices")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/audio/speech/"),
        ("POST", "/v1/audio/speech/batch/"),
        ("GET", "/v1/audio/voices/"),
        ("GET", "/v1/audio/capabilities/"),
        ("GET", "/health/"),
        ("GET", "/v1/models/"),  # the model's route takes ids with "/": an empty id, or one ending in it, is no id
        ("GET", "/v1/models/tts-1/"),
    ],
)
async def test_a_path_with_a_trailing_slash_is_an_openai_404_naming_the_route_without_it(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    """A 307 to the path without the slash would make a POST client (the OpenAI SDKs among them) send its body again
    or drop it; every route answers alike, as an unknown route does, and says where the route is."""
    response = await client.request(method, path, json={"input": "Hello."} if method == "POST" else None)
    assert response.status_code == 404, response.text
    assert "location" not in response.headers
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "not_found", None)
    assert error["message"] == f"Not found: {method} {path}. Routes have no trailing slash: {path.rstrip('/')}."
    unknown = (await client.get("/v1/nothing-here")).json()["error"]
    assert (unknown["code"], unknown["message"]) == ("not_found", "Not found: GET /v1/nothing-here.")
    # no route without the slash either: nothing suggested
    unknown = (await client.get("/v1/nothing-here/")).json()["error"]
    assert (unknown["code"], unknown["message"]) == ("not_found", "Not found: GET /v1/nothing-here/.")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models",
        "/v1/models/tts-1",
        "/v1/models/nope",
        "/v1/audio/capabilities",
        "/v1/audio/voices",
        "/v1/audio/voices/nobody",
        "/health",
        "/ready",
        "/metrics",
        "/",
        "/docs",
        "/redoc",
        "/docs-assets/redoc.standalone.js",  # a route of its own under the assets' mount, which takes any method
    ],
)
async def test_every_get_route_answers_head_as_it_answers_get(client: httpx.AsyncClient, path: str) -> None:
    """HEAD is GET without its body (RFC 9110): uptime checkers and balancers probe with it, and a client may ask
    for a listing's headers alone. Not a 405, wherever a GET answers; the same status and content type."""
    get, head = await client.get(path), await client.head(path)
    assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
    headers = (
        ("content-type", "cache-control") if path == "/metrics" else ("content-type", "content-length", "cache-control")
    )
    for header in headers:  # a scrape's body counts the requests before it: its length moves
        assert head.headers.get(header) == get.headers.get(header), (path, header)


async def test_head_adds_no_operation_to_the_openapi_document(client: httpx.AsyncClient) -> None:
    """One operation per route and method a client calls: a HEAD beside each GET would repeat its operation id."""
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert "/v1/models" in paths and not [path for path, operations in paths.items() if "head" in operations]


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_a_voice_path_longer_than_any_voices_name_is_refused_saying_the_limit_not_the_name(
    client: httpx.AsyncClient, method: str
) -> None:
    """The path's name was quoted whole in the 404 ("No voice named '...'"), as long as the URL the server read; a name
    no voice can have is refused as `voice` is, saying the limit and the length."""
    name = "n" * 60_000  # under httpx's longest URL; the server reads longer ones
    response = await client.request(method, f"/v1/audio/voices/{name}")
    assert response.status_code == 400, response.text[:200]
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "name", "string_too_long")
    assert error["message"] == too_many_characters("name", MAX_VOICE_NAME_CHARS, len(name))
    found = await client.request(method, f"/v1/audio/voices/{'n' * MAX_VOICE_NAME_CHARS}")
    assert found.status_code == 404 and found.json()["error"]["code"] == "voice_not_found"
