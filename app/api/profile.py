"""The GPU engine's PyTorch profiler, on request: served only where `SPEECH_PROFILER_DIR` is set, behind the API
keys. A run is started, some load is sent, the run is stopped; the engine's processes write the traces."""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, Field

from app.api.dependencies import get_engine
from app.api.errors import SERVER_ERROR, ApiError, error_responses, to_api_error
from app.engine_protocol import EngineUnavailable, Profiles, SpeechEngine, profiled

log = logging.getLogger(__name__)
router = APIRouter(prefix="/admin/profile", tags=["admin"])
# a folder's name under the profiler's directory: never "." or "..", never a path
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ProfileStart(BaseModel):
    run_id: str = Field(
        default_factory=lambda: time.strftime("run_%Y%m%d_%H%M%S"),
        pattern=RUN_ID,
        description="Names the run's folder of traces (a letter or digit, then letters, digits, '.', '_', '-'); "
        "default: run_<date>_<time>.",
    )


class ProfileStop(BaseModel):
    run_id: str | None = Field(None, pattern=RUN_ID, description="The run to stop; default: whichever is on.")


def _profiler(engine: SpeechEngine) -> Profiles:
    target = profiled(engine)
    if target is None:
        raise ApiError(400, f"The {engine.name} engine has no profiler.", code="unsupported_engine")
    return target


def _failed(exc: Exception) -> ApiError:
    if isinstance(exc, EngineUnavailable):
        return to_api_error(exc)
    log.exception("the profiler failed")
    return ApiError(500, f"The engine's profiler failed: {exc}", type=SERVER_ERROR, code="profiler_failed")


@router.post("/start", responses=error_responses(400, 401, 503))
async def start_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileStart | None, Body()] = None
) -> dict[str, Any]:
    run = run or ProfileStart()
    profiler = _profiler(engine)
    try:
        traces = await profiler.start_profile(run.run_id)
    except Exception as exc:
        raise _failed(exc) from exc
    return {"run_id": run.run_id, "traces": traces}


@router.post("/stop", responses=error_responses(400, 401, 503))
async def stop_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileStop | None, Body()] = None
) -> dict[str, Any]:
    run = run or ProfileStop()
    profiler = _profiler(engine)
    try:
        await profiler.stop_profile(run.run_id)
    except Exception as exc:
        raise _failed(exc) from exc
    return {"run_id": run.run_id, "stopped": True}
