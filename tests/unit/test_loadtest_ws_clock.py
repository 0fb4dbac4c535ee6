"""`speech-loadtest --ws`'s clock and error handling against a scripted WebSocket server in the same process (so
the server's and the client's clocks are one): TTFA counts from the send of the word that completed the first
sentence, the silence between sentences is what the server's timing leaves, audio that comes as JSON `audio.chunk`
frames (word_timestamps) is clocked as binary frames are, and every way an utterance can fail is one counted error,
never a hang or a crash."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.server import ServerConnection, serve

from loadtest.targets import Target
from loadtest.ws import measure_utterance

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

RATE = 24_000
TEXT = "One two three. Four five six."
TOKENS_PER_S = 5.0
SYNTHESIS_S = 0.2  # the scripted server's "synthesis": from the next word to the sentence's first audio
SECOND_SENTENCE_AFTER_S = 1.0  # and from input.done to the second sentence's audio

Handler = Callable[[ServerConnection], Awaitable[None]]


@dataclass
class Log:
    """When the scripted server received each text piece and sent each sentence's first audio (perf_counter)."""

    pieces: list[tuple[float, str]] = field(default_factory=list)
    audio_sent: list[float] = field(default_factory=list)
    config: dict[str, object] = field(default_factory=dict)
    closed_by_client: bool = False
    chunk_frames: bool = False  # audio as word_timestamps' JSON audio.chunk frames, each sentence's words after it


