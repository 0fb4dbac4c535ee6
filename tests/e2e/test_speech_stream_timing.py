"""WS /v1/audio/speech/stream in time: sentences joined as POST /v1/audio/speech joins them, text paced as an LLM
writes it, and word timestamps checked against Whisper's."""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
from typing import Any

import httpx
import numpy as np
import pytest
import websockets.asyncio.client
from websockets.sync.client import ClientConnection, connect

from app.speech.sentences import LEAD_S, PAUSE_AFTER_SENTENCE_S, SILENCE_THRESHOLD
from loadtest.audio import decode, transcribe, word_error_rate
from tests.e2e.test_speech_stream import receive_utterance, send, ws_url
from tests.e2e.test_word_timestamps import TEXT as WORD_TEXT
from tests.e2e.test_word_timestamps import WRITTEN
from tests.support.server import RunningServer
from tests.support.word_timing import assert_words_cover, start_errors_ms

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

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


PACED = (
    "The weather was calm this morning. We walked along the river and watched the small boats drift slowly past the "
    "old stone bridge near the market square. Then everyone went home happily."
)


async def test_text_written_at_20_words_per_second_is_spoken_while_it_is_written(server: RunningServer) -> None:
    """Word by word at 20 words/s, as an LLM writes: the first sentence's audio reaches the client while the second
    sentence is still being written (the client's one log of what it sent and what it received, in order, proves
    it), and the whole utterance is heard as written."""
    words = PACED.split(" ")
    second_ends = words.index("square.")
    log: list[tuple[str, object]] = []  # ("sent", word index) and ("audio" | event type, payload), in order
    pcm = bytearray()
    async with websockets.asyncio.client.connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "pcm"}))

        async def write() -> None:
            for index, word in enumerate(words):
                await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
                log.append(("sent", index))
                await asyncio.sleep(0.05)
            await ws.send(json.dumps({"type": "input.done"}))

        writer = asyncio.create_task(write())
        async for message in ws:
            if isinstance(message, bytes):
                log.append(("audio", len(message)))
                pcm += message
                continue
            event = json.loads(message)
            log.append((event["type"], event))
            if event["type"] in ("session.done", "error"):
                break
        await writer
    kinds = [kind for kind, _ in log]
    assert kinds[-1] == "session.done" and log[-1][1]["total_sentences"] == 3  # type: ignore[index]
    first_start = log[kinds.index("audio.start")][1]
    assert first_start["sentence_text"] == "The weather was calm this morning."  # type: ignore[index]
    first_audio = kinds.index("audio")
    assert first_audio < log.index(("sent", second_ends)), log  # heard before the second sentence was written
    print(f"first audio after word {max(i for k, i in log[:first_audio] if k == 'sent')} of {len(words)}")
    heard = transcribe(decode(bytes(pcm), "pcm"))
    assert word_error_rate(PACED, heard) <= 0.2, heard


