"""EncodedAudio and the SSE framing: usage, the close hook, and errors after the stream has started."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from app.api.audio_stream import StreamCut, audio_body, sse_events
from app.api.errors import to_api_error
from app.api.schemas import SpeechUsage
from app.engine_protocol import AudioChunk, EngineUnavailable
from app.speech.encoding import EncodedAudio
from app.speech.errors import Stopped
from app.text.words import WordTiming


def tone(seconds: float, rate: int = 24_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


async def chunks(
    count: int, fail_after: int | None = None, error: Exception | None = None
) -> AsyncIterator[AudioChunk]:
    for index in range(count):
        if fail_after is not None and index == fail_after:
            raise error or RuntimeError("engine exploded")
        yield AudioChunk(tone(0.6), 24_000, input_tokens=10, output_tokens=48)


class CloseRecorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, outcome: str) -> None:
        self.calls.append(outcome)


def parse(events: list[bytes]) -> list[dict]:
    return [json.loads(e.decode().removeprefix("data: ").strip()) for e in events]


async def test_pcm_bytes_usage_and_close_hook() -> None:
    rest = chunks(3)
    first = await anext(rest)
    closed = CloseRecorder()
    audio = EncodedAudio(first, rest, "pcm", 24_000, closed)
    data = b"".join([piece async for piece in audio.bytes()])
    assert len(data) == 3 * int(0.6 * 24_000) * 2
    # vllm-omni 0.30's SpeechTokenUsage: the input split into text and reference-audio tokens
    assert SpeechUsage.of(audio.usage).model_dump() == {
        "input_tokens": 30,
        "output_tokens": 144,
        "total_tokens": 174,
        "input_token_details": {"text_tokens": 30, "audio_tokens": 0},
    }
    assert closed.calls == ["completed"]


@pytest.mark.parametrize("response_format", ["pcm", "wav"])
async def test_a_plain_body_takes_each_chunk_in_one_write_with_the_same_bytes_as_sse(response_format: str) -> None:
    """pcm and wav at the engine's rate are converted on the event loop: a plain body gets one write per chunk
    instead of one per quarter second, SSE keeps its quarter-second events, and the audio is the same bytes."""
    rest = chunks(3)
    plain = [
        piece async for piece in EncodedAudio(await anext(rest), rest, response_format, 24_000, CloseRecorder()).bytes()
    ]
    rest = chunks(3)
    audio = EncodedAudio(await anext(rest), rest, response_format, 24_000, CloseRecorder())
    deltas = [e["audio"] for e in parse([event async for event in sse_events(audio, "r")]) if "audio" in e]
    assert len(plain) == 3
    assert len(deltas) == 3 * 3  # 0.6 s chunks in 0.25 s slices, as before
    header = 44 if response_format == "wav" else 0
    assert b"".join(plain) == b"".join(base64.b64decode(d) for d in deltas)
    assert len(b"".join(plain)) == header + 3 * int(0.6 * 24_000) * 2


async def test_resampled_output_length() -> None:
    rest = chunks(2)
    audio = EncodedAudio(await anext(rest), rest, "pcm", 16_000, CloseRecorder())
    data = b"".join([piece async for piece in audio.bytes()])
    assert abs(len(data) // 2 - int(1.2 * 16_000)) <= 32


async def test_error_mid_stream_propagates_for_plain_audio() -> None:
    rest = chunks(3, fail_after=1)
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, closed)
    received: list[bytes] = []
    with pytest.raises(RuntimeError, match="engine exploded"):
        async for piece in audio.bytes():
            received.append(piece)
    assert received  # the first chunk went out before the failure
    assert closed.calls == ["error"]


async def test_sse_error_event_after_stream_started() -> None:
    rest = chunks(3, fail_after=1)
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "mp3", 24_000, closed)
    events = parse([event async for event in sse_events(audio, "req-1")])
    assert events[0]["type"] == "speech.audio.delta"
    assert base64.b64decode(events[0]["audio"])
    assert events[-1]["type"] == "error"
    assert set(events[-1]["error"]) == {"message", "type", "param", "code"}
    assert "req-1" in events[-1]["error"]["message"]
    assert "Traceback" not in json.dumps(events[-1])
    assert all(e["type"] != "speech.audio.done" for e in events)
    assert closed.calls == ["error"]


async def test_an_engine_that_dies_mid_stream_is_engine_unavailable_in_sse() -> None:
    """The same error a request gets before its first audio when the engine is gone (503 engine_unavailable), as the
    stream's last event: a client can tell a dead engine (retry elsewhere or later) from a server fault."""
    died = EngineUnavailable("the vllm-omni engine died: EngineCore encountered an issue")
    rest = chunks(3, fail_after=1, error=died)
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, closed)
    events = parse([event async for event in sse_events(audio, "req-3")])
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "error"
    error = events[-1]["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", "engine_unavailable", None)
    assert "the vllm-omni engine died" in error["message"] and "Retry" in error["message"]
    assert closed.calls == ["error"]


