"""A target that is an engine, not a server: `--target engine+http://host:port` names the control endpoint of
`python3 -m loadtest.engine_alone`. For each level and round the runner hands it the same workload it would run
itself (the same texts in the same order; for an open loop the same arrival times, from the same seed); the engine
runs it in its own process, with no HTTP between the load and the engine, and answers with one record per request,
which becomes a `RequestResult` like any measured here: its chunks' arrivals (seconds since the request's start,
samples) are played by the same modelled listener as a server's response (`loadtest.playback`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from loadtest.measure import RequestResult, describe_exception, heard_fields
from loadtest.playback import simulate_playback
from loadtest.schedule import LoopRun
from loadtest.targets import Target

ENGINE_PREFIX = "engine+"
# a whole level runs inside one call: allow it far longer than one request
RUN_TIMEOUT = httpx.Timeout(3600.0, connect=10.0)


def split_engine_url(url: str) -> tuple[str, bool]:
    """`engine+http://host:port` -> (`http://host:port`, True); any other URL -> (url, False)."""
    if url.strip().startswith(ENGINE_PREFIX):
        return url.strip()[len(ENGINE_PREFIX) :], True
    return url, False


def result_from_record(target: Target, record: dict[str, Any], playback_buffer_s: float = 0.0) -> RequestResult:
    samples = int(record.get("samples") or 0)
    ok = bool(record.get("ok"))
    rate = int(record.get("sample_rate") or 24_000)
    arrivals, received = [], 0
    for at, count in record.get("chunks") or []:
        received += int(count)
        arrivals.append((float(at), received / rate))
    playback = simulate_playback(arrivals, playback_buffer_s) if ok else None
    return RequestResult(
        target.index,
        str(record.get("text", "")),
        200 if ok else 0,
        ok,
        record.get("error_code"),
        record.get("ttfa_s"),
        record.get("e2e_s"),
        record.get("audio_s"),
        samples,
        record.get("sample_rate"),
        samples * 2,  # as 16-bit pcm
        error_message=record.get("error_message"),
        **heard_fields(playback),
    )


async def run_on_engine(
    client: httpx.AsyncClient,
    target: Target,
    workload: dict[str, Any],
    record: Any,
    tick: Callable[[], None],
    expected: int | None = None,
    playback_buffer_s: float = 0.0,
) -> LoopRun:
    """POST the workload to the engine's /run; its records join `record` (a LevelRun: the level's, or its warm-up's).
    Returns the engine's own wall time and steady window. A failed call counts as `expected` failed requests (one if
    unknown), like a client-side failure against a server: the sweep goes on."""
    body = {**workload, "voice": target.voice}
    try:
        response = await client.post(f"{target.url}/run", json=body, headers=target.headers, timeout=RUN_TIMEOUT)
        if response.status_code != 200:
            code = f"engine_run_{response.status_code}"
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise _RunFailed(code, message)
        answer = response.json()
    except (httpx.HTTPError, _RunFailed, ValueError) as exc:
        code = exc.code if isinstance(exc, _RunFailed) else f"engine_run_{type(exc).__name__}"
        message = f"engine control endpoint {target.url}/run: {describe_exception(exc)}"
        failures = [
            RequestResult(target.index, "", 0, False, code, error_message=message) for _ in range(expected or 1)
        ]
        if record is not None:
            record.results.extend(failures)
        for _ in failures:
            tick()
        return LoopRun(0.0)
    results = [result_from_record(target, r, playback_buffer_s) for r in answer["records"]]
    if record is not None:
        record.results.extend(results)
        record.peak_in_flight = max(record.peak_in_flight, int(answer.get("peak_in_flight") or 0))
    for _ in results:
        tick()
    return loop_run_from_answer(answer)


def loop_run_from_answer(answer: dict[str, Any]) -> LoopRun:
    """The engine's times; an engine older than the steady window answers only `wall_s` (its window: none). The
    window's bounds are the engine's clock, so they stay there: it counts its answers and their audio itself."""
    return LoopRun(
        float(answer["wall_s"]),
        float(answer.get("held_s") or 0.0),
        int(answer.get("finished_while_held") or 0),
        audio_s=float(answer.get("audio_s_while_held") or 0.0),
    )


class _RunFailed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
