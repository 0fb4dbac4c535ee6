"""POST /v1/audio/speech: validate, admit, synthesize, encode, stream (the stages are app.speech's; the body, the
headers and the stream's framing are this module's)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from app.api.audio_stream import SpeechResponse, audio_body, sse_events
from app.api.dependencies import get_service
from app.api.disconnect import unless_disconnected
from app.api.errors import CLIENT_LEFT, error_responses
from app.api.json_body import JsonBodyRoute
from app.api.schemas import SpeechRequest
from app.audio.formats import CONTENT_TYPES
from app.speech.encoding import EncodedAudio, Usage, WholeFile, complete_file
from app.speech.errors import Refused
from app.speech.run import SpeechRun, SpeechService
from app.timing import TtfaTimeline

log = logging.getLogger(__name__)
router = APIRouter(route_class=JsonBodyRoute)

# vllm-omni 0.30's budget for X-Word-Timestamps: larger headers become opaque 502s behind common reverse proxies
WORD_TIMESTAMPS_HEADER_LIMIT = 4096
# vllm-omni 0.30's usage headers on a whole file, in the order it writes them
USAGE_HEADERS = (
    "X-VLLM-OMNI-INPUT-TOKENS",
    "X-VLLM-OMNI-OUTPUT-TOKENS",
    "X-VLLM-OMNI-TOTAL-TOKENS",
    "X-VLLM-OMNI-INPUT-TEXT-TOKENS",
    "X-VLLM-OMNI-INPUT-AUDIO-TOKENS",
)
# what a browser's script may read of a whole file's answer (CORS exposes them)
WHOLE_FILE_HEADERS = ("X-Word-Timestamps", "X-Word-Timestamps-Omitted", *USAGE_HEADERS)
# A stream's bytes are for a listener now: nothing between here and the client may hold them back to send more at once
# (nginx buffers a proxied answer unless told otherwise; a fleet's HAProxy is told in its own configuration)
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

_AUDIO_RESPONSES = {
    200: {
        "description": "Audio, streamed as it is synthesized (or SSE events when stream_format is sse; one whole file "
        "with its Content-Length for `stream: false`).",
        "content": {**{ct: {} for ct in CONTENT_TYPES.values()}, "text/event-stream": {}},
    },
    **error_responses(400, 401, 404, 408, 413, 415, 429, 503, 504),
}


def speech_summary(body: SpeechRequest, service: SpeechService) -> dict[str, object]:
    """What the request's log line and counters say of it (SpeechAccountingMiddleware), filled in as it runs."""
    return {
        "model": body.model or service.engine.model_id,
        "response_format": body.response_format,
        # the metrics' `stream` label: audio, sse, or file (a whole file, `stream: false`)
        "stream_format": "file" if body.whole_file else body.stream_format,
        "chars": len(body.input),
    }


def check_word_timestamps_carrier(body: SpeechRequest) -> None:
    """Word timings travel as SSE events or in a whole file's header: a plain audio stream has nowhere to put them."""
    if body.word_timestamps and body.stream_format != "sse" and not body.whole_file:
        message = (
            "'word_timestamps' needs stream_format 'sse' (the timings arrive as SSE events) or 'stream': false "
            "(a whole file, the timings in its X-Word-Timestamps header)."
        )
        raise Refused("word_timestamps", message)


def word_timestamps_headers(file: WholeFile) -> dict[str, str]:
    """vllm-omni 0.30's headers for a whole file's word timings: `X-Word-Timestamps`, a JSON list of {word, start_ms,
    end_ms} (ASCII-escaped), or past 4 KB `X-Word-Timestamps-Omitted` saying so."""
    if file.words is None:
        return {}
    timings = json.dumps([word.as_dict() for word in file.words])
    if len(timings) <= WORD_TIMESTAMPS_HEADER_LIMIT:
        return {"X-Word-Timestamps": timings}
    return {"X-Word-Timestamps-Omitted": f"oversize; bytes={len(timings)}; limit={WORD_TIMESTAMPS_HEADER_LIMIT}"}


def usage_headers(usage: Usage) -> dict[str, str]:
    """What a whole file cost, in vllm-omni 0.30's headers (the SSE `speech.audio.done` event carries the same as
    `usage`): input tokens (text and reference audio apart), tokens generated, their total."""
    counts = (
        usage.input_tokens,
        usage.output_tokens,
        usage.total_tokens,
        usage.input_text_tokens,
        usage.input_audio_tokens,
    )
    return {name: str(count) for name, count in zip(USAGE_HEADERS, counts, strict=True)}


async def whole_file_response(audio: EncodedAudio, response_format: str, words: bool, request_id: str) -> Response:
    """`stream: false`: the complete file, sent once all of it exists, with its Content-Length and exact headers."""
    file = await complete_file(audio, words, request_id)
    headers = {**usage_headers(audio.usage), **word_timestamps_headers(file)}
    return Response(file.data, media_type=CONTENT_TYPES[response_format], headers=headers)


@router.post("/v1/audio/speech", responses=_AUDIO_RESPONSES, response_class=StreamingResponse)
async def create_speech(
    body: SpeechRequest, request: Request, service: Annotated[SpeechService, Depends(get_service)]
) -> Response:
    request_id: str = request.state.request_id
    timing = request.state.ttfa_timeline = TtfaTimeline(request.state.started_at)  # logged by the accounting
    summary = request.state.speech = speech_summary(body, service)  # logged and counted once per request
    check_word_timestamps_carrier(body)
    service.check_open()
    # until its response starts, the request's work stops when its client leaves (waiting for a slot, for the first
    # audio, for the whole file): nobody would hear it
    answer = asyncio.ensure_future(speech_response(body, service, request_id, timing, summary))
    if await unless_disconnected(request, answer):
        return answer.result()
    if answer.done() and not answer.cancelled() and answer.exception() is None:  # ready as the client left
        response = answer.result()
        if isinstance(response, SpeechResponse):
            await response.audio.close_if_never_streamed()
    summary["outcome"] = "client_gone"  # also where the answer was ready as the client left: nobody got it
    return Response(status_code=CLIENT_LEFT)


async def speech_response(
    body: SpeechRequest, service: SpeechService, request_id: str, timing: TtfaTimeline, summary: dict[str, object]
) -> Response:
    """The answer, from the voice to the first audio (a stream) or to the last (a whole file)."""
    service.check_input(body.input)
    voice = await service.resolve_voice(body)
    job, output = service.build_job(voice, body.input, request_id, whole_file=body.whole_file)
    run = SpeechRun(service, timing.received, timing, summary, str(summary["stream_format"]))
    ticket = await run.admitted(len(body.input))  # a drain, or its own deadline, may end it queued
    audio = await run.open(job, output, ticket)
    if output.whole_file:
        return await whole_file_response(audio, output.response_format, job.word_timestamps, request_id)
    if body.stream_format == "sse":
        return SpeechResponse(
            sse_events(audio, request_id),
            audio,
            media_type="text/event-stream",
            headers=STREAM_HEADERS,
        )
    return SpeechResponse(
        audio_body(audio), audio, media_type=CONTENT_TYPES[output.response_format], headers=STREAM_HEADERS
    )