async def test_an_engine_that_dies_mid_stream_cuts_a_plain_body() -> None:
    """Plain audio cannot carry an error after its first byte: the body is cut (the client reads an incomplete
    response), as for a stream the server stops, not raised as a fault of the server's own."""
    rest = chunks(3, fail_after=1, error=EngineUnavailable("the vllm-omni engine died"))
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, closed)
    received: list[bytes] = []
    with pytest.raises(StreamCut) as cut:
        async for piece in audio_body(audio):
            received.append(piece)
    assert received and cut.value.reason == "engine_unavailable"
    assert closed.calls == ["error"]


async def test_sse_done_event_carries_usage() -> None:
    rest = chunks(2)
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, CloseRecorder())
    events = parse([event async for event in sse_events(audio, "req-2")])
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    assert events[-1]["usage"] == {
        "input_tokens": 20,
        "output_tokens": 96,
        "total_tokens": 116,
        "input_token_details": {"text_tokens": 20, "audio_tokens": 0},
    }
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2 * int(0.6 * 24_000) * 2


async def test_consumer_leaving_early_runs_close_hook_with_not_completed() -> None:
    rest = chunks(5)
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, closed)
    stream = audio.bytes()
    assert await anext(stream)
    await stream.aclose()  # what Starlette does when the client disconnects
    assert closed.calls == ["client_gone"]


async def slow_chunks(count: int, delay_s: float) -> AsyncIterator[AudioChunk]:
    for _ in range(count):
        await asyncio.sleep(delay_s)
        yield AudioChunk(tone(0.2), 24_000)


async def test_deadline_ends_the_stream_as_timeout() -> None:
    rest = slow_chunks(50, 0.05)
    closed = CloseRecorder()
    deadline = asyncio.get_running_loop().time() + 0.3
    audio = EncodedAudio(await anext(rest), rest, "mp3", 24_000, closed, deadline)
    events = parse([event async for event in sse_events(audio, "req-3")])
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "timeout"
    assert 1 <= len(events) - 1 < 49  # some audio went out, not all of it
    assert closed.calls == ["timeout"]


async def test_the_deadline_does_not_count_the_time_a_listener_takes_to_read_its_audio() -> None:
    """A client that reads as it plays holds the stream for as long as the audio lasts: that time is not the
    engine's, so it does not count against the deadline (up to the audio handed out: a client reading slower than
    real time still meets it). Here the engine needs 0.2 s in all, the reader 4 s: its 4 s of audio in real time."""
    rest = slow_chunks(20, 0.01)
    closed = CloseRecorder()
    deadline = asyncio.get_running_loop().time() + 1.0
    audio = EncodedAudio(await anext(rest), rest, "pcm", 24_000, closed, deadline)
    pieces = 0
    async for _ in audio.bytes():
        pieces += 1
        await asyncio.sleep(0.2)
    assert pieces == 20 and closed.calls == ["completed"]


