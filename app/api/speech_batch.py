"""POST /v1/audio/speech/batch: vllm-omni 0.30's batch of utterances (the request's `items` over its shared options;
one JSON answer with each item's whole file in base64, or its error), synthesized by `app.speech.batch`. The caps,
the merge of an item over the batch, the wire shape of each result and the counting per item are this module's."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError

from app import metrics
from app.api.dependencies import get_batch_slots, get_service
from app.api.disconnect import unless_disconnected
from app.api.errors import CLIENT_LEFT, ApiError, error_responses, invalid_param, to_api_error, validation_error
from app.api.json_body import JsonBodyRoute
from app.api.schemas import SpeechBatchItem, SpeechBatchRequest, SpeechBatchResponse, SpeechUsage
from app.audio.formats import CONTENT_TYPES
from app.speech.batch import STREAM_LABEL, BatchEnd, BatchItem, BatchSlots, ItemOutcome, synthesize_batch
from app.speech.errors import Full, ShuttingDown, Stopped
from app.speech.options import json_kind, voice_from_speaker
from app.speech.run import SpeechService, ended_as, gate_refusal, has_ended, observe_ttfa

log = logging.getLogger(__name__)
router = APIRouter(route_class=JsonBodyRoute)

VOICE_FIELDS = {"voice", "speaker"}  # an item naming its voice either way replaces the batch's, named either way
NO_WORD_TIMESTAMPS = "'word_timestamps' is not available in a batch (no headers per item)."
ANSWER_ON_THE_LOOP_BYTES = 1 << 20  # of audio: a larger answer is encoded in worker threads, a slice at a time
AUDIO_SLICE_BYTES = 3 << 20  # of an item's audio encoded to base64 at once: a multiple of 3, so that the slices join


def check_size(body: SpeechBatchRequest, max_items: int, max_chars: int) -> None:
    """Too many items: 400; too much text in all (`input` of each item, as sent): 413. Both name `items`."""
    if len(body.items) > max_items:
        raise invalid_param("items", f"A batch holds at most {max_items} items; this one has {len(body.items)}.")
    chars = sum(
        len(item["input"]) for item in body.items if isinstance(item, dict) and isinstance(item.get("input"), str)
    )
    if chars > max_chars:
        message = f"A batch's items hold at most {max_chars} characters of input in all; these hold {chars}."
        raise ApiError(413, message, param="items", code="batch_too_large")


def shared_fields(body: SpeechBatchRequest) -> dict[str, Any]:
    """The batch's own fields, as validated: those it was sent with, and its format (wav unless sent)."""
    shared = {name: getattr(body, name) for name in body.model_fields_set - {"items"}}
    shared.setdefault("response_format", body.response_format)
    return shared


def checked_item(shared: dict[str, Any], item: Any, index: int) -> SpeechBatchItem | ApiError:
    """The item's own fields, validated as a request's are (each value once: the batch's were validated with the
    batch), over the batch's; or the 400 that names what is wrong with it (an item that is no object: the item, as
    `items[index]`). An item naming its voice (`voice` or `speaker`) replaces the batch's, named either way; then the
    voice follows from the merged fields as a request's does from its own."""
    if not isinstance(item, dict):
        return invalid_param(f"items[{index}]", f"An item is a JSON object with its `input`, not {json_kind(item)}.")
    try:
        own = SpeechBatchItem.model_validate(item)
    except ValidationError as exc:
        error = validation_error(exc.errors())
        if error.param is None:  # at fault as a whole (a name that is no name): the item, as `items[index]`
            return error.naming(f"items[{index}]")
        return error
    mine = {name: getattr(own, name) for name in own.model_fields_set}
    inherited = {k: v for k, v in shared.items() if not (k in VOICE_FIELDS and VOICE_FIELDS & mine.keys())}
    fields = voice_from_speaker({**inherited, **mine})
    merged = SpeechBatchItem.model_construct(_fields_set=set(fields), **fields)
    if merged.word_timestamps:
        return invalid_param("word_timestamps", NO_WORD_TIMESTAMPS)
    return merged


