"""`speech-server` on the sglang engine over the sglang-omni 0.1.8 stand-ins (tests/fakes/sglang_omni_0_1_8.py), as a
real process on a real port: for end-to-end tests of the engine through the service's own HTTP and WebSocket layers.
Settings come from SPEECH_* as usual; SPEECH_SGLANG__MODEL names a model directory written by `speech-make-model-dir`.

    python -m tests.fakes.sglang_server [--step-delay-s S]

`--step-delay-s` waits that long before each window of audio the stand-in's pipeline yields. SIGUSR1 kills the
pipeline, as a dead sglang-omni process would: its runner fails, the requests in flight fail and every later one too.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from dataclasses import replace

from app.cli import SpeechServer, server_config
from app.engines import qwen3_as_served, sglang_engine
from app.engines.sglang.engine import SglangRuntime
from app.logs import configure_logging
from app.server import create_app
from app.settings import Settings
from tests.fakes import sglang_omni_0_1_8 as stand_in


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.sglang_server")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="seconds before each window of audio")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings(engine="sglang")
    configure_logging(settings.log_level)
    started: list[tuple[asyncio.AbstractEventLoop, stand_in.MultiProcessPipelineRunner]] = []

    class Runner(stand_in.MultiProcessPipelineRunner):
        """The stand-in's runner, its coordinator (made when the runner starts) as slow as asked."""

        async def start(self, timeout: float = 120.0) -> None:  # noqa: ASYNC109  (sglang-omni's signature)
            await super().start(timeout)
            self.coordinator.step_delay_s = args.step_delay_s
            started.append((asyncio.get_running_loop(), self))

    def runtime() -> SglangRuntime:
        return replace(stand_in.runtime(), pipeline_runner=Runner)

    def kill(*_: object) -> None:
        """The pipeline's process dies (on the server's loop: the runner's events belong to it)."""
        for loop, runner in started:
            loop.call_soon_threadsafe(runner.kill)

    engine = sglang_engine(settings, runtime_factory=runtime)
    app = create_app(settings, engine=qwen3_as_served(engine, settings, settings.sglang.sentence_pipeline))
    signal.signal(signal.SIGUSR1, kill)
    SpeechServer(server_config(app, settings), app.state.lifecycle).run()


if __name__ == "__main__":
    main()
