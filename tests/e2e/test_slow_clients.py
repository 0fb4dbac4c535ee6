"""Slow and silent clients against a real server, over raw sockets: request reading is bounded (408, connection
closed), idle keep-alive is bounded, and a client that never reads its audio is cut off with bounded memory."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import RunningServer, start_server

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

READ_TIMEOUT_S = 1.0
KEEP_ALIVE_S = 1.0
STALL_S = 2.0
READ_AHEAD_CHARS = 4096  # SPEECH_WS_MAX_READ_AHEAD_CHARS, at its floor (SPEECH_MAX_INPUT_CHARS)
LONGEST_TEXT = " ".join(f"Sentence number {n} is here to keep the engine busy for a while." for n in range(62))
BODY = json.dumps({"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "pcm"}).encode()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {
        "SPEECH_REQUEST_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SPEECH_KEEP_ALIVE_TIMEOUT_S": str(KEEP_ALIVE_S),
        "SPEECH_CLIENT_STALL_TIMEOUT_S": str(STALL_S),
        "SPEECH_WS_MAX_READ_AHEAD_CHARS": str(READ_AHEAD_CHARS),
        "SPEECH_MAX_CONCURRENCY": "1",
    }
    running = start_server(tmp_path_factory.mktemp("guarded") / "server.log", env=env)
    yield running
    running.stop()


def connect(server: RunningServer, recv_buffer: int | None = None) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.socket()
    if recv_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
    sock.connect((host, int(port)))
    sock.settimeout(15)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:  # the server closed while unread bytes of ours were still in its buffer
        pass
    return data


def request_head(length: int, request_id: str | None = None) -> bytes:
    named = f"X-Request-Id: {request_id}\r\n" if request_id else ""
    return (
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{named}Content-Length: {length}\r\n\r\n"
    ).encode()


def send_slowly(sock: socket.socket, data: bytes, delay_s: float) -> None:
    """A byte at a time, until the server hangs up."""
    try:
        for byte in data:
            sock.sendall(bytes([byte]))
            time.sleep(delay_s)
    except (BrokenPipeError, ConnectionResetError):
        pass


def assert_408_and_closed(sock: socket.socket, started: float) -> None:
    response = read_until_closed(sock)  # returns only once the server closed the connection
    elapsed = time.monotonic() - started
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), response[:200]
    assert re.search(rb"\r\nx-request-id: [0-9a-f]{32}\r\n", head + b"\r\n"), head  # as every response carries one
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert READ_TIMEOUT_S * 0.9 <= elapsed < READ_TIMEOUT_S + 3


def test_a_client_that_never_sends_gets_a_408_and_is_closed(guarded: RunningServer) -> None:
    started = time.monotonic()
    with connect(guarded) as sock:
        assert_408_and_closed(sock, started)


def test_slow_headers_get_a_408_and_are_closed(guarded: RunningServer) -> None:
    started = time.monotonic()
    with connect(guarded) as sock:
        send_slowly(sock, request_head(len(BODY))[:30], 0.1)  # 10 bytes a second: the deadline passes first
        assert_408_and_closed(sock, started)


def test_a_trickled_body_gets_a_408_and_is_closed(guarded: RunningServer) -> None:
    started = time.monotonic()
    with connect(guarded) as sock:
        sock.sendall(request_head(len(BODY)))
        send_slowly(sock, BODY[:15], 0.2)
        assert_408_and_closed(sock, started)


def test_a_content_length_that_lies_gets_a_408_and_is_closed(guarded: RunningServer) -> None:
    started = time.monotonic()
    with connect(guarded) as sock:
        sock.sendall(request_head(len(BODY) + 100) + BODY)  # a hundred bytes promised that never come
        assert_408_and_closed(sock, started)


def test_a_client_that_hangs_up_mid_body_is_counted_as_one_that_left(guarded: RunningServer) -> None:
    """Not as a 400 for the JSON it never finished sending: a 499, as any client that left before its answer."""
    request_id = uuid.uuid4().hex
    with connect(guarded) as sock:
        sock.sendall(request_head(len(BODY), request_id) + BODY[:15])
    deadline = time.monotonic() + 10
    while not (lines := [e for e in guarded.log_events() if e.get("request_id") == request_id and "status" in e]):
        assert time.monotonic() < deadline, "the request was never logged"
        time.sleep(0.05)
    assert [(line["message"], line["status"], line.get("error")) for line in lines] == [("speech request", 499, None)]


def test_idle_keep_alive_connections_are_closed(guarded: RunningServer) -> None:
    with connect(guarded) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"}"):  # the whole response (headers and JSON body) may come in several reads
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        idle_from = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the server, without a response
        assert time.monotonic() - idle_from < KEEP_ALIVE_S + 2


def test_prompt_clients_are_unaffected(guarded: RunningServer) -> None:
    with httpx.Client(base_url=guarded.base_url, timeout=30) as client:
        for _ in range(3):
            response = client.post("/v1/audio/speech", content=BODY, headers={"content-type": "application/json"})
            assert response.status_code == 200 and len(response.content) > 1000


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_reads_steadily_is_never_cut_off(guarded: RunningServer) -> None:
    """A client that reads its audio steadily, if slower than the server makes it, is reading: it is never taken for
    one that stopped. Before, it was cut off once the stall timeout passed without the kernel's send buffer (megabytes)
    draining to half: this reader within 5 s, a real-time player in about 40."""
    before = guarded.metric("speech_aborted_total", reason="client_stalled")
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": LONGEST_TEXT, "response_format": "pcm"}).encode()
    with connect(guarded, recv_buffer=4096) as sock:
        sock.sendall(request_head(len(body)) + body)
        received = 0
        reading_until = time.monotonic() + 5 * STALL_S
        while time.monotonic() < reading_until:  # 4 KiB every 40 ms: about twice real time, less than the engine makes
            chunk = sock.recv(4096)
            assert chunk, f"the server closed the stream after {received} bytes"
            received += len(chunk)
            time.sleep(0.04)
    assert guarded.metric("speech_aborted_total", reason="client_stalled") == before
    deadline = time.monotonic() + 30
    while guarded.metric("speech_in_flight") > 0:  # the slot comes back once the server sees the client gone
        assert time.monotonic() < deadline, "the stream's slot was never freed"
        time.sleep(0.1)


def test_a_client_that_never_reads_is_cut_off_and_counted(guarded: RunningServer) -> None:
    """Three clients ask for the longest text (minutes of audio) and never read a byte. Each stream is stopped
    within the stall timeout of the write buffer filling, counted as client_stalled, its slot freed; the server's
    memory does not grow with the audio it could have produced."""
    pid = guarded.process.pid
    before_rss = rss_kib(pid)
    before = guarded.metric("speech_aborted_total", reason="client_stalled")
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": LONGEST_TEXT, "response_format": "pcm"}).encode()
    sockets = []
    started = time.monotonic()
    peak_rss = before_rss
    for _ in range(3):
        sock = connect(guarded, recv_buffer=4096)
        sock.sendall(request_head(len(body)) + body)
        sockets.append(sock)
    try:
        # the engine must first make enough audio to fill each connection's buffers (megabytes), three streams at once
        # on the machine's cores: once in a full suite beside other load that took over a minute
        deadline = time.monotonic() + 240
        while guarded.metric("speech_aborted_total", reason="client_stalled") - before < 3:
            assert time.monotonic() < deadline, "stalled streams were never stopped"
            peak_rss = max(peak_rss, rss_kib(pid))
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        after_rss = rss_kib(pid)
        assert guarded.metric("speech_in_flight") == 0
        print(f"stall: 3 cut off in {elapsed:.1f} s; RSS {before_rss} -> peak {peak_rss} -> {after_rss} KiB")
        assert peak_rss - before_rss < 64 * 1024  # less than 64 MiB over three streams of ~3.5 minutes of audio
        events = [e for e in guarded.log_events() if e.get("outcome") == "client_stalled"]
        assert len(events) >= 3
        assert all(connection_ended(sock) for sock in sockets)  # the server let go of the connections
    finally:
        for sock in sockets:
            sock.close()
    response = httpx.post(
        f"{guarded.base_url}/v1/audio/speech", content=BODY, headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 200  # the slot came back


def connection_ended(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        read_until_closed(sock)
    except TimeoutError:
        return False
    return True


def websocket_open(server: RunningServer, request_id: str | None = None) -> socket.socket:
    """A WebSocket session over a raw socket with a small receive buffer: the handshake read, nothing after."""
    sock = connect(server, recv_buffer=4096)
    key = base64.b64encode(os.urandom(16)).decode()
    named = f"X-Request-Id: {request_id}\r\n" if request_id else ""
    sock.sendall(
        (
            "GET /v1/audio/speech/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"{named}Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):  # a byte at a time: not one byte of the session's frames is read
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def websocket_send(sock: socket.socket, message: dict[str, object]) -> None:
    """One masked text frame, as a client sends it."""
    data = json.dumps(message).encode()
    mask = os.urandom(4)
    size = len(data)
    if size < 126:
        header = bytes([0x81, 0x80 | size])
    elif size < 65536:
        header = bytes([0x81, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big")
    sock.sendall(header + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(data)))


def test_a_websocket_client_that_never_reads_is_cut_off(guarded: RunningServer) -> None:
    """A WebSocket client asks for minutes of speech and reads none of it: once its write buffer has been full for
    the stall timeout, the connection is aborted as an HTTP response's would be, the utterance is logged as
    client_stalled and the slot comes back (the server admits one stream at a time). Before, the session waited on
    the full buffer for ever, holding its slot (uvicorn's keep-alive ping, queued behind the audio, only closes the
    connection, which waits for the same buffer)."""
    sock = websocket_open(guarded)
    started = time.monotonic()
    try:
        websocket_send(sock, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        websocket_send(sock, {"type": "input.text", "text": LONGEST_TEXT})
        websocket_send(sock, {"type": "input.done"})
        deadline = time.monotonic() + 60
        while True:
            stalled = [
                e
                for e in guarded.log_events()
                if e.get("message") == "speech utterance" and e.get("outcome") == "client_stalled"
            ]
            if stalled:
                break
            assert time.monotonic() < deadline, "the stalled session was never cut off"
            time.sleep(0.2)
        print(f"websocket stall: cut off {time.monotonic() - started:.1f} s after the request")
        assert stalled[0]["sentences"] >= 1
        messages = [e.get("message") for e in guarded.log_events()]
        assert "client stopped reading: connection aborted" in messages
        assert "websocket session failed" not in messages  # a client gone, not a fault of the server
        assert connection_ended(sock)  # the server let go of the connection
    finally:
        sock.close()
    response = httpx.post(
        f"{guarded.base_url}/v1/audio/speech", content=BODY, headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 200  # the slot came back


def stalled_session(server: RunningServer, prefix: str) -> dict[str, object]:
    """A WebSocket session asked for the longest text by a client that reads none of it, until the server cuts it off
    as client_stalled: its `speech utterance` line."""
    request_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    sock = websocket_open(server, request_id)
    try:
        websocket_send(sock, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        websocket_send(sock, {"type": "input.text", "text": LONGEST_TEXT})
        websocket_send(sock, {"type": "input.done"})
        stalled = utterance_line(server, request_id, "the stalled session was never cut off")
        assert stalled["outcome"] == "client_stalled"
        assert connection_ended(sock)
    finally:
        sock.close()
    return stalled


def utterance_line(server: RunningServer, request_id: str, never: str) -> dict[str, object]:
    """The `speech utterance` line of session `request_id`, once the server has logged it (`never`: the failure's
    words where it has not within a minute)."""
    deadline = time.monotonic() + 60
    while not (
        lines := [
            e
            for e in server.log_events()
            if e.get("message") == "speech utterance" and e.get("request_id") == request_id
        ]
    ):
        assert time.monotonic() < deadline, never
        time.sleep(0.2)
    return lines[0]


def test_a_websocket_session_cut_off_counts_only_the_audio_it_delivered(guarded: RunningServer) -> None:
    """`speech_audio_seconds_total` is the audio delivered: a session whose client stopped reading adds what its
    sentences wrote before it was cut off, as its `speech utterance` line says (`audio_s`). Before, each sentence
    added all the audio synthesized for it, the sentence left half written and the one synthesized ahead of it,
    never sent, alike."""
    before = guarded.metric("speech_audio_seconds_total")
    line = stalled_session(guarded, "stall-audio")
    # the log line rounds to the millisecond
    assert guarded.metric("speech_audio_seconds_total") - before == pytest.approx(line["audio_s"], abs=0.002)


def test_a_websocket_session_cut_off_counts_no_sentence_it_did_not_deliver_as_completed(
    guarded: RunningServer,
) -> None:
    """`speech_e2e_seconds{stream="websocket"}` observes a sentence as it is delivered: a session whose client
    stopped reading observes one per sentence its `speech utterance` line counts (those it began to deliver, the last
    up to the cut), never the one synthesized ahead and never sent. That one is counted in `speech_aborted_total`
    under the cut, client_stalled, as the one left half written is (where the one ahead had not begun when the cut
    came, that one alone). Before, each sentence was observed once synthesized, as completed, the one never sent too,
    and neither was counted as aborted."""
    e2e = guarded.metric("speech_e2e_seconds_count", stream="websocket")
    aborted = guarded.metric("speech_aborted_total", reason="client_stalled")
    line = stalled_session(guarded, "stall-sentences")
    assert guarded.metric("speech_e2e_seconds_count", stream="websocket") - e2e == line["sentences"]
    assert guarded.metric("speech_aborted_total", reason="client_stalled") - aborted in (1, 2)


def test_a_websocket_client_that_writes_faster_than_it_is_spoken_is_held_back(guarded: RunningServer) -> None:
    """Text is read ahead of its speech up to a bound (SPEECH_WS_MAX_READ_AHEAD_CHARS not yet spoken): past it, the
    next message is read once some of it has been spoken, and a client that sends megabytes of text and reads nothing
    waits on its sends until it is cut off as one that stopped reading. Before, every message was read and queued as
    it came, the server's memory and event loop given to text hours ahead of its speech (50 MB of text, compressed to
    kilobytes on the wire, held 600 MB); later the bound was a fixed 32768 characters, which no setting changed."""
    request_id = f"flood-{uuid.uuid4().hex[:8]}"
    sock = websocket_open(guarded, request_id)
    sent = 0
    try:
        websocket_send(sock, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        piece = "Short sentence here. " * 500  # 10 500 characters: the bound and two, under 32768
        try:
            for _ in range(400):  # 4.2 MB
                websocket_send(sock, {"type": "input.text", "text": piece})
                sent += len(piece)
        except OSError:  # the sends wait until the server cuts the session off, as a stalled client's
            pass
        ended = utterance_line(guarded, request_id, "the session was never cut off")
    finally:
        sock.close()
    assert sent < 400 * len(piece)  # held back
    assert ended["outcome"] == "client_stalled"
    # read: the bound, the message that crossed it, and what was spoken meanwhile (into the socket's buffers)
    assert ended["chars"] < READ_AHEAD_CHARS + 2 * len(piece), ended


def test_an_upgrade_refused_by_the_websocket_layer_is_answered_cleanly(guarded: RunningServer) -> None:
    """An upgrade the WebSocket layer refuses before the application sees it (no Sec-WebSocket-Key: scanners and some
    health checks send such): a 400, the connection closed, and nothing at error level in the log."""
    sock = connect(guarded)
    try:
        sock.sendall(
            b"GET /v1/audio/speech/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        sock.settimeout(5)
        answer = read_until_closed(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 400"), answer[:80]
    time.sleep(0.2)  # the log line, where there would be one, is written as the connection is handled
    text = guarded.log_path.read_text(encoding="utf-8", errors="replace")
    assert "Fatal error on transport" not in text and "data_received() call failed" not in text
