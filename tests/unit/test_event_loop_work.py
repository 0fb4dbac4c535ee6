"""What a speech request costs the event loop it shares with vllm-omni's output handling: thread hops (each one waits
for the GIL, which vllm-omni's orchestrator thread holds much of the time under load), work repeated per request that
could be done once, and the garbage collector traversing the startup heap."""

from __future__ import annotations

import base64
import concurrent.futures
import functools
import gc
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
import httpx
import pytest

from app.server import create_app
from tests.fakes.vllm_omni_0_30 import (
    SAMPLES_PER_FRAME,
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)
from tests.support.waiting import until
from tests.support.wav import tone_wav
from tests.unit.test_omni_engine import make_engine, service_settings


def describe(fn: object) -> str:
    """A callable's name; for a partial (asyncio.to_thread's context.run), the names of the callables in it."""
    if isinstance(fn, functools.partial):
        return " ".join(describe(part) for part in (fn.func, *fn.args) if callable(part))
    return getattr(fn, "__qualname__", repr(fn))


class ThreadHops:
    """Counts work handed to worker threads: executors (asyncio.to_thread, run_in_executor) and anyio's pool
    (Starlette's run_in_threadpool, where FastAPI runs plain-function dependencies)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        submit = concurrent.futures.ThreadPoolExecutor.submit
        run_sync = anyio.to_thread.run_sync

        def counted_submit(executor: concurrent.futures.ThreadPoolExecutor, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append(describe(fn))
            return submit(executor, fn, *args, **kwargs)

        async def counted_run_sync(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append(describe(fn))
            return await run_sync(fn, *args, **kwargs)

        monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", counted_submit)
        monkeypatch.setattr(anyio.to_thread, "run_sync", counted_run_sync)


class LoopThreadTokenizer(WordTokenizer):
    """Records the thread of every call: the tokenizer is not thread-safe, so it must stay on one thread."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def __call__(self, text: str, padding: bool = False) -> dict[str, list[int]]:
        self.threads.add(threading.get_ident())
        return super().__call__(text, padding)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> ThreadHops:
    return ThreadHops(monkeypatch)


async def test_a_pcm_request_on_the_omni_engine_never_leaves_the_event_loop(
    custom_voice_dir: Path, hops: ThreadHops, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dependencies, prompt building and pcm conversion run on the loop: a thread hop costs the loop more than any
    of them. The audio is whole and the voice catalog is built once, not per request."""
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    tokenizer = LoopThreadTokenizer()
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, tokenizer, tokens_input)
    await engine.start()
    voices_calls = 0
    voices = engine.voices

    def counted_voices() -> list:
        nonlocal voices_calls
        voices_calls += 1
        return voices()

    monkeypatch.setattr(engine, "voices", counted_voices)
    app = create_app(service_settings(engine), engine=engine)
    hops.calls.clear()
    body = {"input": "Hello there, how are you today?", "voice": "vivian", "max_new_tokens": 31}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        for response_format in ("pcm", "wav", "pcm"):
            response = await client.post("/v1/audio/speech", json={**body, "response_format": response_format})
            assert response.status_code == 200, response.text
            header = 44 if response_format == "wav" else 0
            assert len(response.content) == header + 2 * 30 * SAMPLES_PER_FRAME  # 31 tokens: 30 frames
    assert hops.calls == []
    assert tokenizer.threads == {threading.get_ident()}
    assert voices_calls == 1  # at start-up


async def test_heavy_work_still_leaves_the_loop(custom_voice_dir: Path, base_dir: Path, hops: ThreadHops) -> None:
    """What costs more than a hop stays in worker threads: mp3 encoding, resampling, and a cloning request's
    reference audio becoming the conditioning's list of floats."""
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    body = {"input": "Hello there.", "voice": "vivian", "max_new_tokens": 31}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        for extra in ({"response_format": "mp3"}, {"response_format": "pcm", "sample_rate": 16_000}):
            hops.calls.clear()
            response = await client.post("/v1/audio/speech", json={**body, **extra})
            assert response.status_code == 200 and response.content
            assert any("EncodedAudio._convert" in call for call in hops.calls), extra

    cloning = make_engine(base_dir, FakeAsyncOmni())
    await cloning.start()
    app = create_app(service_settings(cloning), engine=cloning)
    clip = "data:audio/wav;base64," + base64.b64encode(tone_wav(2.0)).decode()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        hops.calls.clear()
        response = await client.post(
            "/v1/audio/speech",
            json={
                "input": "Cloned.",
                "voice": "anyone",
                "ref_audio": clip,
                "ref_text": "Hi.",
                "response_format": "pcm",
            },
        )
        assert response.status_code == 200, response.text
        assert "additional_information" in hops.calls


async def test_a_batch_answer_is_encoded_off_the_loop_once_it_is_large(
    custom_voice_dir: Path, hops: ThreadHops
) -> None:
    """A batch's answer is every item's audio in base64 inside one JSON: at vllm-omni's caps about 100 MB, half a
    second of the loop every stream shares. Past a megabyte of audio its base64 is made in worker threads; a small
    one stays on the loop, where a hop would cost more."""
    omni = FakeAsyncOmni()
    engine = make_engine(custom_voice_dir, omni)
    await engine.start()
    app = create_app(service_settings(engine), engine=engine)
    item = {"input": "Hello there.", "max_new_tokens": 31}  # 30 frames: 115 200 bytes of pcm
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        for items, off_the_loop in ((2, False), (12, True)):
            hops.calls.clear()
            body = {"voice": "vivian", "response_format": "pcm", "items": [item] * items}
            response = await client.post("/v1/audio/speech/batch", json=body, timeout=60)
            assert response.status_code == 200 and response.json()["succeeded"] == items, response.text
            assert any("b64encode" in call for call in hops.calls) == off_the_loop, hops.calls


@pytest.fixture
def unfrozen_heap() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_the_startup_heap_is_frozen_once_the_engine_is_ready(custom_voice_dir: Path, unfrozen_heap: None) -> None:
    """Objects alive at readiness are out of the collector's reach, so a full collection while serving traverses
    only what serving allocated."""
    engine = make_engine(custom_voice_dir, FakeAsyncOmni())
    app = create_app(service_settings(engine), engine=engine)
    assert gc.get_freeze_count() == 0
    async with app.router.lifespan_context(app):
        await until(lambda: engine.health().ready, timeout_s=5)
        assert engine.health().ready  # seen by another task: the start task's step that made it ready has ended
        assert gc.get_freeze_count() > 10_000  # the libraries' objects, and the engine's


@pytest.fixture
def switch_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


async def test_the_servers_thread_switch_interval_is_set_before_the_engine_starts_its_threads(
    custom_voice_dir: Path, switch_interval: float
) -> None:
    """SPEECH_SWITCH_INTERVAL_MS: the server's own process (its event loop, vllm-omni's orchestrator and output drain
    threads), set as the engine starts; unset, left as it is (Python's 5 ms in a fresh process)."""
    seen: list[float] = []

    class Recording(FakeAsyncOmni):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            seen.append(sys.getswitchinterval())

    for given, before in ((0.5, 0.004), (None, 0.003)):
        sys.setswitchinterval(before)
        engine = make_engine(custom_voice_dir, FakeAsyncOmni())
        engine._factory = Recording
        settings = service_settings(engine).model_copy(update={"switch_interval_ms": given})
        app = create_app(settings, engine=engine)
        async with app.router.lifespan_context(app):
            await until(lambda engine=engine: engine.health().ready, timeout_s=5)
    assert seen == [0.0005, 0.003]  # unset: left as it was
