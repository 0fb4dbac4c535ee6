"""A stand-in replica for the balancer's tests, started by deploy/fleet/fleet.sh as its SPEECH_SERVER
(`paced_replica.py --engine E --host H --port P`): /ready answers 200, and POST /v1/audio/speech streams one
80-ms window of pcm at once, then the next a second later, as a replica streams its first audio and then paces.
What reaches a client through the balancer, and when, is then the balancer's doing alone."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

WINDOW = b"\0" * 3840  # 80 ms of 24 kHz 16-bit mono pcm
NEXT_AFTER_S = 1.0


async def windows() -> AsyncIterator[bytes]:
    yield WINDOW
    await asyncio.sleep(NEXT_AFTER_S)
    yield WINDOW


async def speech(request: Request) -> Response:
    await request.body()
    return StreamingResponse(windows(), media_type="audio/pcm")


async def ready(request: Request) -> Response:
    return PlainTextResponse("ready")


app = Starlette(routes=[Route("/v1/audio/speech", speech, methods=["POST"]), Route("/ready", ready)])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
