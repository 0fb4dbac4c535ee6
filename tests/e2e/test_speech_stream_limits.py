"""WS /v1/audio/speech/stream at its limits, against the real server with the `websockets` client: the idle timeout,
the per-key limit, and a drain that runs out of time."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.e2e.test_speech_stream import long_text, receive_through_errors, receive_utterance, send, ws_url
from tests.support.server import RunningServer, start_server

pytestmark = pytest.mark.timing  # asserts on wall-clock time: tests/support/timing_stress.py

KEY = "sk-stream-limits-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
IDLE_S = 1.5
DRAIN_S = 1.0
REQUEST_TIMEOUT_S = 3.0  # a sentence's synthesis takes a fraction of it; a long utterance's, many times it


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path: Path = tmp_path_factory.mktemp("ws-limits") / "server.log"
    running = start_server(
        log_path,
        env={
            "SPEECH_API_KEYS": KEY,
            "SPEECH_API_KEY_MAX_CONCURRENCY": "1",
            "SPEECH_WS_IDLE_TIMEOUT_S": str(IDLE_S),
            "SPEECH_DRAIN_TIMEOUT_S": str(DRAIN_S),
            "SPEECH_EMBEDDED__WORKERS": "1",
            "SPEECH_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
        },
    )
    yield running
    running.stop()


def no_sessions(server: RunningServer) -> None:
    """The previous test's connections are gone on the server's side too (their keys released)."""
    deadline = time.monotonic() + 10
    while server.metric("speech_ws_sessions") != 0:
        assert time.monotonic() < deadline, "a session stayed open"
        time.sleep(0.05)


def events_until_closed(ws: ClientConnection) -> list[dict[str, object]]:
    """Every JSON message until the server closes the session (its audio skipped)."""
    events: list[dict[str, object]] = []
    with pytest.raises(ConnectionClosed):
        while True:
            message = ws.recv(timeout=30)
            if isinstance(message, str):
                events.append(json.loads(message))
    return events


def closed_with(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=15)
    return ws.close_code


def test_an_idle_session_is_closed_but_not_while_it_speaks(limited_server: RunningServer) -> None:
    """Silence from the client while its utterance is spoken, and while a listener plays it, is expected; once a
    listener playing it from its first audio has heard it all, the session is closed after SPEECH_WS_IDLE_TIMEOUT_S
    of silence, counted from then (a voice agent's next turn comes after its reply has played)."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": long_text(3)})
        send(ws, {"type": "input.done"})
        first = ws.recv(timeout=30)
        first_audio = time.monotonic()
        events, audio = receive_utterance(ws)  # the client says nothing while the utterance is spoken
        assert json.loads(first)["type"] == "audio.start"
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}, events[-1]
        heard_s = sum(map(len, audio.values())) / 48_000  # 24 kHz 16-bit pcm
        assert heard_s > 4 * IDLE_S, heard_s  # it plays for longer than the idle timeout (else this proves nothing)
        error = json.loads(ws.recv(timeout=heard_s + 10))
        quiet_s = time.monotonic() - first_audio - heard_s
        assert (error["type"], error["code"]) == ("error", "idle_timeout")
        assert IDLE_S - 0.3 <= quiet_s <= IDLE_S + 3.0, quiet_s  # + the gaps it ran dry, on a busy machine
        assert closed_with(ws) == 1000
    print(f"played for {heard_s:.2f} s, then closed after {quiet_s:.2f} s of silence (idle timeout {IDLE_S} s)")


