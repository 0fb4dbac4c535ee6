"""Audio streams as it is made: the OpenAI SDK's streaming API, the engine-side proof, and SSE."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
from openai import OpenAI

from loadtest.audio import decode, transcribe, word_error_rate
from tests.support.server import RunningServer

STORY = (
    "Once upon a time there was a small village at the edge of a great forest. "
    "Every morning the baker opened his shop before the sun came up. "
    "The children of the village walked past it on their way to school. "
    "They always stopped to smell the fresh bread through the open window. "
    "One day the baker decided to give each of them a warm roll. "
    "From that day on, the children waved to him every single morning. "
    "The baker said it was the best part of his day. "
    "And that is how the village came to love its baker."
)


def client(server: RunningServer) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key="not-needed", max_retries=0)


def test_openai_sdk_streams_intelligible_speech(server: RunningServer) -> None:
    text = "Hello from the official client. This audio was streamed while it was made."
    chunks: list[bytes] = []
    with client(server).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        assert response.headers["x-accel-buffering"] == "no"  # a proxy in front (nginx) passes each chunk on at once
        chunks.extend(response.iter_bytes())
    assert len(chunks) >= 1
    audio = decode(b"".join(chunks), "wav")
    assert word_error_rate(text, transcribe(audio)) <= 0.2


@pytest.mark.parametrize("response_format", ["mp3", "opus", "pcm"])
def test_openai_sdk_non_streaming_create(server: RunningServer, response_format: str) -> None:
    text = "The plain create call returns the whole file."
    response = client(server).audio.speech.create(
        model="gpt-4o-mini-tts", voice="coral", input=text, response_format=response_format
    )
    audio = decode(response.content, response_format)
    assert word_error_rate(text, transcribe(audio)) <= 0.2


@pytest.mark.timing  # the first byte against the last sentence's synthesis, on one clock
@pytest.mark.parametrize("response_format", ["pcm", "mp3", "opus"])
def test_first_audio_reaches_client_before_last_sentence_is_synthesized(
    server: RunningServer, response_format: str
) -> None:
    """Proven from the engine's own events: the client holds audio bytes before the engine logs the last sentence."""
    request_id = f"stream-proof-{response_format}"
    first_byte_at = None
    received = 0
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": STORY, "response_format": response_format},
        headers={"X-Request-Id": request_id},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-request-id"] == request_id
        for chunk in response.iter_raw():
            if chunk and first_byte_at is None:
                first_byte_at = time.time()
            received += len(chunk)
    assert first_byte_at is not None and received > 0
    events = [e for e in _wait_for_events(server, request_id, 8) if e.get("event") == "sentence_synthesized"]
    assert [e["sentence"] for e in events] == list(range(8))  # the story has eight sentences, synthesized in order
    last_sentence_at = float(events[-1]["at"])
    assert first_byte_at < last_sentence_at, (first_byte_at, last_sentence_at)


def _wait_for_events(server: RunningServer, request_id: str, count: int) -> list[dict[str, object]]:
    """Log lines reach the file a little after the response; wait for them (bounded)."""
    deadline = time.monotonic() + 10
    while True:
        events = [e for e in server.log_events() if e.get("request_id") == request_id]
        if sum(e.get("event") == "sentence_synthesized" for e in events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def parse_sse(body: bytes) -> list[dict[str, object]]:
    events = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert all(line.startswith("data: ") for line in lines), block
        events.append(json.loads("".join(line[len("data: ") :] for line in lines)))
    return events


@pytest.mark.parametrize("response_format", ["pcm", "mp3", "wav"])
def test_sse_event_sequence_and_usage(server: RunningServer, response_format: str) -> None:
    text = "Server sent events carry the audio. Each event holds a piece of it."
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={
            "model": "tts-1",
            "voice": "alloy",
            "input": text,
            "response_format": response_format,
            "stream_format": "sse",
        },
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"
    events = parse_sse(response.content)
    types = [e["type"] for e in events]
    assert types[-1] == "speech.audio.done"
    assert types[:-1] and all(t == "speech.audio.delta" for t in types[:-1])
    usage = events[-1]["usage"]
    assert isinstance(usage, dict)
    assert set(usage) == {"input_tokens", "output_tokens", "total_tokens", "input_token_details"}
    assert usage["input_token_details"] == {"text_tokens": usage["input_tokens"], "audio_tokens": 0}
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio_bytes = b"".join(base64.b64decode(str(e["audio"])) for e in events[:-1])
    audio = decode(audio_bytes, response_format)
    # output tokens are the engine's 12.5 ms acoustic frames, generated; the joins trim some of their silence
    generated_s = usage["output_tokens"] * 0.0125
    assert audio.duration_s <= generated_s + 0.05
    assert generated_s - audio.duration_s < 1.0  # two sentences: at most their padding was trimmed
    assert word_error_rate(text, transcribe(audio)) <= 0.2


def test_sse_sends_deltas_as_sentences_finish(server: RunningServer) -> None:
    deltas_before_done = 0
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": STORY, "response_format": "pcm", "stream_format": "sse"},
        timeout=60,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                if event["type"] == "speech.audio.delta":
                    deltas_before_done += 1
    assert deltas_before_done >= 8  # at least one delta per sentence


def test_client_disconnect_stops_synthesis(server: RunningServer) -> None:
    """A caller who hangs up stops the work: the engine synthesizes far fewer sentences than the text holds."""
    request_id = "hangs-up-early"
    text = " ".join(f"This is sentence number {n} of a long text that nobody will listen to." for n in range(40))
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"},
        headers={"X-Request-Id": request_id},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert next(response.iter_raw())
    deadline = time.monotonic() + 10
    summary: list[dict[str, object]] = []
    while not summary and time.monotonic() < deadline:
        time.sleep(0.05)
        summary = [
            e for e in server.log_events() if e.get("request_id") == request_id and e.get("message") == "speech request"
        ]
    assert summary and summary[0]["completed"] is False
    synthesized = [
        e for e in server.log_events() if e.get("request_id") == request_id and e.get("event") == "sentence_synthesized"
    ]
    assert len(synthesized) < 20