def stopped_refusal(stopped_as: str, item: ItemOutcome | None) -> str | None:
    """The refusal an item never begun is counted as when its batch was stopped (`stopped_as`), as a request turned
    away for the same reason is: a drain out of time, the drain's (`draining`), wherever the item waited, as the gate
    turns its queue away. The batch's deadline, `queue_timeout` where the item waited in the server's queue for a
    slot (`ItemOutcome.at_gate`), as a request that waits for one past its bound is; `batch_timeout` where it waited on
    its own batch (for the batch's share of slots, its reference audio): the batch's size against its time, no sign
    of a server turning work away (the sustained-rejections alert reads `queue_timeout`). A client that left: none, as
    for a request."""
    if stopped_as == "drain":
        return "draining"
    if stopped_as == "timeout":
        return "queue_timeout" if item is not None and item.at_gate else "batch_timeout"
    return None


def item_error(outcome: ItemOutcome | ApiError) -> ApiError | None:
    """Why the item failed, as the API error a request would get; None where it succeeded."""
    if isinstance(outcome, ItemOutcome) and outcome.error is None and outcome.data is not None:
        return None
    return outcome if isinstance(outcome, ApiError) else to_api_error(outcome.error or RuntimeError())


def located(error: ApiError | None, item: Any, shared: dict[str, Any], index: int) -> ApiError | None:
    """An item's error with `param` naming where the value at fault is, as OpenAI names a field within a list: the
    item's own (`items[3].speed`), or the batch's field where the item took the value from the batch. None, an error
    naming no field, and one naming the item already (`items[3]`) are as they are."""
    if error is None or error.param is None or error.param.startswith("items["):
        return error
    field = re.split(r"[.\[]", error.param, maxsplit=1)[0]
    # the batch's value: an item that leaves the field out or sends it null (null is omitted) takes it
    if field in shared and not (isinstance(item, dict) and item.get(field) is not None):
        return error
    return error.naming(f"items[{index}].{error.param}")


def item_result(outcome: ItemOutcome | ApiError, error: ApiError | None, index: int) -> dict[str, Any]:
    """An item's entry in the answer (vllm-omni 0.30's fields, absent ones left out) but its `audio_data`, which the
    answer writes as it is sent (`BatchAnswer`); `error`: its `item_error`."""
    if error is not None:
        return {"index": index, "status": "error", "error": error.body()["error"]}
    assert isinstance(outcome, ItemOutcome) and outcome.data is not None
    usage = SpeechUsage.of(outcome.usage).model_dump() if outcome.usage is not None else None
    return {"index": index, "status": "success", "media_type": CONTENT_TYPES[outcome.response_format], "usage": usage}


def count(
    outcome: ItemOutcome | ApiError,
    error: ApiError | None,
    request_id: str,
    response_format: str,
    stopped_as: str | None = None,
    started: ItemOutcome | None = None,
) -> None:
    """Each item is counted and logged as one speech request, `stream` label `batch`; one that failed with why, as a
    request refused is (`error`: its `item_error`). One the batch's stop cut short (`stopped_as`: drain, timeout or
    client_gone) is logged with what it said of itself as it ran (`started`, where it had started) and ends with
    that reason: aborted for it where its synthesis had begun (its run said so as it stopped), not where it was
    still queued (as `speech_aborted_total` counts them), but refused (`speech_rejected_total`, `stopped_refusal`);
    one the gate had turned away already ended, its refusal counted with the gate's others."""
    status = 200 if error is None else error.status
    metrics.count_request(status, response_format, "batch", error.code if error is not None else None)
    own = outcome if isinstance(outcome, ItemOutcome) else started
    summary = dict(own.summary) if own is not None else {"stream_format": "batch"}
    summary.setdefault("response_format", response_format)
    if stopped_as is not None and not has_ended(summary):  # never begun
        ended_as(summary, stopped_as, aborted=False)
        if (reason := stopped_refusal(stopped_as, started)) is not None:  # refused without synthesis
            metrics.REJECTED.labels(reason).inc()
    if status == CLIENT_LEFT:
        summary["outcome"] = "client_gone"  # as a streamed request's: no fault of the request's
    elif error is not None:
        summary["error"] = error.refusal()
    log.info("speech request", extra={**summary, "request_id": request_id, "status": status})


