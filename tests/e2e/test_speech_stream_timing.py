"""WS /v1/audio/speech/stream in time: sentences joined as POST /v1/audio/speech joins them, text paced as an LLM
writes it, and word timestamps checked against Whisper's."""

from __future__ import annotations

import httpx
import numpy as np
from websockets.sync.client import connect

from app.pipeline import LEAD_S, PAUSE_AFTER_SENTENCE_S, SILENCE_THRESHOLD
from loadtest.audio import decode
from tests.e2e.test_speech_stream import receive_utterance, send, ws_url
from tests.support.server import RunningServer

TWO_SENTENCES = "The first sentence ends here. A second one follows it."


def loud(samples: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.abs(samples) >= SILENCE_THRESHOLD)


def longest_silence_s(samples: np.ndarray, rate: int) -> float:
    """The longest run of silence between two sounds."""
    return float(np.diff(loud(samples)).max() - 1) / rate


def test_sentences_of_an_utterance_join_as_over_http(server: RunningServer) -> None:
    """The second sentence is its own engine job, yet the silence between the sentences is the natural pause that
    POST /v1/audio/speech leaves between the same two sentences, not that pause plus the engine's leading silence."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm", "seed": 5})
        send(ws, {"type": "input.text", "text": TWO_SENTENCES})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert events[-1]["total_sentences"] == 2
    first, second = decode(audio[0], "pcm").samples, decode(audio[1], "pcm").samples
    gap_s = (len(first) - loud(first)[-1] - 1 + loud(second)[0]) / 24_000

    body = {"model": "tts-1", "voice": "alloy", "input": TWO_SENTENCES, "response_format": "pcm", "seed": 5}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200
    http_gap_s = longest_silence_s(decode(response.content, "pcm").samples, 24_000)

    print(f"gap between sentences: websocket {gap_s:.3f} s, http {http_gap_s:.3f} s")
    assert gap_s <= PAUSE_AFTER_SENTENCE_S + LEAD_S + 0.03, gap_s
    assert abs(gap_s - http_gap_s) < 0.05, (gap_s, http_gap_s)
