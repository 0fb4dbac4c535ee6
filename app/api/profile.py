"""The GPU engine's PyTorch profiler, on request: served only where `SPEECH_PROFILER_DIR` is set, behind the API
keys. A run is started, some load is sent, the run is stopped; the engine's processes write the traces. A run can
instead record the request timeline (`timeline`: when each request passed each of the engine's steps, where the engine
records one), which costs the requests far less than the profiler."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Depends
from pydantic import Field

from app.api.dependencies import get_engine
from app.api.errors import SERVER_ERROR, ApiError, error_responses, to_api_error
from app.api.json_body import JsonBodyRoute
from app.engine_protocol import EngineUnavailable, Profiles, RecordsTimelines, SpeechEngine, profiled
from app.speech.options import JsonFields

T = TypeVar("T")
log = logging.getLogger(__name__)
router = APIRouter(prefix="/admin/profile", tags=["admin"], route_class=JsonBodyRoute)
# a folder's name under the profiler's directory: never "." or "..", never a path
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ProfileStart(JsonFields):
    """POST /admin/profile/start. Unknown fields are refused, as every body's are: a misspelt one is never dropped
    unnoticed for a run with the defaults."""

    run_id: str = Field(
        default_factory=lambda: time.strftime("run_%Y%m%d_%H%M%S"),
        pattern=RUN_ID,
        description="Names the run's folder of traces (a letter or digit, then letters, digits, '.', '_', '-'); "
        "default: run_<date>_<time>.",
    )
    timeline: bool = Field(
        False,
        description="Record the request timeline instead of the PyTorch profiler: when each request passed each of "
        "the engine's steps, one JSON line each (omni: the server, the talker's producer and code2wav's scheduler; "
        "sglang: sglang-omni's request events).",
    )


class ProfileStop(JsonFields):
    """POST /admin/profile/stop. Unknown fields are refused."""

    run_id: str | None = Field(None, pattern=RUN_ID, description="The run to stop; default: whichever is on.")


async def _on_profiler(engine: SpeechEngine, call: Callable[[Profiles], Awaitable[T]]) -> T:
    """`call` on the engine's profiler: 400 where the engine has none, 503 where it is not ready, and a failure inside
    it a 500 that says what failed."""
    profiler = profiled(engine)
    if profiler is None:
        raise ApiError(400, f"The {engine.name} engine has no profiler.", code="unsupported_engine")
    try:
        return await call(profiler)
    except ApiError:
        raise
    except EngineUnavailable as exc:
        raise to_api_error(exc) from exc
    except Exception as exc:
        log.exception("the profiler failed")
        raise ApiError(500, f"The engine's profiler failed: {exc}", type=SERVER_ERROR, code="profiler_failed") from exc


def _timeline(engine: SpeechEngine, profiler: Profiles) -> RecordsTimelines:
    if not isinstance(profiler, RecordsTimelines):
        raise ApiError(400, f"The {engine.name} engine records no request timeline.", param="timeline")
    return profiler


@router.post("/start", responses=error_responses(400, 401, 503))
async def start_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileStart | None, Body()] = None
) -> dict[str, Any]:
    run = run or ProfileStart()
    if run.timeline:
        traces = await _on_profiler(engine, lambda profiler: _timeline(engine, profiler).start_timeline(run.run_id))
    else:
        traces = await _on_profiler(engine, lambda profiler: profiler.start_profile(run.run_id))
    return {"run_id": run.run_id, "traces": traces}


@router.post("/stop", responses=error_responses(400, 401, 503))
async def stop_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileStop | None, Body()] = None
) -> dict[str, Any]:
    run_id = (run or ProfileStop()).run_id
    await _on_profiler(engine, lambda profiler: profiler.stop_profile(run_id))
    return {"run_id": run_id, "stopped": True}
