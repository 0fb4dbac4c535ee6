"""Logging as one JSON object per line, with whatever `extra` fields a call passes."""

from __future__ import annotations

import json
import logging
import re
import time

# Secrets a library may log at debug level: the WebSocket handshake's request line (the api_key query parameter) and
# its headers (Authorization). Never written out.
_SECRETS = re.compile(r"(?i)(api_key=)[^&\s\"']+|(authorization:\s*)[^\"\n]+")


def redact(message: str) -> str:
    return _SECRETS.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", message)


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