def receive_json_utterance(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every message up to session.done: with word_timestamps the audio comes in JSON frames, never binary ones."""
    events = []
    while True:
        message = ws.recv(timeout=60)
        assert isinstance(message, str), "a binary frame although word_timestamps is on"
        events.append(json.loads(message))
        if events[-1]["type"] in ("session.done", "error"):
            return events


def timed_sentences(events: list[dict[str, Any]]) -> list[tuple[bytes, dict[str, Any]]]:
    """Each sentence's audio and its trailing frame, checking vllm-omni's sequence on the way: `audio.start` (with
    word_timestamps), `audio.chunk` frames numbered from 0 with `timestamps` null, each starting where the previous
    one ended, then one `audio.chunk` without audio carrying the words, then `audio.done`."""
    sentences = []
    position = 0
    while events[position]["type"] == "audio.start":
        start = events[position]
        assert start["word_timestamps"] is True
        index = (start["utterance_index"], start["sentence_index"])
        end = next(i for i in range(position + 1, len(events)) if events[i]["type"] == "audio.done")
        chunks, trailer, done = events[position + 1 : end - 1], events[end - 1], events[end]
        assert chunks and all(c["type"] == "audio.chunk" and c["audio_b64"] for c in chunks), chunks
        assert all(c["timestamps"] is None and c["sample_rate"] == start["sample_rate"] for c in chunks)
        assert {(c["utterance_index"], c["sentence_index"]) for c in [*chunks, trailer, done]} == {index}
        assert [c["chunk_id"] for c in [*chunks, trailer]] == list(range(len(chunks) + 1))
        assert [c["chunk_start_ms"] for c in chunks] == [0] + [c["chunk_end_ms"] for c in chunks[:-1]]
        assert trailer["type"] == "audio.chunk" and trailer["audio_b64"] == ""
        assert isinstance(trailer["timestamps"], list) and isinstance(trailer["utterance_offset_ms"], int)
        assert (trailer["chunk_start_ms"], trailer["chunk_end_ms"]) == (0, chunks[-1]["chunk_end_ms"])
        audio = b"".join(base64.b64decode(c["audio_b64"]) for c in chunks)
        assert done["total_bytes"] == len(audio) and done["error"] is False
        sentences.append((audio, trailer))
        position = end + 1
    assert events[position:] == [
        {"type": "session.done", "utterance_index": events[0]["utterance_index"], "total_sentences": len(sentences)}
    ]
    return sentences


def test_word_timestamps_per_sentence_and_in_the_utterance_agree_with_whisper(server: RunningServer) -> None:
    """vllm-omni's timing frames: each sentence's words from its own start; `utterance_offset_ms` places the sentence
    in the utterance, and the words so placed agree with Whisper's hearing of the whole utterance."""
    caps = httpx.get(f"{server.base_url}/v1/audio/capabilities", timeout=10).json()
    assert caps["word_timestamps"] is True
    with connect(ws_url(server)) as ws:
        config = {"type": "session.config", "voice": "alloy", "response_format": "pcm", "word_timestamps": True}
        send(ws, {**config, "seed": 3})
        for word in WORD_TEXT.split(" "):
            send(ws, {"type": "input.text", "text": word + " "})
        send(ws, {"type": "input.done"})
        sentences = timed_sentences(receive_json_utterance(ws))
    assert len(sentences) == 3
    placed = []
    offset_ms = 0.0
    for audio, trailer in sentences:
        duration_ms = len(audio) / 2 / 24
        assert trailer["chunk_end_ms"] == round(duration_ms)  # pcm: the frames' times are the samples'
        assert abs(trailer["utterance_offset_ms"] - offset_ms) <= 1  # the sentences before it, end to end
        assert_words_cover(trailer["timestamps"], decode(audio, "pcm"))  # within the sentence, from its start
        at = trailer["utterance_offset_ms"]
        placed += [{**w, "start_ms": w["start_ms"] + at, "end_ms": w["end_ms"] + at} for w in trailer["timestamps"]]
        offset_ms += duration_ms
    assert [w["word"] for w in placed] == WRITTEN  # as written: "Dr", "$9.99", "7:30"
    utterance = decode(b"".join(audio for audio, _ in sentences), "pcm")
    assert_words_cover(placed, utterance)
    errors = start_errors_ms(placed, utterance)
    print(f"word start vs whisper: median {statistics.median(errors):.0f} ms over {len(errors)} words")
    assert len(errors) >= 15, errors
    assert statistics.median(errors) < 100, errors


def test_word_timestamps_in_a_compressed_format(server: RunningServer) -> None:
    """Every format carries timings here (vllm-omni: pcm only): a sentence's `audio.chunk` frames join into its own
    mp3 file, and the frames' times follow the audio encoded."""
    text = "Compressed audio keeps its timings. Every word still has a place."
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "mp3", "word_timestamps": True})
        send(ws, {"type": "input.text", "text": text})
        send(ws, {"type": "input.done"})
        sentences = timed_sentences(receive_json_utterance(ws))
    assert len(sentences) == 2
    for audio, trailer in sentences:
        decoded = decode(audio, "mp3")
        print(f"mp3 sentence: {decoded.duration_s * 1000:.0f} ms decoded, chunk_end_ms {trailer['chunk_end_ms']}")
        # decoders add the mp3 encoder's delay and the last frame's padding (~50 ms at 24 kHz), never less audio
        assert 0 <= decoded.duration_s * 1000 - trailer["chunk_end_ms"] < 100
        assert 0 < trailer["timestamps"][-1]["end_ms"] <= trailer["chunk_end_ms"]
    words = [w["word"] for _, trailer in sentences for w in trailer["timestamps"]]
    assert words == [w.strip(".") for w in text.split(" ")]
    assert sentences[1][1]["utterance_offset_ms"] == sentences[0][1]["chunk_end_ms"]
