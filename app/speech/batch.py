"""Many utterances in one call: each item synthesized whole as a request of its own (its voice resolved, its job built
and refused on its own, admitted through the same gate as every request). All batches together run at most
`BatchSlots` items at once, so that batches hold no more than that share of the server's slots however many items
they bring, and requests arriving meanwhile find room. One item's failure is its own; the others go on. Cancelling
the batch (its caller left, or a drain ran out of time) stops the items running and starts no more."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any

from app.engine_protocol import ReferenceAudio
from app.settings import Settings
from app.speech.encoding import Usage, complete_file
from app.speech.errors import Failed, SpeechError
from app.speech.options import SpeechOptions
from app.speech.run import SpeechRun, SpeechService, gate_refusal
from app.speech.voice import decode_reference
from app.timing import TtfaTimeline

log = logging.getLogger(__name__)

STREAM_LABEL = "batch"  # the metrics' `stream` label of a batch item


@dataclasses.dataclass
class BatchItem:
    """One item to synthesize: its place in the batch, its options (the batch's with its own on top) and text."""

    index: int
    options: SpeechOptions
    text: str


@dataclasses.dataclass
class ItemOutcome:
    """What became of one item: its whole file and usage, or the failure that ended it. `summary` is what its log
    line and counters say of it, filled in as it ran."""

    index: int
    response_format: str
    summary: dict[str, object]
    data: bytes | None = None
    usage: Usage | None = None
    error: BaseException | None = None
    timing: TtfaTimeline | None = None  # its TTFA once its file was complete (observed when the batch is answered)
    # waiting in the admission gate's queue for one of the server's slots: a stop of the batch that finds it there
    # refuses it for want of a slot (not while it waits for its batch's own slots or resolves its voice)
    at_gate: bool = False


class BatchSlots:
    """The server's share of slots for batch items, all batches together: `configured`, or a quarter of the
    concurrency, at least 1, and never more than the concurrency (beyond it items would only be refused by the
    queue)."""

    def __init__(self, max_concurrency: int, configured: int | None = None) -> None:
        self.size = min(max_concurrency, configured or max(1, max_concurrency // 4))
        self._semaphore = asyncio.Semaphore(self.size)

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._semaphore.release()


class SharedReferences:
    """Each reference audio of a batch fetched and decoded once, however many of its items clone from it (an item
    inherits the batch's `ref_audio`, a string of up to the body's size). The decodes end with the batch."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._decoded: dict[str, asyncio.Future[ReferenceAudio]] = {}

    async def decode(self, value: str) -> ReferenceAudio:
        future = self._decoded.get(value)
        if future is None:
            future = self._decoded[value] = asyncio.ensure_future(decode_reference(value, self._settings))
        return await asyncio.shield(future)  # an item cancelled does not cancel the others' decode

    async def close(self) -> None:
        for future in self._decoded.values():
            future.cancel()
        await asyncio.gather(*self._decoded.values(), return_exceptions=True)


class BatchEnd:
    """Why a batch was stopped before its items ended (None: its caller left, or it was not stopped): the reason its
    items running then are aborted under, as a request stopped for it would be."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def stop(self, task: asyncio.Task[Any], reason: str) -> None:
        """Stop the batch's `task` for `reason` (the first reason given stands)."""
        if not task.done() and not task.cancelling():  # a second cancel would cut the items' clean-up short
            self.reason = reason
            task.cancel()


class BatchStop:
    """What a drain that ran out of time stops of a batch (the lifecycle tracks it until the batch ends, so that a
    drain waits for its items not yet started too)."""

    def __init__(self, task: asyncio.Task[None], ended: BatchEnd) -> None:
        self.task, self.ended = task, ended

    def stop(self, reason: str) -> None:
        self.ended.stop(self.task, reason)


async def speak_whole(
    service: SpeechService,
    item: BatchItem,
    request_id: str,
    references: SharedReferences | None,
    refused: list[str],
    ended: BatchEnd | None = None,
    started_items: dict[int, ItemOutcome] | None = None,
) -> ItemOutcome:
    """One item, whole: its job, a slot, the engine's audio encoded into one file. A refusal of the admission gate
    adds its reason to `refused`, for the route to count once it knows whether the batch was refused whole; a batch
    stopped while the item runs (`ended`) aborts it for the batch's reason. Its outcome goes to `started_items` (by its
    index) as it starts, the same that it returns: what it said of itself is kept where a stop cuts it short."""
    started = time.perf_counter()
    timing = TtfaTimeline(started)
    summary: dict[str, object] = {
        "model": item.options.model or service.engine.model_id,
        "response_format": item.options.response_format,
        "stream_format": STREAM_LABEL,
        "chars": len(item.text),
        "batch_item": item.index,
    }
    outcome = ItemOutcome(item.index, item.options.response_format, summary)
    if started_items is not None:
        started_items[item.index] = outcome
    try:  # the batch was checked open when it was accepted: a drain lets it finish, as it lets a queued request
        service.check_input(item.text)
        voice = await service.resolve_voice(item.options, references.decode if references else None)
        job, output = service.build_job(voice, item.text, f"{request_id}-{item.index}", whole_file=True)
        outcome.response_format = output.response_format
        # the batch's answer counts its audio and TTFA: nothing of an item reaches its client before it
        run = SpeechRun(
            service, started, timing, summary, STREAM_LABEL, counts_audio=False, observe_ttfa=False,
            stream_ended_as=(lambda: ended.reason) if ended is not None else None,
        )  # fmt: skip
        # the route counts a refusal; a drain that turns it away while it queues ends it in its summary. Its own
        # deadline counts from its start, after the batch's: the batch's stops it first, in the queue or not
        outcome.at_gate = True  # a stop of the batch now finds it waiting for the server's slot
        ticket = await run.admitted(len(item.text), count_refusal=False)
        outcome.at_gate = False
        audio = await run.open(job, output, ticket)
        file = await complete_file(audio, False, f"{request_id}-{item.index}")
        outcome.data, outcome.usage, outcome.timing = file.data, audio.usage, timing
    except SpeechError as exc:
        outcome.error = exc
        if (reason := gate_refusal(exc)) is not None:
            refused.append(reason)
    except Exception as exc:  # an item's own failure, the others go on
        log.exception("synthesis failed", extra={"request_id": request_id, "batch_item": item.index})
        outcome.error = Failed(request_id)
        outcome.error.__cause__ = exc
    finally:  # also where the batch's stop cut it short
        summary.setdefault("e2e_s", round(time.perf_counter() - started, 4))
    return outcome


async def synthesize_batch(
    service: SpeechService,
    items: list[BatchItem],
    request_id: str,
    slots: BatchSlots,
    refused: list[str],
    finished: dict[int, ItemOutcome],
    ended: BatchEnd | None = None,
    started_items: dict[int, ItemOutcome] | None = None,
) -> None:
    """Every item, as batch slots come free, in the order given. The lifecycle counts the batch as work in progress
    until it ends. The admission gate's refusals go to `refused`, and each item's outcome to `finished` (by its
    index), as they happen: what ended is kept when the batch is stopped before the rest (`ended` says why: a drain, or
    its deadline). Each item's outcome goes to `started_items` too as it starts, filled in as it runs: what an item the
    stop cut short had said of itself."""

    references = SharedReferences(service.settings)
    ended = ended or BatchEnd()

    async def one(item: BatchItem) -> None:
        async with slots:
            outcome = await speak_whole(service, item, request_id, references, refused, ended, started_items)
            finished[item.index] = outcome

    task = asyncio.current_task()
    assert task is not None
    tracking_id = f"{request_id}-batch-{uuid.uuid4().hex[:8]}"  # the caller's id may repeat: each batch its own key
    service.lifecycle.track(tracking_id, BatchStop(task, ended), request_id)
    try:
        async with asyncio.TaskGroup() as group:
            for item in items:
                group.create_task(one(item))
    finally:
        service.lifecycle.untrack(tracking_id)
        await references.close()
