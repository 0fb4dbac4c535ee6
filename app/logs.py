"""Logging as one JSON object per line, with whatever `extra` fields a call passes."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import urllib.parse
import weakref
from typing import Any

# Secrets a library may log at debug level: the WebSocket handshake's request line (the api_key query parameter,
# whatever of its name is percent-encoded, as the server decodes it) and its headers (Authorization). Never written out.
_QUERY_VALUE = re.compile(r"(?P<name>(?:^|(?<=[?&\s]))[^=&\s\"'?]+)=[^&\s\"']+")
_AUTHORIZATION = re.compile(r"(?i)(authorization:\s*)[^\"\n]+")


def redact(message: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"{name}=[redacted]" if urllib.parse.unquote(name).lower() == "api_key" else match.group(0)

    return _AUTHORIZATION.sub(r"\1[redacted]", _QUERY_VALUE.sub(value, message))


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}
# Extras meant for a terminal, not a log: uvicorn's copy of a message with colour codes for its coloured console
_TERMINAL_ONLY = {"color_message"}
_LEFT_OUT = _STANDARD | _TERMINAL_ONLY


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _LEFT_OUT})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# The tasks (one per request, in uvicorn) whose response the app ended mid-body on purpose (a stream cut by a timeout
# or a drain, so that the client sees it incomplete): uvicorn then reports, at error level, the response left
# incomplete that was meant, beside the service's own line saying why. Keyed on the task, not a context variable: a
# task's context may be copied into the next request's on a kept-alive connection.
_CUT_ON_PURPOSE: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
_LEFT_INCOMPLETE = "ASGI callable returned without completing response."


def cut_on_purpose() -> None:
    """The current request's response is being left incomplete on purpose (said by its own log line)."""
    task = asyncio.current_task()
    if task is not None:
        _CUT_ON_PURPOSE.add(task)


class IntendedCuts(logging.Filter):
    """Drops uvicorn's report of an incomplete response where the app cut it on purpose; keeps every other."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != _LEFT_INCOMPLETE:
            return True
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop: not a request's
            return True
        return task is None or task not in _CUT_ON_PURPOSE


# uvicorn's words (websockets_sansio_impl) for a WebSocket text frame whose payload is not UTF-8
_NOT_UTF8 = "Invalid UTF-8 sequence received from client."


class TextNotUtf8(logging.Filter):
    """uvicorn's report of a WebSocket text frame that is not UTF-8, made one info line. uvicorn closes the connection
    with 1007 as it should, but reports it at error level with a traceback: the client's mistake, not the server's,
    and any client could fill the log with errors and tracebacks. Every other line is kept as it is (a decode error
    of the app's own is reported under other words)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if record.msg != _NOT_UTF8 or not isinstance(error, UnicodeDecodeError):
            return True
        record.msg, record.args = "websocket text frame is not UTF-8: closed with 1007", ()
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        record.exc_info, record.exc_text = None, None
        record.detail = str(error)  # the byte and where: no more of the client's text than that
        # the logger let it through at error level: at info it is kept only where info lines are logged
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)  # our own per-request line replaces it
    errors = logging.getLogger("uvicorn.error")
    for kind in (IntendedCuts, TextNotUtf8):
        if not any(isinstance(f, kind) for f in errors.filters):
            errors.addFilter(kind())
