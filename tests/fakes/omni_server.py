"""`speech-server` on the omni engine over the vllm-omni 0.26.0 fakes, as a real process on a real port: for end-to-end
tests of what only a cloning engine (a Base checkpoint) does, such as registering voices. Settings come from SPEECH_*
as usual; SPEECH_MODEL names a model directory written by `speech-make-model-dir`."""

from __future__ import annotations

import uvicorn

from app.cli import SpeechServer
from app.engines import omni_as_served
from app.engines.omni import OmniEngine
from app.logs import configure_logging
from app.server import create_app
from app.settings import Settings
from tests.fakes.vllm_omni_0_26 import (
    FakeAsyncOmni,
    WordTokenizer,
    coerce_param_message_types,
    estimate_prompt_len,
    tokens_input,
)


def main() -> None:
    settings = Settings(engine="omni")
    configure_logging(settings.log_level)
    omni = FakeAsyncOmni()
    engine = OmniEngine(settings, omni_factory=lambda **_: omni)
    defaults = coerce_param_message_types(omni.default_sampling_params_list, True)
    engine.use_helpers(defaults, estimate_prompt_len, WordTokenizer(), tokens_input)
    app = create_app(settings, engine=omni_as_served(engine, settings))
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None)
    SpeechServer(config, app.state.lifecycle).run()


if __name__ == "__main__":
    main()
