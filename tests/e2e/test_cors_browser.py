"""CORS, in a real browser: a page on another loopback origin calls the API (preflight, key, X-Request-Id), an origin
not listed is blocked, and without SPEECH_CORS_ORIGINS every cross-origin call is blocked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import PageWatch
from tests.support.server import RunningServer, free_port, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

KEY = "cors-test-key"
PAGE = b"<!doctype html><html><head><title>another origin</title></head><body>web app</body></html>"

# what a web app does: a JSON POST with a key and its own request id (a non-simple request: preflighted)
CALL_API = """async ([url, key, more]) => {
  try {
    const response = await fetch(url + "/v1/audio/speech", {
      method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key, "X-Request-Id": "from-web-app"},
      body: JSON.stringify({model: "tts-1", input: "Hello from a web page.", voice: "alloy", response_format: "pcm",
                            ...more}),
    });
    const body = await response.arrayBuffer();
    const result = {status: response.status, requestId: response.headers.get("X-Request-Id"), bytes: body.byteLength};
    const usage = response.headers.get("X-VLLM-OMNI-TOTAL-TOKENS");
    return usage === null ? result : {...result, usage};
  } catch (error) {
    return {blocked: String(error)};
  }
}"""


class PageHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def web_app_port() -> Iterator[int]:
    """A second loopback origin that serves a web app's page."""
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), PageHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory: pytest.TempPathFactory, web_app_port: int) -> Iterator[RunningServer]:
    log: Path = tmp_path_factory.mktemp("cors") / "server.log"
    env = {"SPEECH_CORS_ORIGINS": f"http://127.0.0.1:{web_app_port}", "SPEECH_API_KEYS": KEY}
    running = start_server(log, env=env)
    yield running
    running.stop()


async def call_from(
    browser: Any, page_url: str, api_url: str, key: str = KEY, more: dict[str, Any] | None = None
) -> dict[str, Any]:
    page = await browser.new_page()
    await PageWatch().attach(page)  # nothing leaves loopback
    await page.goto(page_url)
    result = await page.evaluate(CALL_API, [api_url, key, more or {}])
    await page.close()
    return result


async def test_a_listed_origin_calls_the_api(browser: Any, cors_server: RunningServer, web_app_port: int) -> None:
    result = await call_from(browser, f"http://127.0.0.1:{web_app_port}/", cors_server.base_url)
    assert result == {"status": 200, "requestId": "from-web-app", "bytes": result.get("bytes")}, result
    assert result["bytes"] > 10_000  # real audio came back
    refused = await call_from(browser, f"http://127.0.0.1:{web_app_port}/", cors_server.base_url, key="wrong")
    assert refused["status"] == 401 and refused["requestId"] == "from-web-app"  # errors are readable too
    whole = await call_from(browser, f"http://127.0.0.1:{web_app_port}/", cors_server.base_url, more={"stream": False})
    assert whole["status"] == 200 and int(whole["usage"]) > 0  # a whole file's usage headers are the page's to read


async def test_an_origin_not_listed_is_blocked(browser: Any, cors_server: RunningServer, web_app_port: int) -> None:
    result = await call_from(browser, f"http://localhost:{web_app_port}/", cors_server.base_url)  # another origin
    assert "blocked" in result and "Failed to fetch" in result["blocked"]


async def test_cors_is_off_by_default(browser: Any, server: RunningServer, web_app_port: int) -> None:
    result = await call_from(browser, f"http://127.0.0.1:{web_app_port}/", server.base_url)
    assert "blocked" in result, result


# a web app's page opening a session (a browser sends its page's Origin; it cannot set Authorization: the key rides
# in the query)
OPEN_SESSION = """async ([url]) => new Promise((resolve) => {
  const ws = new WebSocket(url);
  ws.onopen = () => { ws.close(); resolve("open"); };
  ws.onerror = () => resolve("refused");
  setTimeout(() => resolve("no answer"), 20000);
})"""


async def open_from(browser: Any, page_url: str, ws_url: str) -> str:
    page = await browser.new_page()
    await PageWatch().attach(page)
    await page.goto(page_url)
    result = await page.evaluate(OPEN_SESSION, [ws_url])
    await page.close()
    return result


def stream_url(server: RunningServer, key: str | None = None) -> str:
    url = server.base_url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    return url if key is None else f"{url}?api_key={key}"


async def test_a_websocket_opens_from_a_listed_origin_and_the_servers_own_but_no_other(
    browser: Any, cors_server: RunningServer, server: RunningServer, web_app_port: int
) -> None:
    """A WebSocket has no CORS of its own: any page a user visits could open one to a server the user reaches. It is
    refused (403, before the upgrade) to a page of an origin neither listed in SPEECH_CORS_ORIGINS nor the server's
    own, as a cross-origin fetch is blocked; a listed origin and the playground's own page open it."""
    listed, other = f"http://127.0.0.1:{web_app_port}/", f"http://localhost:{web_app_port}/"
    assert await open_from(browser, listed, stream_url(cors_server, KEY)) == "open"
    assert await open_from(browser, other, stream_url(cors_server, KEY)) == "refused"
    assert await open_from(browser, listed, stream_url(server)) == "refused"  # no SPEECH_CORS_ORIGINS: none listed
    assert await open_from(browser, f"{server.base_url}/", stream_url(server)) == "open"  # the server's own page
