"""`speech-server`: serve the speech API."""

from __future__ import annotations

import argparse
import os
import signal
from types import FrameType

import uvicorn

from app.logs import configure_logging
from app.server import create_app
from app.settings import Settings, settings_help


class SpeechServer(uvicorn.Server):
    """uvicorn re-raises SIGTERM after shutting down, so the process dies by the signal (status -15) and a supervisor
    reads a requested stop as a crash. A SIGTERM that was handled gracefully ends with status 0 instead."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)


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
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, timeout_graceful_shutdown=30)
    SpeechServer(config).run()


if __name__ == "__main__":
    main()