def pcm(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


def audio_chunk(index: int, chunk_id: int, data: bytes, words: list[str] | None = None) -> str:
    """The endpoint's `audio.chunk` frame: a piece of audio, or (words given) the sentence's trailing frame."""
    frame = {"type": "audio.chunk", "utterance_index": 0, "sentence_index": index, "chunk_id": chunk_id,
             "chunk_start_ms": 0, "chunk_end_ms": 0, "sample_rate": RATE, "audio_b64": base64.b64encode(data).decode(),
             "timestamps": None}  # fmt: skip
    if words is not None:
        frame |= {"utterance_offset_ms": 0, "timestamps": [{"word": w, "start_ms": 0, "end_ms": 1} for w in words]}
    return json.dumps(frame)


async def sentence(
    ws: ServerConnection, index: int, text: str, audio: bytes, log: Log, pause_after_first_s: float = 0.0
) -> None:
    await ws.send(json.dumps({"type": "audio.start", "utterance_index": 0, "sentence_index": index,
                              "sentence_text": text, "format": "pcm", "sample_rate": RATE}))  # fmt: skip
    log.audio_sent.append(time.perf_counter())
    pieces = [audio[offset : offset + 9600] for offset in range(0, len(audio), 9600)]
    for chunk_id, piece in enumerate(pieces):
        await ws.send(audio_chunk(index, chunk_id, piece) if log.chunk_frames else piece)
        if chunk_id == 0 and pause_after_first_s:
            await asyncio.sleep(pause_after_first_s)
    if log.chunk_frames:
        await ws.send(audio_chunk(index, len(pieces), b"", text.rstrip(".").split()))
    await ws.send(json.dumps({"type": "audio.done", "utterance_index": 0, "sentence_index": index,
                              "total_bytes": len(audio), "error": False}))  # fmt: skip


def speaking_server(log: Log, first_audio_s: float = 0.5, drop_second: bool = False) -> Handler:
    """Like the real endpoint: the first sentence is spoken once the next word has begun, the rest at input.done."""

    async def handler(ws: ServerConnection) -> None:
        log.config = json.loads(await ws.recv())
        spoken = False
        async for message in ws:
            event = json.loads(message)
            if event["type"] == "input.text":
                log.pieces.append((time.perf_counter(), event["text"]))
                if not spoken and event["text"].startswith("Four"):
                    spoken = True
                    await asyncio.sleep(SYNTHESIS_S)
                    await sentence(ws, 0, "One two three.", pcm(first_audio_s), log)
            elif event["type"] == "input.done":
                total = 1
                if not drop_second:
                    await asyncio.sleep(SECOND_SENTENCE_AFTER_S)
                    await sentence(ws, 1, "Four five six.", pcm(0.5), log)
                    total = 2
                await ws.send(json.dumps({"type": "session.done", "utterance_index": 0, "total_sentences": total}))
            elif event["type"] == "session.close":
                log.closed_by_client = True
                await ws.close(1000)

    return handler


@contextlib.asynccontextmanager
async def scripted(handler: Handler) -> AsyncIterator[Target]:
    """The handler served on a free loopback port, for as long as the block runs (on the test's own loop)."""
    async with serve(handler, "127.0.0.1", 0) as running:
        port = next(iter(running.sockets)).getsockname()[1]
        yield Target(0, f"http://127.0.0.1:{port}", "m", "v", {"Authorization": "Bearer k"}, {"speed": 1.0})


@pytest.mark.parametrize("chunk_frames", [False, True], ids=["binary", "audio.chunk"])
async def test_ttfa_counts_from_the_word_that_completed_the_first_sentence(chunk_frames: bool) -> None:
    log = Log(chunk_frames=chunk_frames)
    async with scripted(speaking_server(log)) as target:
        result = await measure_utterance(target, TEXT, "pcm", TOKENS_PER_S, keep_audio=True)
        await asyncio.sleep(0.05)
    assert result.ok, result
    assert log.config == {"type": "session.config", "model": "m", "voice": "v", "response_format": "pcm", "speed": 1.0}
    assert "".join(piece for _, piece in log.pieces) == TEXT  # word by word, nothing lost
    assert [piece for _, piece in log.pieces] == ["One ", "two ", "three. ", "Four ", "five ", "six."]
    three_at = log.pieces[2][0]  # "three. " ends the first sentence; "Four " (one token later) makes it certain
    assert log.pieces[3][0] - three_at == pytest.approx(1 / TOKENS_PER_S, abs=0.05)  # sent on schedule
    floor = log.audio_sent[0] - three_at  # the client sent "three. " before, and saw audio after, these instants
    assert floor >= SYNTHESIS_S + 1 / TOKENS_PER_S - 0.05
    assert result.ttfa_s is not None and floor <= result.ttfa_s <= floor + 0.05  # counted from "Four " it'd be 0.2
    assert result.first_sentence_sent_s == pytest.approx(2 / TOKENS_PER_S, abs=0.05)
    assert result.text_send_s == pytest.approx(5 / TOKENS_PER_S, abs=0.1)
    assert result.sentences == 2 and result.samples == RATE and result.audio_s == 1.0
    assert result.status == 101 and result.connect_s is not None and result.connect_s < result.first_sentence_sent_s
    # the listener: 0.5 s of sentence 0 from its arrival, then silence until sentence 1's audio
    heard_gap = log.audio_sent[1] - log.audio_sent[0] - 0.5
    assert heard_gap > 0.5
    assert result.gaps_s == [pytest.approx(heard_gap, abs=0.05)]
    assert result.stalls == 0
    assert result.sentence_audio == [pcm(0.5), pcm(0.5)]
    assert result.timestamped_sentences == (2 if chunk_frames else 0)
    assert log.closed_by_client  # session.close after session.done


async def test_audio_chunk_frames_are_heard_when_each_arrives() -> None:
    """A sentence whose second audio.chunk frame comes 0.5 s after its first (0.2 s of audio): the listener stalls
    for the difference, as it would on binary frames."""

    async def pausing(ws: ServerConnection) -> None:
        await ws.recv()
        async for message in ws:
            if json.loads(message)["type"] == "input.done":
                await sentence(ws, 0, "Hello there.", pcm(0.4), Log(chunk_frames=True), pause_after_first_s=0.5)
                await ws.send(json.dumps({"type": "session.done", "utterance_index": 0, "total_sentences": 1}))

    async with scripted(pausing) as target:
        result = await measure_utterance(target, "Hello there.", "pcm", 50.0, keep_audio=True)
    assert result.ok, result
    assert result.sentence_audio == [pcm(0.4)] and result.bytes == len(pcm(0.4))
    assert result.stalls == 1 and result.stalled_s == pytest.approx(0.3, abs=0.05)
    assert (result.sentences, result.timestamped_sentences) == (1, 1)


async def test_audio_that_outlasts_the_wait_leaves_no_gap() -> None:
    async with scripted(speaking_server(Log(), first_audio_s=3.0)) as target:
        result = await measure_utterance(target, TEXT, "pcm", TOKENS_PER_S, keep_audio=False)
    assert result.ok, result
    assert result.gaps_s == [0.0] and result.sentence_audio is None


async def test_a_sentence_lost_on_the_way_is_an_error() -> None:
    async with scripted(speaking_server(Log(), drop_second=True)) as target:
        result = await measure_utterance(target, TEXT, "pcm", 50.0, keep_audio=False)
    assert (result.ok, result.error_code) == (False, "text_mismatch")
    assert "Four five six" in (result.error_message or "")


def refusing_server(log: Log, close_code: int | None, error: dict[str, object] | None) -> Handler:
    async def handler(ws: ServerConnection) -> None:
        log.config = json.loads(await ws.recv())
        if error is not None:
            await ws.send(json.dumps({"type": "error", **error}))
        if close_code is not None:
            await ws.close(close_code)
            return
        async for message in ws:
            log.pieces.append((time.perf_counter(), json.loads(message).get("text", "")))

    return handler


@pytest.mark.parametrize(
    ("close_code", "error", "code"),
    [
        (None, {"code": "voice_not_found", "message": "No voice 'v'.", "param": "voice"}, "voice_not_found"),
        (1013, {"code": "rate_limit_exceeded", "message": "Full.", "retry_after": 1}, "rate_limit_exceeded"),
        (1011, None, "connection_closed_1011"),
        (1000, None, "connection_closed_1000"),
    ],
)
async def test_a_refused_utterance_is_one_error_and_stops_its_text(
    close_code: int | None, error: dict[str, object] | None, code: str
) -> None:
    log = Log()
    async with scripted(refusing_server(log, close_code, error)) as target:
        started = time.perf_counter()
        result = await measure_utterance(target, "word " * 100, "pcm", 20.0, keep_audio=False, timeout_s=30)
    assert (result.ok, result.status, result.error_code) == (False, 101, code)
    if error is not None:
        assert result.error_message == error["message"]
    assert time.perf_counter() - started < 2.0  # not the 5 s the text would take
    # the text's schedule counts from the request, so the words already due when the client first sends (all the
    # first 0.3 s of them where a busy machine was that slow to connect) go out at once, before its reader has had a
    # turn to see the error; after that it sends at most one more
    due_at_first_send = int((log.pieces[0][0] - started) * 20.0) + 1 if log.pieces else 0
    assert len(log.pieces) <= due_at_first_send + 2, (due_at_first_send, log.pieces)


async def test_a_silent_server_times_out() -> None:
    async def silent(ws: ServerConnection) -> None:
        async for _ in ws:
            pass

    async with scripted(silent) as target:
        result = await measure_utterance(target, "Hello.", "pcm", 20.0, keep_audio=False, timeout_s=0.5)
    assert (result.ok, result.error_code) == (False, "timeout")
    assert result.e2e_s == pytest.approx(0.5, abs=0.2)


async def test_a_broken_sequence_is_a_protocol_error() -> None:
    async def wrong_count(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "audio.start", "sentence_index": 0, "sentence_text": "Hello.",
                                  "sample_rate": RATE}))  # fmt: skip
        await ws.send(pcm(0.1))
        await ws.send(json.dumps({"type": "audio.done", "sentence_index": 0, "total_bytes": 1}))
        await ws.wait_closed()

    async with scripted(wrong_count) as target:
        result = await measure_utterance(target, "Hello.", "pcm", 20.0, keep_audio=False, timeout_s=10)
    assert (result.ok, result.error_code) == (False, "protocol_error")
    assert "1 bytes" in (result.error_message or "")


