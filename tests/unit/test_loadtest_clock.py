"""The load tool's clock against a local server that controls exactly when each byte leaves."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import av
import httpx
import numpy as np
import pytest

from app.audio.encoders import create_encoder
from loadtest import runner
from loadtest.cli import KEEPALIVE_EXPIRY_S, build_targets, http_client, parse_args, pool_concurrency
from loadtest.measure import measure, wav_payload_offset
from loadtest.runner import RunPlan, run_concurrency_sweep
from loadtest.stats import ratio, summarize
from loadtest.targets import Target, normalise_url, parse_header

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

RATE = 24_000
FIRST_AUDIO_DELAY_S = 0.3


def wav_header() -> bytes:
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, RATE, RATE * 2, 2, 16)
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )


def pcm(seconds: float) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 200 * t) * 32767).astype("<i2").tobytes()


Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def respond(writer: asyncio.StreamWriter, status: str, content_type: str) -> None:
    writer.write(f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n".encode())
    await writer.drain()


class Receipt:
    """Lets a test server wait until the client has received what was sent so far, so that the next bytes leave a
    known time after the client saw the last ones: the gaps the client measures are then the server's sleeps however
    late a busy machine runs the client. The client is `receipt.client()`; the server awaits `receipt.seen(n)`."""

    def __init__(self) -> None:
        self.received = 0
        self._changed = asyncio.Event()

    async def seen(self, total: int) -> None:
        """Until the client has taken `total` bytes of the response body (before it acts on them)."""
        while self.received < total:
            self._changed.clear()
            await self._changed.wait()

    def client(self) -> httpx.AsyncClient:
        receipt = self

        class Counted(httpx.AsyncByteStream):
            def __init__(self, inner: httpx.AsyncByteStream) -> None:
                self.inner = inner

            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in self.inner:
                    receipt.received += len(chunk)
                    receipt._changed.set()
                    yield chunk  # the client acts on it before the server's task can run again

            async def aclose(self) -> None:
                await self.inner.aclose()

        class Transport(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                response = await super().handle_async_request(request)
                assert isinstance(response.stream, httpx.AsyncByteStream)
                return httpx.Response(
                    response.status_code,
                    headers=response.headers,
                    stream=Counted(response.stream),
                    extensions=response.extensions,
                )

        return httpx.AsyncClient(transport=Transport())


SECOND_AUDIO_GAP_S = 0.1


def wav_server(receipt: Receipt) -> Handler:
    """Sends the WAV header at once, 0.9 s of audio after FIRST_AUDIO_DELAY_S, and 0.1 s more SECOND_AUDIO_GAP_S
    after the client received the first audio."""

    async def handler(writer: asyncio.StreamWriter) -> None:
        await respond(writer, "200 OK", "audio/wav")
        await send_chunk(writer, wav_header())
        await asyncio.sleep(FIRST_AUDIO_DELAY_S)
        first = pcm(0.9)
        await send_chunk(writer, first)
        await receipt.seen(len(wav_header()) + len(first))
        await asyncio.sleep(SECOND_AUDIO_GAP_S)
        await send_chunk(writer, pcm(0.1))
        await send_chunk(writer, b"")  # the last chunk

    return handler


async def sse_server(writer: asyncio.StreamWriter) -> None:
    """An SSE stream whose first delta carries only a WAV header; audio comes after FIRST_AUDIO_DELAY_S."""
    await respond(writer, "200 OK", "text/event-stream")

    def event(payload: dict[str, object]) -> bytes:
        return f"data: {json.dumps(payload)}\n\n".encode()

    await send_chunk(writer, event({"type": "speech.audio.delta", "audio": base64.b64encode(wav_header()).decode()}))
    await asyncio.sleep(FIRST_AUDIO_DELAY_S)
    await send_chunk(writer, event({"type": "speech.audio.delta", "audio": base64.b64encode(pcm(0.75)).decode()}))
    await send_chunk(writer, event({"type": "speech.audio.done", "usage": {}}))
    await send_chunk(writer, b"")


GAP_S = 0.5


def gapped_pcm_server(receipt: Receipt) -> Handler:
    """0.2 s of pcm, then nothing for GAP_S after the client received it, then 0.2 s more: a listener from the first
    byte waits GAP_S - 0.2 s."""

    async def handler(writer: asyncio.StreamWriter) -> None:
        await respond(writer, "200 OK", "audio/pcm")
        first = pcm(0.2)
        await send_chunk(writer, first)
        await receipt.seen(len(first))
        await asyncio.sleep(GAP_S)
        await send_chunk(writer, pcm(0.2))
        await send_chunk(writer, b"")

    return handler


async def test_a_gap_longer_than_the_audio_in_hand_is_a_stall(serve) -> None:
    receipt = Receipt()
    url = await serve(gapped_pcm_server(receipt))
    async with receipt.client() as client:
        result = await measure(client, target(url), "text", "pcm", "audio", keep_audio=False)
    assert result.ok, result
    assert result.playback_start_s == result.ttfa_s
    assert result.stalls == 1
    # at least the gap the server made; later only by as much as a busy machine delays the second read
    assert result.stalled_s is not None and GAP_S - 0.2 - 0.01 <= result.stalled_s <= GAP_S - 0.2 + 1.0


async def test_a_jitter_buffer_holding_the_whole_clip_hears_no_stall(serve) -> None:
    receipt = Receipt()
    url = await serve(gapped_pcm_server(receipt))
    async with receipt.client() as client:
        result = await measure(client, target(url), "text", "pcm", "audio", keep_audio=False, playback_buffer_s=1.0)
    assert result.ok, result
    assert result.ttfa_s is not None and result.playback_start_s is not None
    assert result.playback_start_s >= result.ttfa_s + GAP_S  # it waited for the rest of the clip
    assert (result.stalls, result.stalled_s) == (0, 0.0)


async def refusing_server(writer: asyncio.StreamWriter) -> None:
    body = json.dumps(
        {"error": {"message": "no", "type": "invalid_request_error", "param": "voice", "code": "voice_not_found"}}
    ).encode()
    writer.write(
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _serve(handler: Handler) -> AsyncIterator[str]:
    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        headers = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length")),
            0,
        )
        await reader.readexactly(length)
        await handler(writer)
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
async def serve():
    servers = []

    async def start(handler: Handler) -> str:
        generator = _serve(handler)
        servers.append(generator)
        return await anext(generator)

    yield start
    for generator in servers:
        await generator.aclose()


def target(url: str) -> Target:
    return Target(0, url, model="m", voice="v")


async def test_ttfa_starts_after_the_wav_header(serve) -> None:
    receipt = Receipt()
    url = await serve(wav_server(receipt))
    async with receipt.client() as client:
        result = await measure(client, target(url), "text", "wav", "audio", keep_audio=False)
    assert result.ok, result
    assert result.ttfa_s is not None and result.e2e_s is not None
    assert result.ttfa_s >= FIRST_AUDIO_DELAY_S  # the header arrived at once but is not audio
    assert result.e2e_s >= result.ttfa_s + SECOND_AUDIO_GAP_S - 0.01  # taken at the first audio, not at the end
    assert result.samples == RATE and result.sample_rate == RATE
    assert result.audio_s == pytest.approx(result.samples / result.sample_rate)
    assert result.rtf == pytest.approx(result.e2e_s / result.audio_s)
    # the listener starts with the first audio, and the rest arrives while the first 0.9 s still play
    assert result.playback_start_s == result.ttfa_s
    assert (result.stalls, result.stalled_s) == (0, 0.0)


async def test_sse_ttfa_is_the_first_delta_with_audio(serve) -> None:
    url = await serve(sse_server)
    async with httpx.AsyncClient() as client:
        result = await measure(client, target(url), "text", "wav", "sse", keep_audio=True)
    assert result.ok, result
    assert result.ttfa_s is not None and result.ttfa_s >= FIRST_AUDIO_DELAY_S
    assert result.audio_s == pytest.approx(0.75)
    assert result.audio is not None and result.audio.startswith(b"RIFF")


def header_first_server(fmt: str) -> Handler:
    """Sends a compressed stream's container headers (everything before its first audio packet) at once, and its
    audio FIRST_AUDIO_DELAY_S later, as a server that opens its container before the model has spoken does."""
    encoder = create_encoder(fmt, RATE)
    payload = encoder.encode((np.frombuffer(pcm(1.0), "<i2") / 32768).astype(np.float32)) + encoder.finish()
    with av.open(io.BytesIO(payload)) as container:
        start = next(p.pos for p in container.demux(container.streams.audio[0]) if p.size)

    async def handler(writer: asyncio.StreamWriter) -> None:
        await respond(writer, "200 OK", "audio/x-compressed")
        await send_chunk(writer, payload[:start])
        await asyncio.sleep(FIRST_AUDIO_DELAY_S)
        await send_chunk(writer, payload[start:])
        await send_chunk(writer, b"")

    return handler


@pytest.mark.parametrize("fmt", ["opus", "flac"])
async def test_ttfa_of_a_compressed_stream_starts_at_its_first_packet_not_its_container_header(serve, fmt) -> None:
    url = await serve(header_first_server(fmt))
    async with httpx.AsyncClient() as client:
        result = await measure(client, target(url), "text", fmt, "audio", keep_audio=False)
    assert result.ok, result
    assert result.ttfa_s is not None and result.ttfa_s >= FIRST_AUDIO_DELAY_S  # the headers came at once
    assert result.uninterrupted_s is not None and result.uninterrupted_s >= result.ttfa_s


async def test_http_errors_are_counted_with_status_and_code(serve) -> None:
    url = await serve(refusing_server)
    async with httpx.AsyncClient() as client:
        result = await measure(client, target(url), "text", "pcm", "audio", keep_audio=False)
    assert not result.ok
    assert result.status == 400
    assert result.error_code == "voice_not_found"
    assert result.error_message == "no"
    assert result.ttfa_s is None


async def test_connection_refused_is_an_error_not_a_crash() -> None:
    async with httpx.AsyncClient() as client:
        result = await measure(client, target("http://127.0.0.1:9"), "text", "pcm", "audio", keep_audio=False)
    assert not result.ok and result.status == 0 and result.error_code == "ConnectError"
    assert result.error_message is not None and result.error_message.startswith("ConnectError")
    assert "refused" in result.error_message.lower()  # the cause, which httpx's own message may leave out


def test_summarize_orders_percentiles() -> None:
    values = [float(v) for v in np.random.default_rng(1).exponential(0.2, 500)]
    stats = summarize(values)
    assert stats["p50"] <= stats["p90"] <= stats["p95"] <= stats["p99"] <= max(values)
    assert stats["mean"] == pytest.approx(sum(values) / len(values))
    assert summarize([2.0])["p99"] == 2.0
    assert summarize([]) == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}
    assert summarize([1.0, 2.0, 3.0, 4.0])["p50"] == 2.5


def test_percentiles_of_a_small_level_lie_between_its_nearest_ranks_as_documented() -> None:
    """docs/loadtest.md: pk at rank (n - 1) k / 100 from 0, linear between the two nearest; of 16 requests p95 is a
    quarter of the way from the 15th to the slowest."""
    stats = summarize([float(v) for v in range(16, 0, -1)])  # 1 … 16 s, in any order
    assert (stats["p50"], stats["p90"], stats["p95"], stats["p99"]) == pytest.approx((8.5, 14.5, 15.25, 15.85))


def test_ratio_and_target_parsing() -> None:
    assert ratio(1.0, 4.0) == 0.25
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None
    assert normalise_url("http://h:8000/v1/audio/speech") == "http://h:8000"
    assert normalise_url("http://h:8000/v1/") == "http://h:8000"
    assert parse_header("Authorization: Bearer abc:def") == ("Authorization", "Bearer abc:def")
    with pytest.raises(ValueError):
        parse_header("no colon here")


def test_wav_payload_offset_skips_every_chunk_before_data() -> None:
    plain = wav_header()
    assert wav_payload_offset(plain) == 44
    assert wav_payload_offset(plain[:30]) is None  # the header has not fully arrived
    info = b"LIST" + (10).to_bytes(4, "little") + b"INFOabcdef"
    extended = plain[:36] + info + plain[36:]
    assert wav_payload_offset(extended) == 44 + 18
    assert wav_payload_offset(b"ID3\x04" + b"\0" * 20) == 0  # not a WAV: count from the first byte


async def malformed_sse_server(writer: asyncio.StreamWriter) -> None:
    await respond(writer, "200 OK", "text/event-stream")
    await send_chunk(writer, b"data: [DONE]\n\n")
    await send_chunk(writer, b"")


async def test_malformed_sse_is_an_error_not_a_crash(serve) -> None:
    url = await serve(malformed_sse_server)
    async with httpx.AsyncClient() as client:
        result = await measure(client, target(url), "text", "pcm", "sse", keep_audio=False)
    assert not result.ok and result.error_code == "sse_malformed"


IDLE_CLOSE_S = 1.2  # this server's keep-alive timeout: shorter than uvicorn's 5 s, longer than the tool's expiry


async def test_a_connection_idle_near_the_servers_keep_alive_is_not_reused() -> None:
    """A server that closes idle keep-alive connections, caught at the moment a reused connection's request arrives
    (the race a client loses when its keep-alive expiry is as long as the server's): it resets the connection. The
    load tool must have dropped such a connection itself and send on a fresh one."""
    connections = 0

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            if idle_since is not None and loop.time() - idle_since >= IDLE_CLOSE_S:
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
                writer.transport.abort()
                return
            body = pcm(0.1)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: audio/pcm\r\n" + f"content-length: {len(body)}\r\n\r\n".encode()
            )
            writer.write(body)
            await writer.drain()
            idle_since = loop.time()
        writer.close()

    assert KEEPALIVE_EXPIRY_S < IDLE_CLOSE_S
    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, http_client(4, 10.0) as client:
        first = await measure(client, target(url), "text", "pcm", "audio", keep_audio=False)
        await asyncio.sleep(IDLE_CLOSE_S + 0.05)
        second = await measure(client, target(url), "text", "pcm", "audio", keep_audio=False)
    assert first.ok, first
    assert second.ok, second  # with httpx's default 5 s expiry: ReadError (connection reset by peer)
    assert connections == 2


async def test_replicas_of_one_target_take_the_requests_in_turn(serve) -> None:
    """A target given as two replicas (two servers behind one load balancer): its requests alternate between them,
    and each reply is measured as the target's."""
    served: list[str] = []

    def replica(name: str) -> Handler:
        async def handler(writer: asyncio.StreamWriter) -> None:
            served.append(name)
            await respond(writer, "200 OK", "audio/pcm")
            await send_chunk(writer, pcm(0.1))
            await send_chunk(writer, b"")

        return handler

    first, second = await serve(replica("first")), await serve(replica("second"))
    args = parse_args(["--target", f"{first},{second}/v1/audio/speech", "--target", first])
    both, alone = build_targets(args)
    assert both.urls == (first, second) and alone.urls == (first,)
    assert both.label == f"A: {first} + {second}"
    async with httpx.AsyncClient() as client:
        results = [await measure(client, both, "text", "pcm", "audio", keep_audio=False) for _ in range(4)]
    assert all(r.ok and r.target == 0 for r in results), results
    assert served == ["first", "second", "first", "second"]
    with pytest.raises(SystemExit):  # the engine baseline is one process: nothing to balance
        build_targets(parse_args(["--target", f"engine+{first},{second}"]))


@pytest.mark.parametrize("stagger_s", [0.0, 0.6])
async def test_a_staggered_closed_loop_starts_its_workers_one_after_another(
    serve, stagger_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests of one length in a closed loop start and end together, round after round, unless the workers start
    apart: with --stagger S, worker i sends its first request i * S / workers after the round starts.

    Measured where the load tool sends, not where the server reads: the first worker sends at once and the others
    start their waits after it, so worker i's first send is at least i * S / workers after the first one's, however
    busy the machine (a busy machine only delays a wait's end). The server's clock would not show that: a first request
    whose connection is slow to open arrives late and shortens the next gap."""
    loop = asyncio.get_running_loop()
    sends: list[float] = []
    real_closed_loop = runner.closed_loop

    async def recorded(items, concurrency, send, stagger):  # type: ignore[no-untyped-def]
        async def timed(text: str) -> bool | None:
            sends.append(loop.time())
            return await send(text)

        return await real_closed_loop(items, concurrency, timed, stagger)

    monkeypatch.setattr(runner, "closed_loop", recorded)

    async def handler(writer: asyncio.StreamWriter) -> None:
        await respond(writer, "200 OK", "audio/pcm")
        await asyncio.sleep(1.0)  # every request as long as the others
        await send_chunk(writer, pcm(0.1))
        await send_chunk(writer, b"")

    url = await serve(handler)
    args = parse_args(["--target", url, "--concurrency", "3", "--requests", "3", "--stagger", str(stagger_s)])
    plan = RunPlan(build_targets(args), ["text"], "pcm", "audio", 3, 0, 1, 0, stagger_s=args.stagger)
    async with http_client(4, 10.0) as client:
        [run] = await run_concurrency_sweep(client, plan, [3], lambda: None)
    assert [r.ok for r in run.results] == [True, True, True]
    assert len(sends) == 3  # one request a worker: every first send is in the list, in the order they were made
    after_first = [at - sends[0] for at in sends]
    if stagger_s:
        # the schedule's own times, with a millisecond for the loop's clock granularity (a wait may end that early)
        assert all(offset >= i * 0.2 - 0.001 for i, offset in enumerate(after_first)), after_first
    else:
        assert max(after_first) < 0.15, after_first  # the cohort this option exists to break up: sent together


async def test_a_request_longer_than_its_timeout_fails_as_a_timeout_though_each_read_came_in_time() -> None:
    """--timeout is seconds per request (the help says so), not per read: an answer whose pieces each come in time
    but whose whole takes longer fails as `timeout`, as a WebSocket utterance over it does."""

    async def slow_body() -> AsyncIterator[bytes]:
        for _ in range(5):
            await asyncio.sleep(0.2)
            yield b"\x00\x00" * 2400

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=slow_body()))
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5.0)) as client:
        late = await measure(client, target("http://a"), "text", "pcm", "audio", keep_audio=False, timeout_s=0.5)
        assert (late.ok, late.error_code) == (False, "timeout")
        in_time = await measure(client, target("http://a"), "text", "pcm", "audio", keep_audio=False, timeout_s=5.0)
        assert in_time.ok


def test_an_open_loops_pool_never_makes_an_arrival_wait_for_a_connection() -> None:
    """An open loop has no level to size its pool by: its arrivals are as many as the server lets pile up, and one
    waiting in the tool's pool would count the tool's wait as the server's latency (a pool of 136 did, at 100 a
    second against a server that took every request at once)."""
    assert pool_concurrency(parse_args(["--target", "http://a", "--rate", "100"])) is None
    assert pool_concurrency(parse_args(["--target", "http://a", "--concurrency", "1,32"])) == 32
    unbounded, bounded = http_client(None, 1.0), http_client(32, 1.0)
    assert unbounded._transport._pool._max_connections > 10**6  # type: ignore[attr-defined]
    assert bounded._transport._pool._max_connections == 32 * 2 + 8  # type: ignore[attr-defined]
