"""Hostile and extreme input against the real server: a schema fuzzer, odd text, the longest text."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest.audio import DecodedAudio, decode, normalise, transcribe, word_error_rate
from tests.support.server import RunningServer


def test_schemathesis_finds_no_server_error(server: RunningServer) -> None:
    """Over a thousand generated requests across every endpoint (valid and invalid): never a 5xx."""
    script = Path(sys.executable).parent / "schemathesis"
    done = subprocess.run(
        [
            str(script),
            "run",
            f"{server.base_url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "-n",
            "1000",
            "--generation-deterministic",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    generated, passed = map(int, re.search(r"(\d+) generated, (\d+) passed", done.stdout).groups())
    assert generated >= 1000 and passed == generated
    assert server.process.poll() is None


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("Hello\u0000 wor\u0007ld, \u001b[31mred\u001b[0m and \u202eright to left\u202c.", 200),
        ("Tabs\tand\r\nnew\nlines\u2028and paragraph\u2029separators.", 200),
        ("Zero\u200bwidth\ufeff joiners and 🎉 emoji.", 200),
        ("\u0000\u0001\u0002", 400),
        ("🎉🎉🎉", 400),
    ],
)
def test_odd_text_never_fails_the_server(server: RunningServer, text: str, status: int) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"},
    )
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["param"] == "input"


def test_lone_surrogates_are_a_400_naming_input(server: RunningServer) -> None:
    raw = b'{"model": "tts-1", "voice": "alloy", "input": "Hello \\ud800 world \\udfff."}'
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"


FIRST = "The old lighthouse stood alone on the northern cliff above the sea."
LAST = "And that is where the story of the lighthouse keeper finally comes to an end."
MIDDLE = (
    "Every evening the keeper climbed the narrow stairs to light the great lamp. Ships far out in the dark water "
    "watched for its steady beam, and sailors said a quiet thank you as they passed. In winter the storms were wild, "
    "and the waves threw spray high against the windows. "
)


def test_long_text_is_spoken_completely(server: RunningServer) -> None:
    text = FIRST + " " + MIDDLE * 13 + LAST
    assert 3000 <= len(text) <= 4096
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=300,
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"},
    )
    assert response.status_code == 200
    audio = decode(response.content, "wav")
    assert audio.duration_s > 150  # about 3500 characters of speech
    head = DecodedAudio(audio.samples[: 6 * audio.sample_rate], audio.sample_rate, 1, "wav")
    tail = DecodedAudio(audio.samples[-7 * audio.sample_rate :], audio.sample_rate, 1, "wav")
    first_words, last_words = len(FIRST.split()), len(LAST.split())
    heard_first = " ".join(normalise(transcribe(head)).split()[:first_words])
    heard_last = " ".join(normalise(transcribe(tail)).split()[-last_words:])
    assert word_error_rate(FIRST, heard_first) <= 0.2, heard_first
    assert word_error_rate(LAST, heard_last) <= 0.2, heard_last  # the very end is there: nothing was dropped


def test_sentences_are_joined_with_natural_pauses(server: RunningServer) -> None:
    """Each join is a pause (the engine's own ~0.7 s of padding trimmed), present but never dragging on."""
    text = " ".join(["This sentence is one of several."] * 6)
    audio = decode(
        httpx.post(
            f"{server.base_url}/v1/audio/speech",
            timeout=60,
            json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"},
        ).content,
        "pcm",
    )
    samples = audio.samples
    gaps = _silent_runs(samples, audio.sample_rate)
    assert len(gaps) >= 5 and max(gaps) < 0.6  # a pause between each pair of sentences, none dragging on


def _silent_runs(samples, rate: int) -> list[float]:
    loud = abs(samples) >= 0.01
    runs, length = [], 0
    for is_loud in loud[int(0.4 * rate) : -int(0.4 * rate)]:
        if is_loud:
            if length > 0.15 * rate:
                runs.append(length / rate)
            length = 0
        else:
            length += 1
    return runs
