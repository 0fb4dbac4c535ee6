"""/docs and /redoc render in a real browser with nothing from the internet, and the schema documents real errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.browser import PageWatch
from tests.support.server import RunningServer

pytestmark = pytest.mark.e2e
in_browser = pytest.mark.asyncio(loop_scope="session")  # the session browser lives on the session loop


@in_browser
async def test_swagger_ui_renders_offline(server: RunningServer, browser: Any) -> None:
    page = await browser.new_page()
    watch = await PageWatch().attach(page)
    await page.goto(f"{server.base_url}/docs")
    await page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = await page.locator(".opblock-summary-path").all_inner_texts()
    assert "/v1/audio/speech" in paths and "/v1/audio/voices" in paths
    await page.locator(".opblock-post .opblock-summary").first.click()  # open POST /v1/audio/speech
    await page.wait_for_selector(".responses-table", timeout=10_000)
    codes = await page.locator(".responses-table .response-col_status").all_inner_texts()
    assert {"400", "429", "503"} <= {c.strip() for c in codes} and "422" not in codes
    await page.close()
    assert watch.problems == []


@in_browser
async def test_redoc_renders_offline(server: RunningServer, browser: Any) -> None:
    page = await browser.new_page()
    watch = await PageWatch().attach(page)
    await page.goto(f"{server.base_url}/redoc")
    await page.wait_for_selector('h2:has-text("Create Speech")', timeout=30_000)
    assert await page.get_by_text("/v1/audio/speech").count() >= 1  # the operation's path is shown
    assert await page.get_by_text("Too Many Requests").count() + await page.locator("text=429").count() >= 1
    await page.close()
    assert watch.problems == []


def test_schema_declares_openai_errors_and_no_422(server: RunningServer) -> None:
    schema = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
    assert '"422"' not in httpx.get(f"{server.base_url}/openapi.json", timeout=10).text
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert set(error["properties"]) == {"message", "type", "param", "code"}
    speech = schema["paths"]["/v1/audio/speech"]["post"]["responses"]
    assert {"400", "401", "404", "408", "413", "429", "503", "504"} <= set(speech)
    create_voice = schema["paths"]["/v1/audio/voices"]["post"]["responses"]
    assert {"408", "409", "413"} <= set(create_voice)  # 408: a body slower than SPEECH_REQUEST_READ_TIMEOUT_S
    for path in schema["paths"].values():
        for operation in path.values():
            for status, response in operation["responses"].items():
                if status >= "400":
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorResponse"), (status, ref)
