"""uvicorn's error line for a response left incomplete: dropped where the service cut the stream on purpose (it logs
why itself), kept everywhere else (an app that really failed to finish a response, another request's task). Its
error and traceback for a WebSocket text frame that is not UTF-8 (a client's mistake): one info line."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from app.logs import IntendedCuts, JsonFormatter, TextNotUtf8, cut_on_purpose, redact

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


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def logged_on_undecodable_text(message: str, level: int) -> list[logging.LogRecord]:
    """The lines a logger at `level`, filtered as uvicorn.error is, writes of `message` logged as uvicorn logs a text
    frame that is not UTF-8: `logger.exception` while the payload's decode error is handled."""
    logger = logging.getLogger(f"{__name__}.uvicorn.error")
    kept = Kept()
    logger.addHandler(kept)
    logger.addFilter(TextNotUtf8())
    logger.setLevel(level)
    logger.propagate = False
    try:
        try:
            b'{"text": "Caf\xe9."}'.decode()
        except UnicodeDecodeError:
            logger.exception(message)
    finally:
        logger.removeHandler(kept)
        logger.filters.clear()
    return kept.records


def test_a_text_frame_that_is_not_utf8_is_one_info_line_without_a_traceback() -> None:
    [record] = logged_on_undecodable_text("Invalid UTF-8 sequence received from client.", logging.INFO)
    line = JsonFormatter().format(record)
    assert "Traceback" not in line, line
    entry = json.loads(line)
    assert (entry["level"], entry["message"]) == ("info", "websocket text frame is not UTF-8: closed with 1007")
    assert "exception" not in entry and "0xe9" in entry["detail"], entry


def test_a_text_frame_that_is_not_utf8_is_not_logged_where_info_lines_are_not() -> None:
    assert logged_on_undecodable_text("Invalid UTF-8 sequence received from client.", logging.WARNING) == []


def test_a_decode_error_of_the_apps_own_keeps_its_error_and_traceback() -> None:
    [record] = logged_on_undecodable_text("Exception in ASGI application\n", logging.INFO)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "UnicodeDecodeError" in JsonFormatter().format(record)


def test_uvicorns_colour_copy_of_a_message_stays_out_of_the_json_line() -> None:
    """uvicorn gives some lines a copy of their message with terminal colour codes (`color_message`, for its own
    coloured console): the line carried it, escape codes and all, beside the message itself."""
    record = logging.getLogger("uvicorn.error").makeRecord(  # as uvicorn logs its start (uvicorn/server.py)
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        "Started server process [%d]",
        (42,),
        None,
        extra={"color_message": "Started server process [\x1b[36m%d\x1b[0m]"},
    )
    line = JsonFormatter().format(record)
    assert "\\u001b" not in line and "\x1b" not in line, line
    entry = json.loads(line)
    assert entry["message"] == "Started server process [42]" and "color_message" not in entry, entry
