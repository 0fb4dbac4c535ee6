"""Debian's chromium, headless, driven by Playwright (never a browser of Playwright's own), for the browser tests.

`ensure_chromium` installs the Debian package when it is missing (the test machines run as root); one browser with a
fresh profile serves the whole session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.debian import ensure_package

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",  # the playground plays audio without a click
]


def ensure_chromium() -> str:
    """The path of Debian's chromium, installing it with apt-get when it is not there."""
    return ensure_package("chromium", lambda: CHROMIUM if Path(CHROMIUM).exists() else None)


@dataclass
class PageWatch:
    """What a page did that a test must see: console errors, uncaught exceptions, and requests that left loopback."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)

    async def attach(self, page: Any) -> PageWatch:
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("websocket", self._websocket)  # page.route does not see WebSockets

        async def route(r: Any) -> None:
            host = urlsplit(r.request.url).hostname or ""
            if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
                await r.continue_()
            else:  # nothing may come from the internet: record it and fail the request
                self.external_requests.append(r.request.url)
                await r.abort()

        await page.route("**/*", route)
        return self

    def _websocket(self, ws: Any) -> None:
        self.websockets.append(ws.url)
        if (urlsplit(ws.url).hostname or "") not in ("127.0.0.1", "localhost"):
            self.external_requests.append(ws.url)

    @property
    def problems(self) -> list[str]:
        return [*self.console_errors, *self.page_errors, *(f"external: {u}" for u in self.external_requests)]


async def open_playground(browser: Any, base_url: str) -> tuple[Any, PageWatch]:
    """A new page on the playground, watched, once it has loaded what the server offers."""
    page = await browser.new_page()
    watch = await PageWatch().attach(page)
    await page.goto(f"{base_url}/")
    await page.wait_for_function("document.body.dataset.ready === '1'", timeout=20_000)
    return page, watch
