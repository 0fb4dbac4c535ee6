"""The GPU engine's PyTorch profiler, on request: served only where `SPEECH_PROFILER_DIR` is set, behind the API
keys. A run is started, some load is sent, the run is stopped; the engine's processes write the traces."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, Field

from app.api.dependencies import get_engine
from app.api.errors import ApiError, error_responses, to_api_error
from app.engine_protocol import EngineUnavailable, Profiles, SpeechEngine, profiled

router = APIRouter(prefix="/admin/profile", tags=["admin"])


class ProfileRun(BaseModel):
    run_id: str = Field(
        default_factory=lambda: time.strftime("run_%Y%m%d_%H%M%S"),
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Names the run's traces (letters, digits, '.', '_', '-'); default: run_<date>_<time>.",
    )


def _profiler(engine: SpeechEngine) -> Profiles:
    target = profiled(engine)
    if target is None:
        raise ApiError(400, f"The {engine.name} engine has no profiler.", code="unsupported_engine")
    return target


@router.post("/start", responses=error_responses(400, 401, 503))
async def start_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileRun | None, Body()] = None
) -> dict[str, Any]:
    run = run or ProfileRun()
    try:
        traces = await _profiler(engine).start_profile(run.run_id)
    except EngineUnavailable as exc:
        raise to_api_error(exc) from exc
    return {"run_id": run.run_id, "traces": traces}


@router.post("/stop", responses=error_responses(400, 401, 503))
async def stop_profile(
    engine: Annotated[SpeechEngine, Depends(get_engine)], run: Annotated[ProfileRun, Body()]
) -> dict[str, Any]:
    try:
        await _profiler(engine).stop_profile(run.run_id)
    except EngineUnavailable as exc:
        raise to_api_error(exc) from exc
    return {"run_id": run.run_id, "stopped": True}
