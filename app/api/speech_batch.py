"""POST /v1/audio/speech/batch: vllm-omni 0.30's batch of utterances (the request's `items` over its shared options;
one JSON answer with each item's whole file in base64, or its error), synthesized by `app.speech.batch`. The caps,
the merge of an item over the batch, the wire shape of each result and the counting per item are this module's."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from app import metrics
from app.api.dependencies import get_service
from app.api.errors import ApiError, error_responses, invalid_param, to_api_error, validation_error
from app.api.schemas import SpeechBatchItem, SpeechBatchRequest, SpeechBatchResponse
from app.audio.formats import CONTENT_TYPES
from app.speech.batch import BatchItem, ItemOutcome, default_concurrency, synthesize_batch
from app.speech.run import SpeechService

log = logging.getLogger(__name__)
router = APIRouter()

VOICE_FIELDS = ("voice", "speaker")  # an item naming its voice either way replaces the batch's, named either way


def check_size(body: SpeechBatchRequest, max_items: int, max_chars: int) -> None:
    """Too many items: 400; too much text in all (`input` of each item, as sent): 413. Both name `items`."""
    if len(body.items) > max_items:
        raise invalid_param("items", f"A batch holds at most {max_items} items; this one has {len(body.items)}.")
    chars = sum(len(item["input"]) for item in body.items if isinstance(item.get("input"), str))
    if chars > max_chars:
        message = f"A batch's items hold at most {max_chars} characters of input in all; these hold {chars}."
        raise ApiError(413, message, param="items", code="batch_too_large")


def checked_item(body: SpeechBatchRequest, item: dict[str, Any]) -> SpeechBatchItem | ApiError:
    """The item's fields over the batch's own (those it was sent with, and its format), validated as a request is; or
    the 400 that names what is wrong with it."""
    shared = body.model_dump(mode="json", exclude_unset=True, exclude={"items"})
    shared.setdefault("response_format", body.response_format)
    if any(name in item for name in VOICE_FIELDS):
        for name in VOICE_FIELDS:
            shared.pop(name, None)
    try:
        checked = SpeechBatchItem.model_validate_json(json.dumps({**shared, **item}))
    except ValidationError as exc:
        return validation_error(exc.errors())
    if checked.word_timestamps:
        return invalid_param("word_timestamps", "'word_timestamps' is not available in a batch (no headers per item).")
    return checked


def item_result(outcome: ItemOutcome | ApiError, index: int) -> tuple[dict[str, Any], int]:
    """An item's entry in the answer (vllm-omni 0.30's fields, absent ones left out) and its HTTP status."""
    if isinstance(outcome, ItemOutcome) and outcome.error is None and outcome.data is not None:
        usage = outcome.usage.as_dict() if outcome.usage is not None else None
        result = {
            "index": index,
            "status": "success",
            "audio_data": base64.b64encode(outcome.data).decode("ascii"),
            "media_type": CONTENT_TYPES[outcome.response_format],
            "usage": usage,
        }
        return result, 200
    error = outcome if isinstance(outcome, ApiError) else to_api_error(outcome.error or RuntimeError())
    return {"index": index, "status": "error", "error": error.body()["error"]}, error.status


def count(outcome: ItemOutcome | ApiError, status: int, request_id: str, response_format: str) -> None:
    """Each item is counted and logged as one speech request, `stream` label `batch`."""
    metrics.REQUESTS.labels(str(status), response_format, "batch").inc()
    summary = dict(outcome.summary) if isinstance(outcome, ItemOutcome) else {"stream_format": "batch"}
    log.info("speech request", extra={**summary, "request_id": request_id, "status": status})


async def unless_disconnected(request: Request, work: asyncio.Future[Any]) -> bool:
    """Wait for `work`, or cancel it (and wait for it to stop) when the client goes first: whether it finished."""

    async def disconnected() -> None:  # the body has been read: the next message is the client leaving
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    watcher.cancel()
    if work.done():
        return True
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    return False


@router.post(
    "/v1/audio/speech/batch",
    response_model=SpeechBatchResponse,
    responses=error_responses(400, 401, 404, 413, 503),
)
async def create_speech_batch(
    body: SpeechBatchRequest, request: Request, service: Annotated[SpeechService, Depends(get_service)]
) -> Response:
    request_id: str = request.state.request_id
    settings = service.settings
    check_size(body, settings.batch_max_items, settings.batch_max_chars)
    if body.word_timestamps:
        raise invalid_param("word_timestamps", "'word_timestamps' is not available in a batch (no headers per item).")
    service.check_open()
    checked = [checked_item(body, raw) for raw in body.items]
    items = [BatchItem(i, entry, entry.input) for i, entry in enumerate(checked) if isinstance(entry, SpeechBatchItem)]
    concurrency = settings.batch_concurrency or default_concurrency(service.gate.max_concurrency)
    batch = asyncio.ensure_future(synthesize_batch(service, items, request_id, concurrency))
    if not await unless_disconnected(request, batch):  # nobody is left to answer
        for index, entry in enumerate(checked):
            count(ApiError(499, "client gone"), 499, f"{request_id}-{index}", _format_of(entry, body))
        log.info("batch abandoned by its client", extra={"request_id": request_id, "items": len(checked)})
        return Response(status_code=499)
    done: dict[int, ItemOutcome | ApiError] = {outcome.index: outcome for outcome in batch.result()}
    results = []
    for index, entry in enumerate(checked):
        result, status = item_result(done.get(index, entry), index)  # type: ignore[arg-type]
        count(done.get(index, entry), status, f"{request_id}-{index}", _format_of(entry, body))  # type: ignore[arg-type]
        results.append(result)
    succeeded = sum(1 for result in results if result["status"] == "success")
    answer = {"id": f"speech-batch-{request_id}", "results": results, "total": len(results), "succeeded": succeeded}
    return JSONResponse({**answer, "failed": len(results) - succeeded})


def _format_of(entry: SpeechBatchItem | ApiError, body: SpeechBatchRequest) -> str:
    return entry.response_format if isinstance(entry, SpeechBatchItem) else body.response_format
