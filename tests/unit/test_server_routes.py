"""The application's routes as a client meets them, on the server's own stack (app/server.py) with an engine that is
never started: what a path with a trailing slash answers, and HEAD beside every GET."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from app.server import create_app
from app.settings import Settings


@pytest_asyncio.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(engine="embedded"))
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