def test_an_utterance_longer_than_the_request_timeout_is_spoken_whole(limited_server: RunningServer) -> None:
    """Each sentence is a request of its own, and its deadline counts from its turn (the session speaks its
    sentences one after another), not from when its text arrived: a long text sent at once is spoken in full, however
    long all of it takes, as a request of the same text is."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        # 200 sentences: about 7.5 s to speak on an idle machine (80 took 2.98 s there, under the 3-s request timeout,
        # and proved nothing), longer on a busy one
        send(ws, {"type": "input.text", "text": long_text(200)})
        sent = time.monotonic()
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        took = time.monotonic() - sent
        assert [e for e in events if e["type"] == "error"] == []
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 200}, events[-1]
        assert took > REQUEST_TIMEOUT_S, took  # longer than one request may take (else this proves nothing)


def test_a_client_still_playing_its_audio_is_listening_not_idle(limited_server: RunningServer) -> None:
    """A client that plays a reply as it reads holds much of it unread long after the server has sent it all (its
    socket's buffers: minutes of audio in a long reply). It is listening, not idle: the idle time counts from when it
    has read it all, so that the next utterance it sends after playing the reply (a voice agent's next turn) is
    spoken, not answered by a session closed while it listened."""
    no_sessions(limited_server)
    host, port = limited_server.base_url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16_384)  # the reply waits on the server's side, as a long one
    sock.connect((host, int(port)))
    # max_queue=1: the client's library reads no further ahead than the message it hands out next
    with connect(ws_url(limited_server), sock=sock, additional_headers=AUTH, max_queue=1) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": long_text(1)})
        send(ws, {"type": "input.done"})
        # the reply is spoken and sent meanwhile, and a listener playing it as it came would have heard it and an
        # idle period more: only what the client has not read yet keeps the session open
        time.sleep(5 * IDLE_S)
        events, audio = receive_utterance(ws)
        heard_s = sum(map(len, audio.values())) / 48_000  # 24 kHz 16-bit pcm
        assert events[-1]["type"] == "session.done" and 1.0 < heard_s < 4 * IDLE_S - 0.5, heard_s
        time.sleep(IDLE_S / 2)  # a pause before its next turn, as a person's
        send(ws, {"type": "input.text", "text": "And the next turn."})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        assert [e["type"] for e in events] == ["audio.start", "audio.done", "session.done"], events
        error = json.loads(ws.recv(timeout=10))  # idle at last, once everything has been read
        assert (error["type"], error["code"]) == ("error", "idle_timeout")
        assert closed_with(ws) == 1000


def test_a_fragment_left_unfinished_is_spoken_then_the_idle_session_closes(limited_server: RunningServer) -> None:
    """Text that never ends like a sentence, then silence: it is spoken after SPEECH_WS_IDLE_TIMEOUT_S (as input.done
    would have it, never dropped), and the session closes after the next idle period: a stray fragment cannot hold
    the connection, and its key's slot, open for ever."""
    no_sessions(limited_server)
    fragment = "a fragment the writer never finished"
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": fragment})
        sent = time.monotonic()
        events, audio = receive_utterance(ws)
        spoken_after = time.monotonic() - sent
        assert [e["type"] for e in events] == ["audio.start", "audio.done", "session.done"], events
        assert events[0]["sentence_text"] == fragment and len(audio[0]) > 24_000  # more than 0.5 s of speech
        assert spoken_after >= IDLE_S, spoken_after
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["code"]) == ("error", "idle_timeout")
        assert closed_with(ws) == 1000


def test_a_half_character_left_when_the_idle_time_ends_the_utterance_is_dropped_and_said(
    limited_server: RunningServer,
) -> None:
    """The idle time ends an utterance as input.done would: a first UTF-16 half the text ended with is dropped and
    said then, not carried into the next utterance (whose session.config it held back as `input_pending`)."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Hello there \ud83d"})  # json.dumps writes the half as \ud83d
        events, _ = receive_through_errors(ws)
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1 and errors[0]["param"] == "text", events
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["Hello there"], events
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "wav"})  # between utterances
        send(ws, {"type": "input.text", "text": "\ude00 New utterance."})
        send(ws, {"type": "input.done"})
        events, _ = receive_through_errors(ws)
        assert not [e for e in events if e.get("code") == "input_pending"], events
        # the second half finds no first to join: refused alone, as a half with no other in its message is
        assert [e["param"] for e in events if e["type"] == "error"] == ["text"], events
        assert "U+DE00" in str(events[0]["message"]), events
        send(ws, {"type": "input.text", "text": "New utterance."})
        send(ws, {"type": "input.done"})
        events, audio = receive_through_errors(ws)
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["New utterance."], events
        assert audio[0][:4] == b"RIFF"  # the config between the utterances took: wav


def test_a_sentence_spoken_after_the_writer_paused_counts_its_ttfa_from_its_text(
    limited_server: RunningServer,
) -> None:
    """A sentence whose end is only certain once SPEECH_WS_SENTENCE_IDLE_S passes: its TTFA (log and metric) counts
    from the arrival of its text, so it includes that pause."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Nothing follows this sentence."})
        first = json.loads(ws.recv(timeout=30))
        assert first["type"] == "audio.start"
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        assert events[-1]["type"] == "session.done"
    deadline = time.monotonic() + 5
    while not (logged := [e for e in limited_server.log_events() if e.get("message") == "speech utterance"]):
        assert time.monotonic() < deadline, "no utterance log line"
        time.sleep(0.05)
    assert logged[-1]["ttfa_s"] >= 1.0  # SPEECH_WS_SENTENCE_IDLE_S's default: the pause is part of the wait


