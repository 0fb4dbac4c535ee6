"""The playground at / in headless chromium: it fetches, plays while the response is still arriving, reports the TTFA
and realtime factor it measured, offers a download; on a cloning engine it registers a voice (with consent) and speaks
with it. The TTFA per format is kept (browser-ttfa.json) with a screenshot, and printed."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app.server import create_app
from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.support.browser import PageWatch, open_playground
from tests.support.server import RunningServer
from tests.support.wav import tone_wav
from tests.unit.test_omni_engine import make_engine, service_settings

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

TEXT = (
    "Good morning, and welcome to the speech playground. "
    "Every sentence is synthesized while the previous one is already playing. "
    "The numbers below are measured by this browser, not by the server. "
    "That is all for now."
)
FORMATS = ("pcm", "wav", "mp3", "opus", "aac", "flac")
STREAMED = ("pcm", "wav", "mp3")  # played as they arrive (Web Audio, Media Source)


async def speak(page: Any, response_format: str, timeout_ms: int = 60_000) -> dict[str, float]:
    await page.select_option("#format", response_format)
    await page.click("#speak")
    await page.wait_for_function("document.getElementById('stats').dataset.done === '1'", timeout=timeout_ms)
    status = await page.inner_text("#status")
    assert status.startswith("Done"), status
    data = await page.eval_on_selector("#stats", "el => ({...el.dataset})")
    return {name: float(value) for name, value in data.items() if name != "done" and value}


async def test_playground_streams_every_format_and_measures_it(
    browser: Any, server: RunningServer, artifacts_dir: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        caps = (await client.get("/v1/audio/capabilities")).json()
    assert caps["engine"] == "embedded" and caps["voice_cloning"] is False and "pcm" in caps["response_formats"]
    page, watch = await open_playground(browser, server.base_url)
    assert await page.is_hidden("#clone")  # the embedded engine cannot clone: no upload form
    assert await page.is_hidden("#instructions-field")  # nor follow instructions
    await page.fill("#input", " ".join([TEXT] * 3))  # long enough that playback starts well before the last byte
    measured: dict[str, dict[str, float]] = {}
    for response_format in FORMATS:
        stats = await speak(page, response_format)
        measured[response_format] = stats
        assert 0 < stats["ttfa"] < stats["total"], (response_format, stats)
        assert stats["audio"] > 10.0 and stats["rtf"] > 0, (response_format, stats)
        assert (await page.get_attribute("#download", "href")).startswith("blob:")
        if response_format in STREAMED:  # playback began before the response ended
            assert stats["playback"] < stats["total"], (response_format, stats)
        if response_format == "pcm":
            shot = artifacts_dir / "playground.png"
            await page.screenshot(path=str(shot), full_page=True)
            print(f"\nplayground screenshot: {shot}")
            assert (await page.inner_text("#ttfa")).endswith("ms")
    await page.close()
    assert watch.problems == []
    report = artifacts_dir / "browser-ttfa.json"
    report.write_text(json.dumps(measured, indent=2))
    print(f"browser-measured TTFA per format (ms), also in {report}:")
    for response_format, stats in measured.items():
        print(
            f"  {response_format:5} TTFA {stats['ttfa']:7.1f}  playback {stats.get('playback', float('nan')):7.1f}"
            f"  total {stats['total']:7.1f}  RTF {stats['rtf']:.3f}"
        )


# -- a cloning engine (the omni engine on fakes of vllm-omni's types), served on a loopback port in this process ------


@pytest.fixture(scope="module")
def cloning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cloning")
    omni = FakeAsyncOmni()
    omni.step_delay_s = 0.02
    engine = make_engine(write_model_dir(root / "base", "base"), omni, voice_store=str(root / "voices"))
    app = create_app(service_settings(engine), engine=engine)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    yield base_url
    server.should_exit = True
    thread.join(10)
    sock.close()


async def test_playground_clones_a_voice_with_consent(browser: Any, cloning_server: str, tmp_path: Path) -> None:
    page = await browser.new_page()
    watch = await PageWatch().attach(page)
    await page.goto(f"{cloning_server}/")
    await page.wait_for_function("document.body.dataset.ready === '1'", timeout=20_000)
    assert await page.is_visible("#clone")
    assert await page.is_disabled("#speak")  # a Base checkpoint has no voice until one is uploaded
    assert await page.is_disabled("#speed") and await page.is_visible(
        "#instructions-field"
    )  # what the omni engine offers
    clip = tmp_path / "me.wav"
    clip.write_bytes(tone_wav(3.0, 16_000, 0.3, frequency=180.0))
    await page.fill("#clone-name", "my-voice")
    await page.set_input_files("#clone-file", str(clip))
    await page.fill("#clone-text", "A steady tone, for the test.")
    await page.click("#clone-upload")
    await page.wait_for_selector("#clone-status.error", timeout=10_000)
    assert "consent" in await page.inner_text("#clone-status")  # refused without the box ticked
    await page.check("#clone-consent")
    await page.click("#clone-upload")
    await page.wait_for_function("document.getElementById('voice').value === 'my-voice'", timeout=10_000)
    assert "Registered" in await page.inner_text("#clone-status")
    await page.fill("#input", "Hello in a cloned voice.")
    stats = await speak(page, "pcm")
    assert stats["audio"] > 0.5 and stats["ttfa"] > 0
    await page.close()
    # the refused upload's 400 is the only console error: the browser logs every failed fetch
    assert [e for e in watch.console_errors if "400" not in e] == [] and watch.page_errors == []
    assert watch.external_requests == []