@router.post(
    "/v1/audio/speech/batch",
    response_model=SpeechBatchResponse,
    responses=error_responses(400, 401, 404, 408, 413, 415, 429, 503),
)
async def create_speech_batch(
    body: SpeechBatchRequest,
    request: Request,
    service: Annotated[SpeechService, Depends(get_service)],
    slots: Annotated[BatchSlots, Depends(get_batch_slots)],
) -> Response:
    request_id: str = request.state.request_id
    # counted and logged by its format if refused whole (its items, once they run, are counted one by one instead)
    request.state.speech = {"response_format": body.response_format, "stream_format": "batch"}
    check_size(body, service.settings.batch_max_items, service.settings.batch_max_chars)
    if body.word_timestamps:  # a batch-wide field at fault fails the batch, as a bad default does
        raise invalid_param("word_timestamps", NO_WORD_TIMESTAMPS)
    if body.model is not None:  # the batch's model before its items, as vllm-omni checks it: a 404 for all
        service.check_model(body.model)
    service.check_open()
    shared = shared_fields(body)
    checked = [checked_item(shared, raw, index) for index, raw in enumerate(body.items)]
    items = [BatchItem(i, entry, entry.input) for i, entry in enumerate(checked) if isinstance(entry, SpeechBatchItem)]
    refused: list[str] = []  # the admission gate's refusals, as they happen
    done: dict[int, ItemOutcome] = {}  # each item's outcome as it ends: kept where a drain or its deadline stops it
    ended = BatchEnd()  # why it was stopped, where it was: a drain, or its deadline
    started: dict[int, ItemOutcome] = {}  # each item's from its start: logged as it stood where a stop cuts it short
    batch = asyncio.ensure_future(synthesize_batch(service, items, request_id, slots, refused, done, ended, started))
    # one request: the request timeout bounds the batch whole (each item's synthesis is bounded, not its wait for a
    # slot nor the items after it), under the fleet's proxy timeouts; the items that ended are answered
    deadline = asyncio.get_running_loop().call_later(service.settings.request_timeout_s, ended.stop, batch, "timeout")
    try:
        present = await unless_disconnected(request, batch)
    finally:
        deadline.cancel()
    # every item ended: answered as a batch that finished, whatever stopped it in its last moment
    finished = present and (not batch.cancelled() or len(done) == len(items))
    if finished and not batch.cancelled():
        batch.result()  # a failure of the batch's own (an item's is its outcome) is a 500, as a request's would be
    stop_reason = (ended.reason or "drain") if present else "client_gone"  # where the batch was stopped
    stopped = to_api_error(Stopped(stop_reason)) if present else ApiError(CLIENT_LEFT, "The client left.")
    # every item that ran has its outcome in `done`; those stopped before they ended (a drain, the deadline) fail so
    outcomes: list[ItemOutcome | ApiError] = [
        done.get(index, entry if isinstance(entry, ApiError) else stopped) if present else stopped
        for index, entry in enumerate(checked)
    ]
    # each failure worded once, for the count and the answer, naming the item's field or the batch's at fault
    errors = [
        located(item_error(outcome), raw, shared, index)
        for index, (outcome, raw) in enumerate(zip(outcomes, body.items, strict=True))
    ]
    full = [error for error in errors if error is not None and error.status == 429]
    if finished and all(map(turned_away, outcomes)):  # nothing admitted, no work done: refused whole, as a request,
        # with a drain's 503 before the full server's longest 429; counted once, as one (the accounting middleware;
        # its refusal here)
        answer = max((e for e in errors if e is not None), key=lambda error: (error.status, retry_after_s(error)))
        metrics.REJECTED.labels(refusal(outcomes[errors.index(answer)]) or "draining").inc()
        raise answer
    for reason in refused:  # each a refusal, as its own request's would be (whether or not the batch then ended)
        metrics.REJECTED.labels(reason).inc()
    request.state.batch_items_counted = True  # each item below, as a request of its own
    for index, (entry, outcome, error) in enumerate(zip(checked, outcomes, errors, strict=True)):
        cut_short = stop_reason if outcome is stopped else None
        count(outcome, error, f"{request_id}-{index}", _format_of(entry, body), cut_short, started.get(index))
    if not present:  # nobody is left to answer
        log.info("batch abandoned by its client", extra={"request_id": request_id, "items": len(checked)})
        return Response(status_code=CLIENT_LEFT)
    if not finished and not done:  # a drain ran out of time before any item ended: nothing to answer with
        raise stopped
    answered = [o for o in outcomes if isinstance(o, ItemOutcome) and o.data is not None]
    audio_bytes = sum(len(o.data) for o in answered if o.data is not None)
    metrics.AUDIO_SECONDS.inc(sum(float(o.summary.get("audio_s") or 0.0) for o in answered))  # delivered with it
    for item in answered:  # each item's first audio, taken when its file was complete, is sent with the answer
        if item.timing is not None and item.timing.ttfa_s is not None:
            observe_ttfa(item.response_format, STREAM_LABEL, item.timing.ttfa_s, item.timing.phases())
    answer = BatchAnswer(f"speech-batch-{request_id}", outcomes, errors)
    # items the full server refused: when to send them again, as their own requests would have been told
    later = {"Retry-After": str(max(retry_after_s(error) for error in full))} if full else {}
    if audio_bytes <= ANSWER_ON_THE_LOOP_BYTES:  # on the loop, where a thread hop would cost more than the encoding
        return Response(answer.whole(), media_type="application/json", headers=later)
    # a large one in worker threads, a slice at a time: base64 of 100 MB is half a second of the loop all streams share
    headers = {**later, "Content-Length": str(answer.length)}
    return StreamingResponse(answer.pieces(), media_type="application/json", headers=headers)