def test_a_key_at_its_limit_is_refused_with_1013(limited_server: RunningServer) -> None:
    """SPEECH_API_KEY_MAX_CONCURRENCY counts a WebSocket as one request for as long as it is open: a second one with
    the same key (or a POST) is refused while the first lasts, and served once it has closed."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as first:
        send(first, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        with connect(ws_url(limited_server, f"?api_key={KEY}")) as second:
            error = json.loads(second.recv(timeout=10))
            assert (error["type"], error["code"]) == ("error", "rate_limit_exceeded")
            # when the first session should end, at how long the key's earlier ones held their place: at least 1 s
            assert isinstance(error["retry_after"], int) and error["retry_after"] >= 1
            assert error["error"]["type"] == "requests"
            assert closed_with(second) == 1013
        body = {"model": "tts-1", "voice": "alloy", "input": "Over HTTP.", "response_format": "pcm"}
        response = httpx.post(f"{limited_server.base_url}/v1/audio/speech", json=body, headers=AUTH, timeout=30)
        assert response.status_code == 429 and response.json()["error"]["code"] == "rate_limit_exceeded"
        send(first, {"type": "input.text", "text": "The first session is served."})
        send(first, {"type": "input.done"})
        assert receive_utterance(first)[0][-1]["type"] == "session.done"
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as again:
        send(again, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(again, {"type": "input.text", "text": "Served again."})
        send(again, {"type": "input.done"})
        assert receive_utterance(again)[0][-1]["type"] == "session.done"


def test_an_utterance_waiting_for_a_slot_when_the_drain_runs_out_is_told_once(tmp_path: Path) -> None:
    """Its sentence waits for the one slot, held by a stream read slowly, when the drain runs out of time: the
    sentence is refused its slot and the session stopped, and the client is told once (`server_shutting_down`), then
    1001. It was told twice: the sentence's refusal, then the session's stop."""
    env = {"SPEECH_MAX_CONCURRENCY": "1", "SPEECH_DRAIN_TIMEOUT_S": "0.5", "SPEECH_QUEUE_TIMEOUT_S": "60"}
    server = start_server(tmp_path / "server.log", env=env)
    body = {"input": long_text(60), "response_format": "pcm"}  # about 4 000 characters: seconds of synthesis
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=60) as holder:
        chunks = holder.iter_raw(4096)
        next(chunks)  # the slot is the holder's while it reads nothing more
        with connect(ws_url(server)) as ws:
            send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
            send(ws, {"type": "input.text", "text": "Waiting for the slot."})
            send(ws, {"type": "input.done"})
            deadline = time.monotonic() + 10
            while server.metric("speech_queue_depth") < 1:  # the sentence waits for the slot
                assert time.monotonic() < deadline, "the sentence never queued"
                time.sleep(0.05)
            server.process.send_signal(signal.SIGTERM)
            events = events_until_closed(ws)
            assert ws.close_code == 1001
    errors = [e for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["server_shutting_down"], events
    assert server.process.wait(timeout=30) == 0


def test_a_drain_out_of_time_stops_the_utterance_with_an_error_and_1001(limited_server: RunningServer) -> None:
    """Last in this module: it stops the server. SIGTERM while a long utterance is spoken, with a drain timeout far
    shorter than the utterance: what the drain allows is delivered, then `server_shutting_down` and close 1001, and
    the server exits cleanly."""
    no_sessions(limited_server)
    with connect(ws_url(limited_server), additional_headers=AUTH) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": long_text(100)})
        send(ws, {"type": "input.done"})
        assert json.loads(ws.recv(timeout=30))["type"] == "audio.start"
        limited_server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        events = events_until_closed(ws)
        stopped_s = time.monotonic() - signalled
        assert ws.close_code == 1001
    kinds = [e["type"] for e in events]
    assert "session.done" not in kinds  # 100 sentences do not fit in the drain: the utterance was stopped
    errors = [e for e in events if e["type"] == "error"]
    # one: a sentence refused its slot by the drain and the drain's stop of the session were told twice
    assert len(errors) == 1 and errors[0]["code"] == "server_shutting_down", errors
    assert errors[0]["error"]["type"] == "server_error"  # type: ignore[index]
    # every audio.start has its audio.done, as from vllm-omni: the sentence the drain cut short gets one with `error`
    # set, after the error and before the close (nothing else follows the error)
    assert kinds.count("audio.start") + 1 == kinds.count("audio.done"), kinds  # + the first, received above
    after_error = events[kinds.index("error") + 1 :]
    assert all(e["type"] in ("error", "audio.done") for e in after_error), after_error
    cut = [e for e in events if e["type"] == "audio.done" and e["error"]]
    assert len(cut) <= 1 and all(e in after_error for e in cut), cut  # one, unless the drain fell between sentences
    spoken = kinds.count("audio.done") - 1
    print(f"closed {stopped_s:.2f} s after SIGTERM (drain timeout {DRAIN_S} s), {spoken} more sentences spoken")
    assert limited_server.process.wait(timeout=30) == 0
    stopped = [e for e in limited_server.log_events() if e.get("message") == "speech utterance"][-1]
    assert stopped["outcome"] == "stopped" and stopped["sentences"] == spoken + 1, stopped


@pytest.fixture(scope="module")
def quick_headers_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Request headers must arrive within 1 s; a WebSocket session stays open far longer."""
    running = start_server(
        tmp_path_factory.mktemp("ws-headers") / "server.log",
        env={"SPEECH_REQUEST_READ_TIMEOUT_S": "1", "SPEECH_WS_IDLE_TIMEOUT_S": "30", "SPEECH_EMBEDDED__WORKERS": "1"},
    )
    yield running
    running.stop()


