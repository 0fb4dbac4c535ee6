"""tests/gpu run against a live `speech-server --engine omni` on a GPU host (deploy/gpu/run-gpu-tests.sh).

SPEECH_GPU_URL: a server of a CustomVoice checkpoint; SPEECH_GPU_CLONE_URL: a server of a Base checkpoint;
SPEECH_GPU_SERVER_LOG: the CustomVoice server's log file, when the tests run on its host. Both servers run
with SPEECH_OMNI__FIXED_LENGTH=true on random weights, so a request for N tokens returns exactly N - 1 codec frames.
SPEECH_GPU_PROFILER_DIR: the CustomVoice server's SPEECH_PROFILER_DIR, readable here (its request timeline's test).
SPEECH_GPU_SENTENCE_TOKENS=N: the CustomVoice server runs the sentence pipeline (SPEECH_OMNI__SENTENCE_PIPELINE=true)
with a copy of its deploy profile whose stage-0 default_sampling_params.max_tokens is N, so that each sentence of a
request without max_new_tokens is N - 1 frames, and logs vllm-omni's request summaries
(SPEECH_OMNI__REQUEST_SUMMARY_LOG=true: its test counts the engine's requests by them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _setting(variable: str, missing: str) -> str:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set: {missing}")
    return value


def _url(variable: str) -> str:
    return _setting(variable, "no omni server to test").rstrip("/")


@pytest.fixture(scope="session")
def omni_url() -> str:
    return _url("SPEECH_GPU_URL")


@pytest.fixture(scope="session")
def clone_url() -> str:
    return _url("SPEECH_GPU_CLONE_URL")


@pytest.fixture(scope="session")
def server_log() -> Path:
    return Path(_setting("SPEECH_GPU_SERVER_LOG", "the server's log is not readable here"))


@pytest.fixture(scope="session")
def sentence_tokens() -> int:
    return int(_setting("SPEECH_GPU_SENTENCE_TOKENS", "the server does not run the sentence pipeline"))