def turned_away(outcome: ItemOutcome | ApiError) -> bool:
    """The item was refused before any work: by the full server, or by a drain while it waited for a slot."""
    return isinstance(outcome, ItemOutcome) and isinstance(outcome.error, Full | ShuttingDown)


def refusal(outcome: ItemOutcome | ApiError) -> str | None:
    """Why the admission gate refused an item (`speech_rejected_total`'s reason); None where it did not."""
    return gate_refusal(outcome.error) if isinstance(outcome, ItemOutcome) else None


def retry_after_s(error: ApiError) -> int:
    """The seconds a refusal's Retry-After asks for (0: none)."""
    return int((error.headers or {}).get("Retry-After", 0))


def json_bytes(value: Any) -> bytes:
    """`value` as the answer writes JSON: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class BatchAnswer:
    """The answer's JSON, each item's result in order and the counts, in parts as it is sent: its text, and in each
    successful item's `audio_data` the item's audio, encoded to base64 a slice at a time as it is written. Built whole
    (each item's base64, then the JSON text, then its bytes) a large answer held about five times its audio at once:
    eight items of 4096 characters at speed 0.25 in 48 kHz wav, a 1 GB answer, raised the server's memory by 3.7 GB,
    past a CPU replica's limit. So it holds its audio and a slice, as its items sent as requests of their own would."""

    def __init__(self, batch_id: str, outcomes: list[ItemOutcome | ApiError], errors: list[ApiError | None]) -> None:
        self._parts: list[bytes | memoryview] = [b'{"id":' + json_bytes(batch_id) + b',"results":[']
        succeeded = 0
        for index, (outcome, error) in enumerate(zip(outcomes, errors, strict=True)):
            result = item_result(outcome, error, index)
            if index:
                self._parts.append(b",")
            if result["status"] == "error":
                self._parts.append(json_bytes(result))
                continue
            assert isinstance(outcome, ItemOutcome) and outcome.data is not None
            succeeded += 1
            head = json_bytes({"index": index, "status": "success"})[:-1]  # vllm-omni's order: audio_data third
            rest = json_bytes({name: result[name] for name in ("media_type", "usage")})[1:]
            self._parts += [head + b',"audio_data":"', memoryview(outcome.data), b'",' + rest]
        counts = {"total": len(outcomes), "succeeded": succeeded, "failed": len(outcomes) - succeeded}
        self._parts.append(b"]," + json_bytes(counts)[1:])

    @property
    def length(self) -> int:
        """The answer's bytes (base64: 4 for every 3 of audio, the last 1 or 2 padded to 4)."""
        return sum(len(part) if isinstance(part, bytes) else -(-len(part) // 3) * 4 for part in self._parts)

    def whole(self) -> bytes:
        """The answer at once (a small one)."""
        return b"".join(part if isinstance(part, bytes) else base64.b64encode(part) for part in self._parts)

    async def pieces(self) -> AsyncIterator[bytes]:
        """The answer in pieces, each slice of audio encoded in a worker thread."""
        for part in self._parts:
            if isinstance(part, bytes):
                yield part
                continue
            for start in range(0, len(part), AUDIO_SLICE_BYTES):
                yield await asyncio.to_thread(base64.b64encode, part[start : start + AUDIO_SLICE_BYTES])


def _format_of(entry: SpeechBatchItem | ApiError, body: SpeechBatchRequest) -> str:
    return entry.response_format if isinstance(entry, SpeechBatchItem) else body.response_format
