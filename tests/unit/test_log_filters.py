"""uvicorn's error line for a response left incomplete: dropped where the service cut the stream on purpose (it logs
why itself), kept everywhere else (an app that really failed to finish a response, another request's task)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.logs import IntendedCuts, cut_on_purpose, redact

LEFT_INCOMPLETE = "ASGI callable returned without completing response."


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, (), None)


async def test_an_incomplete_response_cut_on_purpose_is_not_reported_as_an_error() -> None:
    async def request() -> bool:
        cut_on_purpose()
        return IntendedCuts().filter(record(LEFT_INCOMPLETE))

    assert not await asyncio.create_task(request())


async def test_another_requests_incomplete_response_and_any_other_line_are_kept() -> None:
    cut = asyncio.Event()

    async def cut_request() -> bool:
        cut_on_purpose()
        cut.set()
        return IntendedCuts().filter(record("Exception in ASGI application"))

    async def next_request() -> bool:  # the next on the connection: a task of its own, begun after the cut
        await cut.wait()
        return IntendedCuts().filter(record(LEFT_INCOMPLETE))

    kept_other_line, kept_next = await asyncio.gather(asyncio.create_task(cut_request()), next_request())
    assert kept_other_line and kept_next
    assert IntendedCuts().filter(record(LEFT_INCOMPLETE))  # outside any request's task


def test_outside_an_event_loop_every_line_is_kept() -> None:
    assert IntendedCuts().filter(record(LEFT_INCOMPLETE))


@pytest.mark.parametrize(
    "line",
    [
        "< GET /v1/audio/speech/stream?api_key=k1 HTTP/1.1",
        "< GET /v1/audio/speech/stream?voice=a&API_KEY=k1 HTTP/1.1",
        "< GET /v1/audio/speech/stream?api%5Fkey=k1 HTTP/1.1",  # the name percent-encoded, as the server decodes it
        "< GET /v1/audio/speech/stream?%61pi%5fkey=k1&voice=a HTTP/1.1",
        "api_key=k1&voice=a",  # a query string logged alone
        "< authorization: Bearer k1",
    ],
)
def test_a_key_in_a_logged_request_line_or_header_is_redacted(line: str) -> None:
    redacted = redact(line)
    assert "k1" not in redacted and "[redacted]" in redacted, redacted
    if "=" in line:
        assert redacted.replace("[redacted]", "k1") == line  # nothing else of the request line touched
