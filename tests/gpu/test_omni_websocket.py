"""WS /v1/audio/speech/stream on the real omni engine: text streamed in pieces, spoken sentence by sentence."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from app.text.words import written_words
from loadtest.audio import decode
from tests.gpu.support import SAMPLES_PER_FRAME, model_of

TOKENS = 26  # per sentence -> 25 codec frames = 2.0 s of audio
SENTENCES = ["The first sentence is here.", "A second one follows it.", "And the third one ends it."]
SENTENCE_S = (TOKENS - 1) * SAMPLES_PER_FRAME / 24_000


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://").replace("https://", "wss://") + "/v1/audio/speech/stream"


def send(ws: ClientConnection, message: dict[str, object]) -> None:
    ws.send(json.dumps(message))


def config(omni_url: str, **fields: object) -> dict[str, object]:
    voice = {"model": model_of(omni_url), "voice": "vivian", "max_new_tokens": TOKENS}
    return {"type": "session.config", **voice, **fields}


def receive(ws: ClientConnection) -> list[dict[str, Any] | bytes]:
    """Every message up to session.done (or an error), in order."""
    messages: list[dict[str, Any] | bytes] = []
    while True:
        message = ws.recv(timeout=300)
        messages.append(message if isinstance(message, bytes) else json.loads(message))
        if isinstance(messages[-1], dict) and messages[-1]["type"] in ("session.done", "error"):
            return messages


def stream_three_sentences(ws: ClientConnection) -> list[dict[str, Any] | bytes]:
    """The text in uneven pieces; the first sentence must be spoken before anything past its next word is sent."""
    text = " ".join(SENTENCES)
    head = len(SENTENCES[0]) + 4  # "...here. A s": the next word has begun
    for start in range(0, head, 7):
        send(ws, {"type": "input.text", "text": text[start : min(start + 7, head)]})
    first = json.loads(ws.recv(timeout=300))
    assert first["type"] == "audio.start" and first["sentence_text"] == SENTENCES[0], first
    for start in range(head, len(text), 11):
        send(ws, {"type": "input.text", "text": text[start : start + 11]})
    send(ws, {"type": "input.done"})
    return [first, *receive(ws)]


def sentence_audio(messages: list[dict[str, Any] | bytes], response_format: str) -> list[bytes]:
    """Each sentence's audio, checking the order: audio.start, binary frames, audio.done (total_bytes right), per
    sentence in order, then session.done."""
    audio: list[bytes] = []
    current: bytearray | None = None
    for message in messages:
        if isinstance(message, bytes):
            assert current is not None, "audio outside a sentence"
            current += message
        elif message["type"] == "audio.start":
            assert current is None and message["sentence_index"] == len(audio), message
            assert message["sentence_text"] == SENTENCES[len(audio)] and message["format"] == response_format
            current = bytearray()
        elif message["type"] == "audio.done":
            assert current is not None and message["sentence_index"] == len(audio), message
            assert message["error"] is False and message["total_bytes"] == len(current)
            audio.append(bytes(current))
            current = None
        else:
            assert message == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}, message
    assert current is None and len(audio) == 3
    return audio


@pytest.mark.parametrize("response_format", ["pcm", "opus"])
def test_three_sentences_streamed_in_pieces(omni_url: str, response_format: str) -> None:
    with connect(ws_url(omni_url)) as ws:
        send(ws, config(omni_url, response_format=response_format))
        messages = stream_three_sentences(ws)
        send(ws, {"type": "session.close"})
    padding = 0 if response_format == "pcm" else 0.15  # a codec's priming and padding
    for index, audio in enumerate(sentence_audio(messages, response_format)):
        seconds = decode(audio, response_format).duration_s  # every sentence a file that decodes, never empty
        # each sentence is its own request of TOKENS. The first is passed on whole; a sentence pipeline in front
        # trims the silent edges of the later ones, and random weights speak near-silence (peak about -62 dBFS,
        # measured on an H100): those keep only their lead and pause
        low = SENTENCE_S / 2 if index == 0 else 0.05
        assert low < seconds <= SENTENCE_S + padding, (index, seconds)


def test_word_timestamps_as_the_capabilities_say(omni_url: str) -> None:
    """An omni engine that cannot time words refuses `word_timestamps` in a first session.config (param and code as
    over HTTP) and, as vllm-omni 0.30 does, closes; one that can sends vllm-omni's audio.chunk frames with each
    sentence's words."""
    capable = httpx.get(f"{omni_url}/v1/audio/capabilities", timeout=30).json()["word_timestamps"]
    with connect(ws_url(omni_url)) as ws:
        send(ws, config(omni_url, response_format="pcm", word_timestamps=True))
        if not capable:
            error = json.loads(ws.recv(timeout=60))
            assert (error["type"], error["param"], error["code"]) == ("error", "word_timestamps", "invalid_value")
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=60)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            with connect(ws_url(omni_url)) as again:  # a valid config on a new connection speaks
                send(again, config(omni_url, response_format="pcm"))
                assert len(sentence_audio(stream_three_sentences(again), "pcm")) == 3
            return
        messages = stream_three_sentences(ws)
    assert all(isinstance(m, dict) for m in messages), "word_timestamps: audio travels in JSON frames"
    frames = [m for m in messages if isinstance(m, dict) and m["type"] == "audio.chunk"]
    trailers = [m for m in frames if not m["audio_b64"]]
    assert len(trailers) == 3
    offset_ms = 0.0
    for sentence, trailer in zip(SENTENCES, trailers, strict=True):
        chunks = [m for m in frames if m["audio_b64"] and m["sentence_index"] == trailer["sentence_index"]]
        pcm = b"".join(base64.b64decode(c["audio_b64"]) for c in chunks)
        duration_ms = len(pcm) / 2 / 24
        assert trailer["chunk_end_ms"] == round(duration_ms)
        assert abs(trailer["utterance_offset_ms"] - offset_ms) <= 1
        words = trailer["timestamps"]
        assert [w["word"] for w in words] == written_words(sentence), words
        assert all(0 <= w["start_ms"] <= w["end_ms"] <= trailer["chunk_end_ms"] for w in words), words
        offset_ms += duration_ms
