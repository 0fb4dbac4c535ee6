"""loadtest.engine_alone on the fake of vllm-omni 0.30.0, its control endpoint on a real loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn

from app.engines.omni.requests import PromptHelpers
from loadtest.engine_alone import AloneEngine, create_app
from tests.fakes.vllm_omni_0_30 import (
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)
from tests.support.server import free_port

FRAMES = 30  # the bench profile's fixed length, as max_tokens == min_tokens == FRAMES + 1
PROFILE = "deploy/vllm-omni/customvoice.yaml"


def fixed_length_omni(step_delay_s: float = 0.005) -> FakeAsyncOmni:
    omni = FakeAsyncOmni()
    talker = omni.default_sampling_params_list[0]
    talker.max_tokens = talker.min_tokens = FRAMES + 1
    omni.step_delay_s = step_delay_s
    return omni


def fake_helpers(omni: object, model_dir: str) -> PromptHelpers:
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)  # type: ignore[attr-defined]
    return PromptHelpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)


def alone(model_dir: Path, omni: FakeAsyncOmni, gate: threading.Event | None = None) -> AloneEngine:
    def factory(**kwargs: object) -> FakeAsyncOmni:
        if gate is not None:
            gate.wait(10)
        omni.kwargs = kwargs
        return omni

    return AloneEngine(str(model_dir), PROFILE, "dummy", None, omni_factory=factory, helpers=fake_helpers)


@contextlib.asynccontextmanager
async def control(engine: AloneEngine, warmup: list[int] | None = None, **kwargs: object) -> AsyncIterator[str]:
    """The control endpoint on a real loopback port, in this event loop (the fake cannot cross a process)."""
    port = free_port()
    app = create_app(engine, [1, 2] if warmup is None else warmup, **kwargs)  # type: ignore[arg-type]
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def wait_ready(client: httpx.AsyncClient, url: str) -> None:
    for _ in range(500):
        if (await client.get(f"{url}/ready")).status_code == 200:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("not ready")
