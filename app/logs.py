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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
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
    if not any(isinstance(f, IntendedCuts) for f in errors.filters):
        errors.addFilter(IntendedCuts())
