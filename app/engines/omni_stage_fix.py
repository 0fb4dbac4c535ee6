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

from typing import Any

from vllm_omni.model_executor.stage_input_processors import qwen3_tts as _qwen3_tts


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


def talker2code2wav_async_chunk_as_enqueued(
    transfer_manager: Any, multimodal_output: Any, request: Any, is_finished: bool = False
) -> Any:
    return _qwen3_tts.talker2code2wav_async_chunk(
        transfer_manager, multimodal_output, _FinishedAsEnqueued(request, is_finished), is_finished=is_finished
    )