def test_a_session_outlives_the_request_header_deadline(quick_headers_server: RunningServer) -> None:
    """The deadline for a request's headers ends once they have arrived, WebSocket upgrades included: it once stayed
    armed on an upgraded connection and, SPEECH_REQUEST_READ_TIMEOUT_S after it opened, wrote an HTTP 408 into the
    WebSocket stream and closed it (the client saw `1002 reserved bits must be 0`)."""
    with connect(ws_url(quick_headers_server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        time.sleep(2.5)  # well past the 1 s header deadline, counted from the connection's opening
        send(ws, {"type": "input.text", "text": "Still here after a pause."})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}, events[-1]
        assert len(audio[0]) > 0
        send(ws, {"type": "session.close"})
        assert closed_with(ws) == 1000


SMALL = {"max_message_bytes": 2048, "config_timeout_s": 1.5, "idle_timeout_s": 2.5, "max_read_ahead_chars": 5000}


@pytest.fixture(scope="module")
def small_limits_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A session's limits set low, each to a value of its own."""
    running = start_server(
        tmp_path_factory.mktemp("ws-small-limits") / "server.log",
        env={
            "SPEECH_WS_MAX_MESSAGE_BYTES": str(SMALL["max_message_bytes"]),
            "SPEECH_WS_CONFIG_TIMEOUT_S": str(SMALL["config_timeout_s"]),
            "SPEECH_WS_IDLE_TIMEOUT_S": str(SMALL["idle_timeout_s"]),
            "SPEECH_WS_MAX_READ_AHEAD_CHARS": str(SMALL["max_read_ahead_chars"]),
            "SPEECH_EMBEDDED__WORKERS": "1",
        },
    )
    yield running
    running.stop()


def padded(message: dict[str, object], size: int) -> str:
    """`message` as JSON text of `size` bytes exactly (blanks after the object: valid JSON, nothing more said)."""
    text = json.dumps(message)
    assert len(text.encode()) <= size
    return text + " " * (size - len(text.encode()))


def test_the_capabilities_tell_the_session_limits_the_server_holds_a_session_to(
    small_limits_server: RunningServer,
) -> None:
    """GET /v1/audio/capabilities told a request's and a batch's limits, not a WebSocket session's, which a client
    learnt only from a refusal or a close. It tells them as the server holds a session to them: a message at the
    limit is taken and one byte more refused; no session.config, and then silence, closed once their time is up (the
    read-ahead as tests/unit/test_speech_stream_read_ahead.py holds a session to it)."""
    limits = httpx.get(f"{small_limits_server.base_url}/v1/audio/capabilities", timeout=30).json()["websocket"]
    assert limits == SMALL, limits
    with connect(ws_url(small_limits_server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        ws.send(padded({"type": "input.text", "text": "Hello."}, limits["max_message_bytes"]))
        ws.send(padded({"type": "input.text", "text": " Never spoken."}, limits["max_message_bytes"] + 1))
        send(ws, {"type": "input.done"})
        events, _ = receive_through_errors(ws)
        errors = [event for event in events if event["type"] == "error"]
        assert [error["code"] for error in errors] == ["message_too_large"], events
        assert f"limit of {limits['max_message_bytes']} bytes" in str(errors[0]["message"])
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}, events[-1]
        quiet_from = time.monotonic()
        error = json.loads(ws.recv(timeout=30))
        assert error["code"] == "idle_timeout", error
        assert limits["idle_timeout_s"] - 0.3 <= time.monotonic() - quiet_from <= limits["idle_timeout_s"] + 6.0
        assert closed_with(ws) == 1000
    opened = time.monotonic()
    with connect(ws_url(small_limits_server)) as ws:
        error = json.loads(ws.recv(timeout=30))
        assert error["code"] == "session_config_timeout", error
        assert limits["config_timeout_s"] - 0.1 <= time.monotonic() - opened <= limits["config_timeout_s"] + 6.0
        assert closed_with(ws) == 1008
