"""`speech-server`: serve the speech API."""

from __future__ import annotations

import argparse
import os

import uvicorn

from app.logs import configure_logging
from app.server import create_app
from app.settings import Settings, settings_help


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="speech-server",
        description="OpenAI-compatible streaming text-to-speech server. Flags override SPEECH_* variables.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=settings_help(),
    )
    parser.add_argument("--host", help="address to listen on (SPEECH_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (SPEECH_PORT, default 8000)")
    parser.add_argument(
        "--engine", choices=["auto", "embedded", "omni"], help="speech engine (SPEECH_ENGINE, default auto)"
    )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log level (SPEECH_LOG_LEVEL, default info)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    settings = Settings(**overrides)
    configure_logging(settings.log_level)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # engines load from local files only, never from a hub
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_config=None, timeout_graceful_shutdown=30)


if __name__ == "__main__":
    main()
