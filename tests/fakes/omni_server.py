"""`speech-server` on the omni engine over the vllm-omni 0.30.0 fakes, as a real process on a real port: for end-to-end
tests of what only a cloning engine (a Base checkpoint) does, such as registering voices, and for profiling the
service's own work under load. Settings come from SPEECH_* as usual; SPEECH_OMNI__MODEL names a model directory
written by `speech-make-model-dir`.

    python -m tests.fakes.omni_server [--frames N] [--step-delay-s S] [--orchestrator-busy-ms MS]

`--frames 100 --step-delay-s 0.25` gives every request the shape of the GPU benchmarks: exactly 100 codec frames
(8 s of audio), in code2wav's windows of 1, 25, 25, 25 and 24 frames, one every 250 ms. `--orchestrator-busy-ms 3`
adds what AsyncOmni's orchestrator thread does to this process: 3 ms of GIL-holding Python work every 20 ms
(`--orchestrator-period-ms`) while requests run. SIGUSR1 kills its engine's code2wav stage as vllm-omni 0.30 meets a
stage process's death (`kill_stage`): the requests in flight fail and every later one too, and with none in flight
only the engine's health check says so. With `--stage-process` it also runs a stand-in of vllm-omni's code2wav stage
process (a child whose command line carries the title vllm-omni 0.30 gives that process,
`StageEngineCoreProc_stage1_replica0_DP0`): killing it kills the stage the same way, as `deploy/fleet/fleet.sh
kill-stage` does on a GPU host. `--start-delay-s` makes its engine's start as slow as a GPU's (minutes there): the
AsyncOmni is made that long after the server listens, and the line `making AsyncOmni` is logged as that begins.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from app.cli import SpeechServer, server_config
from app.engines import omni_as_served, omni_engine
from app.logs import configure_logging
from app.server import create_app
from app.settings import Settings
from tests.fakes.vllm_omni_0_30 import (
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.omni_server")
    parser.add_argument("--frames", type=int, help="every request makes exactly this many frames (default: by text)")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="seconds before each window of audio")
    parser.add_argument(
        "--orchestrator-busy-ms", type=float, default=0.0, help="GIL-holding Python work per period while requests run"
    )
    parser.add_argument("--orchestrator-period-ms", type=float, default=20.0)
    parser.add_argument("--stage-process", action="store_true", help="a code2wav stage process whose death kills it")
    parser.add_argument(
        "--start-delay-s", type=float, default=0.0, help="seconds AsyncOmni takes to be made (minutes on a GPU)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings(engine="omni")
    configure_logging(settings.log_level)
    omni = FakeAsyncOmni()
    omni.step_delay_s = args.step_delay_s
    omni.orchestrator_busy_ms, omni.orchestrator_period_ms = args.orchestrator_busy_ms, args.orchestrator_period_ms
    if args.frames is not None:  # as a bench profile fixes stage 0's length: N + 1 tokens make N frames
        talker = omni.default_sampling_params_list[0]
        talker.max_tokens = talker.min_tokens = args.frames + 1

    def made(**_: object) -> FakeAsyncOmni:
        """As vllm-omni's AsyncOmni is made: in a thread of the server's, as slowly as asked."""
        if args.start_delay_s:
            log.info("making AsyncOmni", extra={"delay_s": args.start_delay_s})
            time.sleep(args.start_delay_s)
        return omni

    engine = omni_engine(settings, omni_factory=made)
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)
    app = create_app(settings, engine=omni_as_served(engine, settings))
    # SIGUSR1 stands for vllm-omni's code2wav stage process killed: evicted, as 0.30's orchestrator does (`kill_stage`)
    signal.signal(signal.SIGUSR1, lambda *_: omni.kill_stage(1))
    if args.stage_process:
        title = "StageEngineCoreProc_stage1_replica0_DP0"  # in its command line, where vllm-omni's title shows
        # like vllm-omni's stage processes (set_death_signal), it ends with its parent, a SIGKILLed replica included
        lives = (
            "import ctypes, os, signal, sys, time\n"
            "ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
            "if os.getppid() != int(sys.argv[2]): sys.exit()  # the parent died before the line above\n"
            "while True: time.sleep(3600)"
        )
        stage = subprocess.Popen([sys.executable, "-c", lives, title, str(os.getpid())])
        atexit.register(stage.kill)

        def watch() -> None:  # as AsyncOmni's orchestrator finds its stage's process gone
            stage.wait()
            omni.kill_stage(1)

        threading.Thread(target=watch, daemon=True).start()
    SpeechServer(server_config(app, settings), app.state.lifecycle).run()


if __name__ == "__main__":
    main()
