"""A stage-0 chunk builder for vllm-omni 0.26.0 that decides "finished" from the step it is building, not from the
request's live state. Loaded by the talker's stage process, by dotted path, from the deploy profile:

    custom_process_next_stage_input_func: app.engines.omni_stage_fix.talker2code2wav_async_chunk_as_enqueued

Why: vllm-omni 0.26.0 hands each talker step to a background thread (`ChunkTransferAdapter.save_async`), which calls
`talker2code2wav_async_chunk` with the live `Request`. That function computes `finished = is_finished or
request.is_finished()`. When the thread lags behind the scheduler (at 32+ concurrent requests), a step enqueued
while the request was running is processed after it finished, is taken for the last one, and flushes the tail window
a second time: 121 frames of audio for 99 generated. The flag captured when the step was enqueued is the truth.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm_omni.model_executor.stage_input_processors import qwen3_tts as _qwen3_tts

from app.engines.code2wav_policy import percentile

log = logging.getLogger("vllm.speech.talker")


class _FinishedAsEnqueued:
    """The request, except that is_finished() answers what was true when this step was enqueued."""

    __slots__ = ("_finished", "_request")

    def __init__(self, request: Any, finished: bool) -> None:
        self._request = request
        self._finished = bool(finished)

    def is_finished(self) -> bool:
        return self._finished

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


class SaveThreadProbe:
    """How far the talker's save thread lags: the steps still queued behind the one it builds, and how long building
    one takes; and how long after a request arrived its first window left the talker (on the wall clock, as vLLM
    stamps a request's arrival), the talker's share of time to first audio. Logging only, one line per interval (the
    connector's `engine_probe_interval_s`; 0 = off)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._depths: list[int] = []
        self._build_s: list[float] = []
        self._first_window_s: list[float] = []
        self._sent: set[str] = set()  # requests whose first window has left, until their last

    def window(self, request_id: str, arrival_time: float | None, last: bool) -> None:
        """A window left for code2wav (`last`: the request's last)."""
        if request_id in self._sent:
            if last:
                self._sent.discard(request_id)
            return
        if arrival_time is not None:
            self._first_window_s.append(time.time() - arrival_time)
        if not last:
            if len(self._sent) > 65536:  # requests aborted before their last window; logging only, so forget them
                self._sent.clear()
            self._sent.add(request_id)

    def record(self, depth: int, build_s: float) -> None:
        self._depths.append(depth)
        self._build_s.append(build_s)
        now = time.monotonic()
        if now - self._started >= self.interval_s:
            log.info(
                "talker save-thread probe %s",
                {
                    "seconds": round(now - self._started, 1),
                    "steps_built": len(self._depths),
                    "queued_p50": percentile(self._depths, 0.5),
                    "queued_p95": percentile(self._depths, 0.95),
                    "queued_max": max(self._depths),
                    "build_p50_ms": round(percentile(self._build_s, 0.5) * 1000, 2),
                    "build_p95_ms": round(percentile(self._build_s, 0.95) * 1000, 2),
                    "first_window_p50_ms": round(percentile(self._first_window_s, 0.5) * 1000, 1),
                    "first_window_p95_ms": round(percentile(self._first_window_s, 0.95) * 1000, 1),
                },
            )
            self._started, self._depths, self._build_s, self._first_window_s = now, [], [], []


def _probe_for(transfer_manager: Any) -> SaveThreadProbe | None:
    probe = getattr(transfer_manager, "_speech_probe", False)
    if probe is False:
        config = getattr(getattr(transfer_manager, "connector", None), "config", None) or {}
        extra = config.get("extra", config) if isinstance(config, dict) else {}
        interval = float(extra.get("engine_probe_interval_s", 0) or 0)
        probe = SaveThreadProbe(interval) if interval > 0 else None
        transfer_manager._speech_probe = probe
    return probe


def talker2code2wav_async_chunk_as_enqueued(
    transfer_manager: Any, multimodal_output: Any, request: Any, is_finished: bool = False
) -> Any:
    probe = _probe_for(transfer_manager)
    started = time.perf_counter()
    payload = _qwen3_tts.talker2code2wav_async_chunk(
        transfer_manager, multimodal_output, _FinishedAsEnqueued(request, is_finished), is_finished=is_finished
    )
    if probe is not None:
        if payload is not None:
            arrival = getattr(request, "arrival_time", None)
            arrival = float(arrival) if isinstance(arrival, int | float) else None
            probe.window(str(request.external_req_id), arrival, bool(is_finished))
        probe.record(len(getattr(transfer_manager, "_pending_save_reqs", ())), time.perf_counter() - started)
    return payload
