"""uvicorn's error line for a response left incomplete: dropped where the service cut the stream on purpose (it logs
why itself), kept everywhere else (an app that really failed to finish a response)."""

from __future__ import annotations

import contextvars
import logging

from app.logs import CUT_ON_PURPOSE, IntendedCuts

LEFT_INCOMPLETE = "ASGI callable returned without completing response."


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, (), None)


def in_a_request(cut: bool, message: str) -> bool:
    def run() -> bool:
        if cut:
            CUT_ON_PURPOSE.set(True)
        return IntendedCuts().filter(record(message))

    return contextvars.copy_context().run(run)  # a request's own context, as each connection task has


def test_an_incomplete_response_cut_on_purpose_is_not_reported_as_an_error() -> None:
    assert not in_a_request(cut=True, message=LEFT_INCOMPLETE)


def test_any_other_incomplete_response_and_any_other_line_are_kept() -> None:
    assert in_a_request(cut=False, message=LEFT_INCOMPLETE)
    assert in_a_request(cut=True, message="Exception in ASGI application")
    assert not CUT_ON_PURPOSE.get()  # one request's cut is its own: another's context never sees it
