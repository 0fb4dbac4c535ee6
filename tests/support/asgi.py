"""An app served in the test's process (Starlette's TestClient), as the server serves it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from fastapi import FastAPI
from starlette.testclient import TestClient


@contextlib.contextmanager
def ready_client(app: FastAPI, timeout_s: float = 60.0) -> Iterator[TestClient]:
    """A client of `app` once its start has run and its engine is ready: a WebSocket session is accepted only then
    (one asked for before is refused with the 503 a request gets)."""
    with TestClient(app) as client:
        deadline = time.monotonic() + timeout_s
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, "the engine never became ready"
            time.sleep(0.05)
        yield client
