"""/docs and /redoc render in a real browser with nothing from the internet, and the schema documents real errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.browser import PageWatch
from tests.support.server import RunningServer

pytestmark = pytest.mark.e2e


def test_swagger_ui_renders_offline(server: RunningServer, browser: Any) -> None:
    page = browser.new_page()
    watch = PageWatch().attach(page)
    page.goto(f"{server.base_url}/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/v1/audio/speech" in paths and "/v1/audio/voices" in paths
    page.locator(".opblock-post .opblock-summary").first.click()  # open POST /v1/audio/speech
    page.wait_for_selector(".responses-table", timeout=10_000)
    codes = page.locator(".responses-table .response-col_status").all_inner_texts()
    assert {"400", "429", "503"} <= {c.strip() for c in codes} and "422" not in codes
    page.close()
    assert watch.problems == []


def test_redoc_renders_offline(server: RunningServer, browser: Any) -> None:
    page = browser.new_page()
    watch = PageWatch().attach(page)
    page.goto(f"{server.base_url}/redoc")
    page.wait_for_selector('h2:has-text("Create Speech")', timeout=30_000)
    assert page.get_by_text("/v1/audio/speech").count() >= 1  # the operation's path is shown
    assert page.get_by_text("Too Many Requests").count() + page.locator("text=429").count() >= 1
    page.close()
    assert watch.problems == []


def test_schema_declares_openai_errors_and_no_422(server: RunningServer) -> None:
    schema = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
    assert '"422"' not in httpx.get(f"{server.base_url}/openapi.json", timeout=10).text
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert set(error["properties"]) == {"message", "type", "param", "code"}
    speech = schema["paths"]["/v1/audio/speech"]["post"]["responses"]
    assert {"400", "401", "404", "413", "429", "503", "504"} <= set(speech)
    create_voice = schema["paths"]["/v1/audio/voices"]["post"]["responses"]
    assert "409" in create_voice
    for path in schema["paths"].values():
        for operation in path.values():
            for status, response in operation["responses"].items():
                if status >= "400":
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorResponse"), (status, ref)