async def test_an_audio_chunk_that_is_not_base64_is_a_protocol_error() -> None:
    async def garbled(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "audio.start", "sentence_index": 0, "sentence_text": "Hello.",
                                  "sample_rate": RATE}))  # fmt: skip
        await ws.send(json.dumps({"type": "audio.chunk", "sentence_index": 0, "audio_b64": "not base64!"}))
        await ws.wait_closed()

    async with scripted(garbled) as target:
        result = await measure_utterance(target, "Hello.", "pcm", 20.0, keep_audio=False, timeout_s=10)
    assert (result.ok, result.error_code) == (False, "protocol_error")
    assert "audio_b64" in (result.error_message or "")


async def test_no_server_is_an_error_not_a_crash() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await measure_utterance(Target(0, f"http://127.0.0.1:{port}"), "Hi.", "pcm", 20.0, keep_audio=False)
    assert (result.ok, result.status) == (False, 0)
    assert result.error_code is not None and result.error_code.startswith("client_")


async def test_a_handshake_refused_over_http_keeps_its_status() -> None:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    async def no_upgrade(ws: ServerConnection) -> None:  # never reached
        raise AssertionError

    def refuse(connection: ServerConnection, request: object) -> Response:
        return Response(403, "Forbidden", Headers(), b'{"error": "no"}')

    async with serve(no_upgrade, "127.0.0.1", 0, process_request=refuse) as running:
        port = next(iter(running.sockets)).getsockname()[1]
        result = await measure_utterance(Target(0, f"http://127.0.0.1:{port}"), "Hi.", "pcm", 20.0, keep_audio=False)
    assert (result.ok, result.status, result.error_code) == (False, 403, "handshake_403")
    assert result.error_message == '{"error": "no"}'
