"""tests/gpu run against a live `speech-server --engine omni` on a GPU host (deploy/gpu/run-gpu-tests.sh).

SPEECH_GPU_URL: a server of a CustomVoice checkpoint; SPEECH_GPU_CLONE_URL: a server of a Base checkpoint. Both run
with SPEECH_OMNI_FIXED_LENGTH=true on random weights, so a request for N tokens returns exactly N - 1 codec frames.
"""

from __future__ import annotations

import os

import pytest


def _url(variable: str) -> str:
    url = os.environ.get(variable)
    if not url:
        pytest.skip(f"{variable} is not set: no omni server to test")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def omni_url() -> str:
    return _url("SPEECH_GPU_URL")


@pytest.fixture(scope="session")
def clone_url() -> str:
    return _url("SPEECH_GPU_CLONE_URL")
