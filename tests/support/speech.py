"""One request per format against a running service, decoded as a client would."""

from __future__ import annotations

import httpx

from loadtest.audio import decode

FORMATS = ["pcm", "wav", "mp3", "opus", "aac", "flac"]
SENTENCE = "The quick brown fox jumps over the lazy dog."


def assert_speaks(base_url: str, response_format: str) -> None:
    response = httpx.post(
        f"{base_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": SENTENCE, "response_format": response_format},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    audio = decode(response.content, response_format)
    assert audio.channels == 1
    assert 1.5 < audio.duration_s < 6.0, audio.duration_s  # nine words of speech