async def test_the_deadline_counts_the_time_spent_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own encoding is no client reading: a whole mp3 file whose engine is fast but whose encoder
    takes longer than the deadline ends as a timeout, as a pcm file past it does (the encoder's time was credited as
    a listener's, up to the audio's length: a long whole file ran to three times the timeout)."""
    convert = EncodedAudio._convert

    def slow_convert(self: EncodedAudio, samples: np.ndarray, sample_rate: int) -> bytes:
        time.sleep(0.1)  # a busy encoder: FFmpeg beside the engine's threads
        return convert(self, samples, sample_rate)

    monkeypatch.setattr(EncodedAudio, "_convert", slow_convert)
    rest = chunks(8)  # 8 x 0.6 s of audio at once: 24 slices to encode, 2.4 s of encoding
    closed = CloseRecorder()
    deadline = asyncio.get_running_loop().time() + 0.5
    audio = EncodedAudio(await anext(rest), rest, "mp3", 24_000, closed, deadline, whole_file=True)
    with pytest.raises(Stopped):
        async for _ in audio.bytes():
            pass
    assert closed.calls == ["timeout"]


async def test_stop_ends_a_waiting_stream_at_once() -> None:
    rest = slow_chunks(3, 30.0)  # an engine that would keep the stream waiting for half a minute
    closed = CloseRecorder()
    audio = EncodedAudio(AudioChunk(tone(0.2), 24_000), rest, "pcm", 24_000, closed)
    stream = audio.bytes()
    assert await anext(stream)
    asyncio.get_running_loop().call_later(0.05, audio.stop, "drain")
    started = asyncio.get_running_loop().time()
    with pytest.raises(Stopped) as info:
        await anext(stream)
    assert info.value.reason == "drain" and to_api_error(info.value).status == 503
    assert asyncio.get_running_loop().time() - started < 1.0
    assert closed.calls == ["drain"]


async def test_a_stop_ends_a_stream_whose_engine_is_ahead_after_the_slice_being_read() -> None:
    """A drain's stop ends the stream after the slice its client is reading, also where the engine's chunks are
    already waiting (it is ahead of a client that reads in real time): a waiting chunk was taken before the stop, and
    a chunk's slices were all sent, so a stopped stream played on for as long as the engine had run ahead."""
    rest = chunks(10)  # 10 x 0.6 s of audio, all ready: each chunk is three slices of mp3
    closed = CloseRecorder()
    audio = EncodedAudio(await anext(rest), rest, "mp3", 24_000, closed)
    sent = 0
    with pytest.raises(Stopped) as info:
        async for _ in audio.bytes():
            sent += 1
            if sent == 1:
                audio.stop("drain")
    assert info.value.reason == "drain" and sent == 1 and closed.calls == ["drain"]


async def test_an_engine_that_returns_early_after_a_stop_is_not_completed() -> None:
    async def obedient() -> AsyncIterator[AudioChunk]:
        yield AudioChunk(tone(0.2), 24_000)
        # an engine told to stop simply ends its stream

    closed = CloseRecorder()
    audio = EncodedAudio(AudioChunk(tone(0.2), 24_000), obedient(), "pcm", 24_000, closed)
    audio.stop("drain")
    with pytest.raises(Stopped):
        async for _ in audio.bytes():
            pass
    assert closed.calls == ["drain"]


async def test_a_thread_that_encodes_after_the_stream_closed_is_a_no_op() -> None:
    """A worker thread can reach the encoder after the stream closed it (a client that just left): nothing happens,
    instead of FFmpeg touching a closed container."""
    rest = chunks(2)
    audio = EncodedAudio(await anext(rest), rest, "mp3", 24_000, CloseRecorder())
    audio._close_encoder()
    assert audio._convert(tone(0.3), 24_000) == b""
    assert audio._finish() == b""
    await rest.aclose()


@pytest.mark.parametrize(
    ("response_format", "whole_file", "lead_s"),
    [
        ("pcm", False, 0.0),
        ("opus", False, 0.0),
        ("mp3", False, 1105 / 24_000),  # a stream carries no header that tells the decoder to trim LAME's delay
        ("mp3", True, 0.0),  # a whole file's does
        ("aac", False, 1024 / 24_000),  # ADTS has no field for it
        ("aac", True, 1024 / 24_000),
    ],
)
async def test_words_are_timed_as_a_player_plays_the_format(
    response_format: str, whole_file: bool, lead_s: float
) -> None:
    """A decoder of mp3 (a stream) or aac plays the encoder's delay before the audio (tests/unit/test_encoder_lead.py
    measures it): each word is timed that much later, so that captions keep time with what is heard."""

    async def worded() -> AsyncIterator[AudioChunk]:
        yield AudioChunk(tone(0.6), 24_000, words=(WordTiming("hello", 0.1, 0.4),))
        yield AudioChunk(tone(0.6), 24_000, words=(WordTiming("there", 0.0, 0.5),))

    rest = worded()
    audio = EncodedAudio(await anext(rest), rest, response_format, 24_000, CloseRecorder(), whole_file=whole_file)
    words = [w for item in [i async for i in audio.events()] if isinstance(item, list) for w in item]
    assert [(w.word, w.start_s, w.end_s) for w in words] == [
        ("hello", pytest.approx(0.1 + lead_s), pytest.approx(0.4 + lead_s)),
        ("there", pytest.approx(0.6 + lead_s), pytest.approx(1.1 + lead_s)),
    ]
    # a WebSocket sentence's words stay as synthesized, beside its trailing words and its length
    rest = worded()
    audio = EncodedAudio(
        await anext(rest), rest, response_format, 24_000, CloseRecorder(), whole_file=whole_file, words_as_played=False
    )
    words = [w for item in [i async for i in audio.events()] if isinstance(item, list) for w in item]
    assert [(w.start_s, w.end_s) for w in words] == [(pytest.approx(0.1), pytest.approx(0.4)), (0.6, 1.1)]
