"""WS /v1/audio/speech/stream against the real server, with the `websockets` client: vllm-omni's message sequence,
incremental synthesis, formats, errors, keys, admission, disconnects and the drain."""

from __future__ import annotations

import base64
import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from loadtest.audio import decode, transcribe, word_error_rate
from tests.e2e.test_speech_formats import check_rate
from tests.support.server import RunningServer, json_log_records, raw_answer, start_server

PATH = "/v1/audio/speech/stream"
KEY = "sk-stream-test-key"


def ws_url(server: RunningServer, query: str = "") -> str:
    return server.base_url.replace("http://", "ws://") + PATH + query


def send(ws: ClientConnection, message: dict[str, object]) -> None:
    ws.send(json.dumps(message))


# how a WebSocket utterance can end, as speech_ws_utterances_total counts them (those a session's end cuts short aside)
OUTCOMES = ("completed", "refused", "error")


def receive_utterance(ws: ClientConnection) -> tuple[list[dict[str, object]], dict[int, bytes]]:
    """Every message up to session.done; the audio of each sentence, by sentence index."""
    events: list[dict[str, object]] = []
    audio: dict[int, bytes] = {}
    current = -1
    while True:
        message = ws.recv(timeout=60)
        if isinstance(message, bytes):
            audio[current] = audio.get(current, b"") + message
            continue
        event = json.loads(message)
        events.append(event)
        if event["type"] == "audio.start":
            current = int(event["sentence_index"])
        if event["type"] in ("session.done", "error"):
            return events, audio


def receive_through_errors(ws: ClientConnection) -> tuple[list[dict[str, object]], dict[int, bytes]]:
    """Every message up to session.done, past the errors told on the way; the audio of each sentence."""
    events: list[dict[str, object]] = []
    audio: dict[int, bytes] = {}
    while not events or events[-1]["type"] != "session.done":
        more, heard = receive_utterance(ws)
        events, audio = events + more, audio | heard
    return events, audio


def utterances_counted(server: RunningServer) -> dict[str, float]:
    """How many WebSocket utterances ended so far, by outcome."""
    return {outcome: server.metric("speech_ws_utterances_total", outcome=outcome) for outcome in OUTCOMES}


def utterances_counted_since(server: RunningServer, before: dict[str, float]) -> dict[str, float]:
    """How many WebSocket utterances ended since `before` (`utterances_counted`), by outcome."""
    after = utterances_counted(server)
    return {outcome: after[outcome] - before[outcome] for outcome in OUTCOMES}


def refused_sessions(server: RunningServer, code: str, status: str | None = None) -> float:
    """How many WebSocket sessions were refused so far with the error `code` (and `status`, where given): counted in
    speech_requests_total as a request refused for the same reason is, their format `unknown` (no session.config
    taken). Counted before the session's `error` is sent: read once the client has it, no waiting."""
    labels = {"stream": "websocket", "response_format": "unknown", "code": code}
    return server.metric("speech_requests_total", **labels, **({"status": status} if status else {}))


def speaks_on(ws: ClientConnection) -> None:
    """The session goes on: a next utterance is spoken."""
    send(ws, {"type": "input.text", "text": "Spoken after all."})
    send(ws, {"type": "input.done"})
    events, audio = receive_utterance(ws)
    assert events[-1]["type"] == "session.done" and len(audio[0]) > 1000, events


def test_vllm_omni_client_sequence_works_unchanged(server: RunningServer) -> None:
    """The messages of vllm-omni's own example client: config, text chunks, input.done, a second utterance on the
    same connection, session.close."""
    text = "Hello from a streaming client. The text arrives in pieces."
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "wav"})
        for piece in ("Hello from a stream", "ing client. The text ", "arrives in pieces."):
            send(ws, {"type": "input.text", "text": piece})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
        kinds = [e["type"] for e in events]
        assert kinds == ["audio.start", "audio.done", "audio.start", "audio.done", "session.done"]
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == [
            "Hello from a streaming client.",
            "The text arrives in pieces.",
        ]
        assert all(e["total_bytes"] == len(audio[e["sentence_index"]]) for e in events if e["type"] == "audio.done")
        spoken = " ".join(transcribe(decode(audio[i], "wav")) for i in sorted(audio))
        assert word_error_rate(text, spoken) <= 0.2

        send(ws, {"type": "input.text", "text": "A second utterance."})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
        assert events[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
        assert events[0]["utterance_index"] == 1 and len(audio[0]) > 1000
        send(ws, {"type": "session.close"})
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1000


def test_session_config_takes_the_voice_as_the_body_does_by_name_or_as_an_object(server: RunningServer) -> None:
    """docs/websocket.md: session.config takes the fields of POST /v1/audio/speech, so OpenAI's object form of `voice`
    too; the same voice by name and as {"id": ...} speaks the same audio, and an unknown one is refused naming
    `voice`, as the body's is."""
    text = "The same voice either way."
    lengths = []
    for voice in ("alloy", {"id": "alloy"}):
        with connect(ws_url(server)) as ws:
            send(ws, {"type": "session.config", "voice": voice, "response_format": "pcm"})
            send(ws, {"type": "input.text", "text": text})
            send(ws, {"type": "input.done"})
            events, audio = receive_utterance(ws)
            assert events[-1]["type"] == "session.done", events
            assert word_error_rate(text, transcribe(decode(audio[0], "pcm"))) <= 0.2
            lengths.append(len(audio[0]))
    assert abs(lengths[0] - lengths[1]) <= 0.05 * lengths[0]  # the same voice's pace
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": {"id": "no-such-voice"}, "response_format": "pcm"})
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and error["param"] == "voice", error


def test_a_close_sent_with_the_end_of_the_text_still_hears_the_end(server: RunningServer) -> None:
    """input.done and session.close sent at once, as a client that has nothing more to say does: everything is
    spoken, session.done is the last message, then the session closes normally."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Short and done."})
        send(ws, {"type": "input.done"})
        send(ws, {"type": "session.close"})
        messages: list[dict | bytes] = []
        with pytest.raises(ConnectionClosed):
            while True:
                message = ws.recv(timeout=30)
                messages.append(json.loads(message) if isinstance(message, str) else message)
        assert ws.close_code == 1000
        events = [m for m in messages if isinstance(m, dict)]
        assert [e["type"] for e in events] == ["audio.start", "audio.done", "session.done"]
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
        assert sum(len(m) for m in messages if isinstance(m, bytes)) == events[1]["total_bytes"] > 0


def test_first_sentence_is_spoken_before_the_rest_is_sent(server: RunningServer) -> None:
    """Word by word: the first sentence's audio arrives while the second sentence has not been sent at all."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        for word in "The first sentence is here. The".split(" "):
            send(ws, {"type": "input.text", "text": word + " "})
        start = json.loads(ws.recv(timeout=30))  # nothing else was sent: no input.done, no second sentence
        assert start["type"] == "audio.start" and start["sentence_text"] == "The first sentence is here."
        assert isinstance(ws.recv(timeout=30), bytes)
        for word in "second one follows.".split(" "):
            send(ws, {"type": "input.text", "text": word + " "})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        starts = [e["sentence_text"] for e in events if e["type"] == "audio.start"]
        assert starts == ["The second one follows."]
        assert events[-1]["total_sentences"] == 2


def test_a_pause_in_the_text_speaks_a_finished_sentence(server: RunningServer) -> None:
    """No next word and no input.done: the sentence idle gap (1 s by default) lets a finished sentence be spoken."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Wait for it."})
        start = json.loads(ws.recv(timeout=30))
        assert start["type"] == "audio.start" and start["sentence_text"] == "Wait for it."


@pytest.mark.parametrize(
    ("response_format", "sample_rate"),
    [("mp3", None), ("opus", None), ("opus", 8000), ("aac", None), ("flac", 16000), ("wav", 16000), ("pcm", 16000)],
)
def test_every_format_decodes(server: RunningServer, response_format: str, sample_rate: int | None) -> None:
    """Each sentence's audio decodes at the rate its audio.start announces: a client sets its player by that number
    (pcm has nothing else to tell it). Opus decodes at 48 kHz whatever rate was asked (its header records that one)."""
    text = "Every format streams."
    config: dict[str, object] = {"type": "session.config", "voice": "alloy", "response_format": response_format}
    if sample_rate:
        config["sample_rate"] = sample_rate
    with connect(ws_url(server)) as ws:
        send(ws, config)
        send(ws, {"type": "input.text", "text": text})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert events[0]["format"] == response_format
    decoded = decode(audio[0], response_format, pcm_rate=sample_rate or 24_000)
    check_rate(audio[0], decoded, response_format, sample_rate or 24_000)
    assert events[0]["sample_rate"] == decoded.sample_rate, events[0]
    assert word_error_rate(text, transcribe(decoded)) <= 0.2


def test_word_timestamp_frames_announce_the_rate_opus_decodes_at(server: RunningServer) -> None:
    """With word_timestamps the audio.chunk frames carry the rate too: each says the one the sentence decodes at."""
    config = {"type": "session.config", "voice": "alloy", "response_format": "opus", "sample_rate": 16000}
    with connect(ws_url(server)) as ws:
        send(ws, {**config, "word_timestamps": True})
        send(ws, {"type": "input.text", "text": "Timed words in Opus."})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
    chunks = [event for event in events if event["type"] == "audio.chunk"]
    data = b"".join(base64.b64decode(str(chunk["audio_b64"])) for chunk in chunks)
    decoded = decode(data, "opus")
    check_rate(data, decoded, "opus", 16000)
    announced = [event["sample_rate"] for event in events if "sample_rate" in event]
    assert len(announced) == len(chunks) + 1 and set(announced) == {decoded.sample_rate}, announced


@pytest.mark.parametrize(
    ("first", "code"),
    [
        ({"type": "input.text", "text": "Too early."}, "session_config_required"),
        ({"type": "session.config", "voice": "nobody-by-this-name"}, "voice_not_found"),
        ({"type": "session.config", "split_granularity": "word"}, "invalid_value"),
        ("{not json", "invalid_json"),
        ('{"type": "session.config", "voice": ' + "[" * 1000 + "]" * 1000 + "}", "invalid_json"),  # too deep
        ('{"type": "session.config", "speed": ' + "1" * 5000 + "}", "invalid_value"),  # past Python's int digits
    ],
)
def test_a_bad_first_message_gets_one_error_and_a_close(server: RunningServer, first: object, code: str) -> None:
    """As from vllm-omni 0.30: no session without a valid session.config first; the client is told why, once. The
    session refused is counted as a request refused for the same reason is (`refused_sessions`)."""
    before = refused_sessions(server, code)
    with connect(ws_url(server)) as ws:
        ws.send(first if isinstance(first, str) else json.dumps(first))
        assert json.loads(ws.recv(timeout=10))["code"] == code
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1008
    assert refused_sessions(server, code) == before + 1


UPGRADE = {
    "Host": "localhost",
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


@pytest.mark.parametrize(
    ("method", "change", "status", "says"),
    [
        ("GET", {"Sec-WebSocket-Key": None}, 400, "Sec-WebSocket-Key"),
        ("GET", {"Sec-WebSocket-Key": "not a key"}, 400, "Sec-WebSocket-Key"),
        ("GET", {"Sec-WebSocket-Version": "8"}, 400, "Sec-WebSocket-Version"),
        ("GET", {"Sec-WebSocket-Version": None}, 400, "Sec-WebSocket-Version"),
        ("POST", {}, 405, "POST"),
    ],
    ids=["no-key", "bad-key", "wrong-version", "no-version", "post"],
)
def test_an_upgrade_the_websocket_handshake_refuses_is_an_openai_error_with_a_request_id(
    server: RunningServer, method: str, change: dict[str, str | None], status: int, says: str
) -> None:
    """An upgrade request that is no valid WebSocket handshake was refused by the WebSocket library below the API,
    in plain text and without X-Request-Id, where every other refusal is an OpenAI error with one. It is refused in
    that shape now, with the status the handshake's fault calls for, saying what is wrong, and the connection closed;
    a valid X-Request-Id sent with it is the one answered and logged, as for any upgrade."""
    headers = {name: value for name, value in {**UPGRADE, **change}.items() if value is not None}
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    own_id = f"handshake-{uuid.uuid4().hex}"
    request = f"{method} {PATH} HTTP/1.1\r\n{head}X-Request-Id: {own_id}\r\n\r\n".encode()
    line, answered, body = raw_answer(server, request)
    assert line.startswith(f"HTTP/1.1 {status} "), (line, body[:300])
    assert answered["content-type"] == "application/json" and answered["connection"] == "close", answered
    assert int(answered["content-length"]) == len(body) and "date" in answered and "server" in answered
    assert answered["x-request-id"] == own_id
    if status == 405:
        assert answered["allow"] == "GET"
    error = json.loads(body)["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_handshake")
    assert says in error["message"], error
    logged = [event for event in server.log_events() if event.get("request_id") == own_id]
    assert [event["message"] for event in logged] == ["websocket handshake refused"], logged


@pytest.mark.parametrize(
    ("query", "extra", "status"),
    [
        ("", "X-Long: " + "a" * 9000 + "\r\n", 431),  # a header line longer than the WebSocket library reads
        ("", "".join(f"X-Header-{n}: v\r\n" for n in range(130)), 431),  # more headers than it reads
        ("?pad=" + "a" * 9000, "", 414),  # a request line longer than it reads
        ("", "Content-Length: 5\r\n", 400),  # a handshake has no body
        ("", "Transfer-Encoding: chunked\r\n", 400),
    ],
    ids=["long-header", "many-headers", "long-request-line", "body", "chunked"],
)
def test_an_upgrade_the_websocket_library_cannot_read_is_refused_not_left_open(
    server: RunningServer, query: str, extra: str, status: int
) -> None:
    """The HTTP parser reads it, the WebSocket library does not, and gives up on it: nothing was answered and the
    connection stayed open, with no deadline left on it (its headers had arrived), for as long as the client held it.
    It is refused as a bad handshake is, and closed; a valid X-Request-Id sent with it is the one answered and logged,
    as for a handshake the library read and refused (it was answered with one of the server's own)."""
    head = "".join(f"{name}: {value}\r\n" for name, value in UPGRADE.items())
    own_id = f"unread-{uuid.uuid4().hex}"
    request = f"GET {PATH}{query} HTTP/1.1\r\n{head}X-Request-Id: {own_id}\r\n{extra}\r\n"
    line, answered, body = raw_answer(server, request.encode())
    assert line.startswith(f"HTTP/1.1 {status} "), (line, body[:300])
    assert answered["content-type"] == "application/json" and answered["connection"] == "close", answered
    assert answered["x-request-id"] == own_id
    error = json.loads(body)["error"]
    assert (error["param"], error["code"]) == (None, "invalid_handshake"), error
    logged = [event for event in server.log_events() if event.get("request_id") == own_id]
    assert [event["message"] for event in logged] == ["websocket handshake refused"], logged


def test_a_valid_upgrade_sent_by_hand_is_still_taken(server: RunningServer) -> None:
    """The handshake's check refuses no valid upgrade: one sent by hand is answered 101, with its request id."""
    head = "".join(f"{name}: {value}\r\n" for name, value in UPGRADE.items())
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"GET {PATH} HTTP/1.1\r\n{head}X-Request-Id: by-hand\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    status, *lines = answer.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    assert status.startswith("HTTP/1.1 101 "), status
    assert headers["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" and headers["x-request-id"] == "by-hand"


def test_a_session_closed_before_its_config_closes_normally(server: RunningServer) -> None:
    """session.close speaks what was sent, then closes: sent first, nothing was, so it closes 1000 with no error (a
    client that gives up before configuring is not told it did wrong, nor counted as refused)."""
    before = server.metric("speech_requests_total", stream="websocket")
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.close"})
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1000
    assert server.metric("speech_requests_total", stream="websocket") == before


def test_an_utterance_with_nothing_to_speak_is_told_so(server: RunningServer) -> None:
    """Text that holds nothing speakable (emoji only) is refused as over HTTP, naming `text`, before the utterance's
    end (no sentences): never an utterance that ends as if spoken, nor one counted as completed. The session goes
    on."""
    counted = utterances_counted(server)
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "\U0001f600 \U0001f389 "})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        assert events[0].get("type") == "error" and events[0].get("param") == "text", events
        assert "nothing that can be spoken" in str(events[0]["message"])
        done = json.loads(ws.recv(timeout=10))  # then the utterance's end, with nothing in it
        assert (done["type"], done["total_sentences"]) == ("session.done", 0), done
        speaks_on(ws)
    # each utterance counted once as it ended: the refused one is the request's error, never the server's
    assert utterances_counted_since(server, counted) == {"completed": 1, "refused": 1, "error": 0}


def test_an_utterance_of_ssml_is_refused_whole_not_read_out_after_its_first_sentence(server: RunningServer) -> None:
    """SSML (its root first) streamed in is refused as a request of it is, naming `text`, at each message of that
    utterance: its first sentence is not refused alone with the rest read out, closing tag and all. Nothing of it
    is spoken, it counts as refused, and the session goes on."""
    counted = utterances_counted(server)
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": '<speak version="1.1">Hello there.'})
        send(ws, {"type": "input.text", "text": ' <break time="300ms"/> How are you?</speak>'})
        send(ws, {"type": "input.done"})
        events, audio = receive_through_errors(ws)  # each error, then the utterance's end
        errors = [event for event in events if event["type"] == "error"]
        assert [(event["param"], "SSML" in str(event["message"])) for event in errors] == [("text", True)] * 2, events
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 0} and not audio
        speaks_on(ws)
    # each utterance counted once as it ended: the refused one is the request's error, never the server's
    assert utterances_counted_since(server, counted) == {"completed": 1, "refused": 1, "error": 0}


def test_a_sentence_the_voice_cannot_read_is_refused_naming_text(server: RunningServer) -> None:
    """A sentence in a script the voice cannot read is refused as a request of it would be, naming the field this
    transport carries text in (`text`, not POST's `input`); the utterance goes on."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(
            ws, {"type": "input.text", "text": "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440. Hello there."}
        )
        send(ws, {"type": "input.done"})
        errors, _ = receive_utterance(ws)  # up to the refusal
        events, audio = receive_utterance(ws)  # then the rest of the utterance
    assert errors[-1]["type"] == "error" and errors[-1]["param"] == "text", errors
    assert errors[-1]["error"]["param"] == "text"  # type: ignore[index]
    assert events[-1]["type"] == "session.done" and len(audio[1]) > 1000, events


def test_a_word_longer_than_a_request_may_be_is_refused_with_its_message_before_any_audio_start(
    server: RunningServer,
) -> None:
    """A word is never cut: one past the longest `input` a request may have (4096 characters) can never be spoken.
    Its end in the same message, it was queued as a sentence and refused only after that sentence's audio.start (an
    error naming `input` in its message, then audio.done with error: true). The message that holds it is refused as
    it comes, naming `text` and the limit, and not added, as text waiting past the limit is; the session goes on. The
    refusal counts as a refused utterance (the request's error, told) without opening one: the text sent after it is
    an utterance of its own, which completes."""
    word = "Supercalifragilistic" * 250  # 5000 characters
    counted = utterances_counted(server)
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": f"{word} after it. "})
        error = json.loads(ws.recv(timeout=30))
        assert (error["type"], error["param"], error["code"]) == ("error", "text", "string_too_long"), error
        assert error["error"]["param"] == "text" and error["error"]["type"] == "invalid_request_error", error
        assert "4096" in error["message"] and "5000" in error["message"], error
        assert "'input'" not in error["message"] and "not added" in error["message"], error
        send(ws, {"type": "input.text", "text": "Spoken after all."})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert [e["type"] for e in events] == ["audio.start", "audio.done", "session.done"], events
    assert events[0]["sentence_text"] == "Spoken after all." and events[1]["error"] is False, events
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1} and len(audio[0]) > 1000
    assert utterances_counted_since(server, counted) == {"completed": 1, "refused": 1, "error": 0}


@pytest.mark.parametrize(
    ("text", "refused", "after", "heard"),
    [
        # one Arabic letter, a whole phrase, was taken for an initial ("J. Smith")
        ("Hello. ﷺ. World is here.", "ﷺ.", "World is here.", "World is here."),
        # a letter of another script before a number was taken for an abbreviation ("c. 1900")
        ("Hello. Ж. 5 apples are here.", "Ж.", "5 apples are here.", "five apples are here."),
        # and with no letter after the number: "5." went with "Ж." and was refused with it
        ("Hello. Ж. 5.", "Ж.", "5.", "five."),
    ],
)
def test_a_sentence_the_voice_cannot_read_is_refused_alone_and_the_next_is_spoken(
    server: RunningServer, text: str, refused: str, after: str, heard: str
) -> None:
    """A one-letter sentence the voice cannot read was spoken with the sentence after it: the voice refused the two
    together, and the next sentence was never spoken. It is refused alone, naming `text`, and the next sentence is
    spoken. POST /v1/audio/speech refuses the same input whole, with a 400 on `input`."""
    import httpx

    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": text})
        send(ws, {"type": "input.done"})
        events, audio = receive_through_errors(ws)
    started = [e["sentence_text"] for e in events if e["type"] == "audio.start"]
    assert started == ["Hello.", refused, after], events
    assert [e["param"] for e in events if e["type"] == "error"] == ["text"], events
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
    assert word_error_rate(heard, transcribe(decode(audio[2], "pcm"))) <= 0.34
    http = httpx.post(f"{server.base_url}/v1/audio/speech", json={"input": text, "voice": "alloy"}, timeout=30)
    assert http.status_code == 400 and http.json()["error"]["param"] == "input", http.text


def test_a_character_cut_in_two_utf16_halves_across_messages_is_spoken_whole(server: RunningServer) -> None:
    """JSON writes a character beyond the BMP as two UTF-16 escapes; a client that cuts its text by UTF-16 length
    (JavaScript's) sends the halves in two messages: they are one character, as in one message."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        ws.send('{"type": "input.text", "text": "I love it \\ud83d"}')
        ws.send('{"type": "input.text", "text": "\\ude00 so much."}')
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert [e["type"] for e in events if e["type"] == "error"] == [], events
    assert events[0]["type"] == "audio.start" and events[0]["sentence_text"] == "I love it \U0001f600 so much.", events
    assert events[-1]["type"] == "session.done" and len(audio[0]) > 1000, events


def test_a_lone_utf16_half_is_refused_when_its_message_comes_naming_text(server: RunningServer) -> None:
    """A half with no other is no character. Inside a message, the message is refused, as a request holding it is,
    naming `text` and where in that message; a half that ends a message and that the next one does not complete is
    dropped, said with the next message, which is taken; one left at input.done is refused then, and the utterance
    goes on to its end."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        ws.send('{"type": "input.text", "text": "Stray \\ude00 half."}')
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["param"], error["code"]) == ("error", "text", "invalid_value"), error
        assert error["message"] == "'text' is not valid Unicode: a lone surrogate (U+DE00) at 6.", error
        ws.send('{"type": "input.text", "text": "Hello there. Left \\ud83d"}')
        send(ws, {"type": "input.text", "text": "Right."})  # taken; the half before it is dropped
        ws.send('{"type": "input.text", "text": " End \\ud83d"}')
        send(ws, {"type": "input.done"})
        events, _ = receive_through_errors(ws)  # the two refusals, the utterance's end
    errors = [str(e["message"]) for e in events if e["type"] == "error"]
    assert len(errors) == 2 and all("(U+D83D)" in e and "half was dropped" in e for e in errors), events
    assert "before this one" in errors[0] and "the text ended" in errors[1], errors
    spoken = [e["sentence_text"] for e in events if e["type"] == "audio.start"]
    assert spoken == ["Hello there.", "Left Right.", "End"], events


def test_a_half_held_is_text_pending_for_session_config(server: RunningServer) -> None:
    """A message of only a first half holds text of the utterance: a session.config then is refused, as with any text
    not yet spoken, and the pair is whole when the other half comes."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        ws.send('{"type": "input.text", "text": "\\ud83d"}')
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "wav"})
        assert json.loads(ws.recv(timeout=10))["code"] == "input_pending"
        ws.send('{"type": "input.text", "text": "\\ude00 is a smile."}')
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["\U0001f600 is a smile."], events
    assert len(audio[0]) > 1000


def test_a_session_config_mid_utterance_is_refused_once_its_text_is_all_queued_too(server: RunningServer) -> None:
    """Its first sentence cut off at a line break, nothing of the utterance waits to be cut: a session.config before
    its input.done would still change its later sentences half-way (an mp3 sentence in a pcm utterance)."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Hello there.\n"})
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "mp3", "speed": 2})
        send(ws, {"type": "input.text", "text": "More text here."})
        send(ws, {"type": "input.done"})
        events, _ = receive_through_errors(ws)
    assert [e["code"] for e in events if e["type"] == "error"] == ["input_pending"], events
    started = [(e["sentence_text"], e["format"]) for e in events if e["type"] == "audio.start"]
    assert started == [("Hello there.", "pcm"), ("More text here.", "pcm")], events


def test_a_message_refused_leaves_the_half_held_before_it(server: RunningServer) -> None:
    """A message refused for another reason (past the utterance's 4096 characters with split_granularity none)
    neither takes the half held before it nor holds its own: the client sends the rest again and the pair is whole."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm", "split_granularity": "none"})
        ws.send('{"type": "input.text", "text": "I love it \\ud83d"}')
        for refused in ('"\\ude00' + " word" * 1000 + '"', '" more' + " word" * 1000 + ' \\ud83d"'):
            ws.send('{"type": "input.text", "text": ' + refused + "}")
            error = json.loads(ws.recv(timeout=10))
            assert error["type"] == "error" and error["param"] == "text" and "Unicode" not in error["message"], error
            ws.send('{"type": "input.text", "text": "\\ude00 so much."}')  # completes the first message's half
            if refused.endswith('\\ud83d"'):  # the second time there is none: this is a lone half
                error = json.loads(ws.recv(timeout=10))
                assert "a lone surrogate (U+DE00) at 0" in error["message"], error
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["I love it \U0001f600 so much."]
    assert events[-1]["type"] == "session.done" and len(audio[0]) > 1000, events


def test_a_client_that_drops_its_connection_has_left_and_nothing_failed(server: RunningServer) -> None:
    """A client that sends a message to be answered and drops the connection at once: the answer finds it gone,
    which is the client leaving (its open utterance counted client_gone), not a session that failed (never an
    error to the alert, nor a "websocket session failed" line)."""
    before = {
        outcome: server.metric("speech_ws_utterances_total", outcome=outcome) for outcome in ("client_gone", "error")
    }
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Hello there and"})
        send(ws, {"type": "bogus"})  # answered with an error, to a client already gone
        ws.socket.shutdown(socket.SHUT_RDWR)  # no close handshake: the connection is simply lost
        ws.socket.close()

    def moved() -> dict[str, float]:
        return {
            outcome: server.metric("speech_ws_utterances_total", outcome=outcome) - before[outcome]
            for outcome in before
        }

    deadline = time.monotonic() + 30
    while not any(moved().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert moved() == {"client_gone": 1, "error": 0}
    assert not [event for event in server.log_events() if event.get("message") == "websocket session failed"]


def test_malformed_messages_are_answered_and_the_connection_kept(server: RunningServer) -> None:
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "session.config", "voice": "nobody-by-this-name"})
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["code"], error["param"]) == ("error", "voice_not_found", "voice")
        assert error["error"]["type"] == "invalid_request_error"
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "ogg"})
        assert json.loads(ws.recv(timeout=10))["param"] == "response_format"
        send(ws, {"type": "session.config", "voice": "alloy", "colour": "blue"})
        assert json.loads(ws.recv(timeout=10))["code"] == "unknown_parameter"
        send(ws, {"type": "session.config", "voice": "alloy", "word_timestamps": "please"})
        assert json.loads(ws.recv(timeout=10))["param"] == "word_timestamps"
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_json"
        # JSON Python's parser gives up on, not a 1011: nested too deep, and a number too long (named where it is)
        for unreadable, code, param in (
            ("[" * 1000 + "]" * 1000, "invalid_json", None),
            ("1" * 5000, "invalid_value", "n"),
        ):
            ws.send('{"type": "input.text", "text": "hi", "n": ' + unreadable + "}")
            error = json.loads(ws.recv(timeout=10))
            assert (error["code"], error["param"]) == (code, param)
        ws.send(b"\x00\x01")
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_message"
        send(ws, {"type": "input.text", "text": 42})
        assert json.loads(ws.recv(timeout=10))["param"] == "text"
        send(ws, {"type": "input.text"})  # no text at all: named, not taken for an empty one
        error = json.loads(ws.recv(timeout=10))
        assert (error["code"], error["param"]) == ("missing_required_parameter", "text"), error
        send(ws, {"type": "input.text", "text": "x" * (200 * 1024)})
        assert json.loads(ws.recv(timeout=10))["code"] == "message_too_large"
        send(ws, {"type": "what"})
        assert json.loads(ws.recv(timeout=10))["code"] == "unknown_message_type"
        # a field no message of its type has is named, as an unknown field of session.config is (and as POST refuses)
        for message in (
            {"type": "input.text", "text": "Never spoken.", "bogus": 1},
            {"type": "input.done", "bogus": 1},
            {"type": "session.close", "bogus": 1},
        ):
            send(ws, message)
            error = json.loads(ws.recv(timeout=10))
            assert (error["type"], error["code"], error["param"]) == ("error", "unknown_parameter", "bogus"), error
        # still serving
        send(ws, {"type": "input.text", "text": "Still here."})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
        assert events[-1]["type"] == "session.done" and len(audio[0]) > 1000


def test_a_message_without_a_type_or_with_one_not_a_string_is_told_so(server: RunningServer) -> None:
    """A message's `type` is required, a string: one without it (or null, which is the field omitted) is told it is
    missing, as `text` missing is, and one of another JSON type that it must be a string. Before, both were an
    unknown message type named in Python's words ("Unknown message type None", "True", "['x']")."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        for message in ({"text": "Never spoken."}, {"type": None, "text": "Never spoken."}):
            send(ws, message)
            error = json.loads(ws.recv(timeout=10))
            assert (error["code"], error["param"]) == ("missing_required_parameter", "type"), error
            assert error["message"] == "Missing required parameter: 'type'."
        for kind in (True, 5, ["input.text"], {"name": "input.text"}):
            send(ws, {"type": kind, "text": "Never spoken."})
            error = json.loads(ws.recv(timeout=10))
            assert (error["code"], error["param"], error["message"]) == (
                "invalid_type",
                "type",
                "'type' must be a string.",
            ), error
        send(ws, {"type": "what"})
        assert json.loads(ws.recv(timeout=10))["message"].startswith("Unknown message type 'what': ")
        send(ws, {"type": "input.text", "text": "Still here."})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["Still here."]
    # as the first message it is the session's refusal, counted under its code
    before = server.metric("speech_requests_total", stream="websocket", code="missing_required_parameter")
    with connect(ws_url(server)) as ws:
        send(ws, {"voice": "alloy"})
        error = json.loads(ws.recv(timeout=10))
        assert (error["code"], error["param"]) == ("missing_required_parameter", "type"), error
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert server.metric("speech_requests_total", stream="websocket", code="missing_required_parameter") == before + 1


@pytest.mark.parametrize("kind", ["input.text", "input.done", "session.close"])
def test_a_field_name_that_is_not_unicode_is_told_by_code_point(server: RunningServer, kind: str) -> None:
    """JSON may write half a UTF-16 pair into a key ("\\ud800"). Echoed back, the error is no valid Unicode: a strict
    client's JSON parser (Rust's serde_json) refuses the whole message, and Python's print of it raises. It is named
    by where its lone surrogate is, as the same key in session.config (or a POST body) is."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        text = {"text": "Never spoken."} if kind == "input.text" else {}
        send(ws, {"type": kind, **text, "sp\ud800ed": 1})  # written as JSON's escape: "sp\\ud800ed"
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["code"]) == ("error", "unknown_parameter"), error
        assert "U+D800, at position 2 of the name" in error["message"], error
        json.dumps(error, ensure_ascii=False).encode()  # valid Unicode throughout: raises on a lone surrogate
        send(ws, {"type": "input.text", "text": "Still here."})  # the message was refused; the session goes on
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["Still here."]
        assert events[-1]["type"] == "session.done" and len(audio[0]) > 1000


def test_a_text_frame_that_is_not_utf8_closes_1007_logged_as_one_line_without_a_traceback(
    server: RunningServer,
) -> None:
    """A text frame must hold UTF-8: one that does not closes the connection with 1007 (invalid payload data), as it
    always has. It is the client's doing, so it is logged as one info line: any client could otherwise fill the log
    with errors and tracebacks. The line is written before the close is sent: it is there once the client sees it."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        start = server.log_path.stat().st_size
        ws.send('{"type": "input.text", "text": "Café."}'.encode("latin-1"), text=True)  # é as Latin-1: no UTF-8
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1007
    with server.log_path.open("rb") as log:
        log.seek(start)
        written = log.read().decode("utf-8", errors="replace")
    assert "Traceback" not in written and "UnicodeDecodeError" not in written, written
    told = [record for record in json_log_records(written) if "utf-8" in str(record.get("message")).lower()]
    assert [(record["level"], "exception" in record) for record in told] == [("info", False)], written


def test_a_session_closed_1007_before_its_config_is_counted_and_logged_as_refused(server: RunningServer) -> None:
    """A session whose first frame is not UTF-8 never spoke: it is refused as a request whose body is no text is
    (400 `invalid_message`), counted in speech_requests_total and logged as its "api request" line, as every other
    session refused before it spoke is. It was neither."""
    before = refused_sessions(server, "invalid_message", "400")
    start = server.log_path.stat().st_size
    with connect(ws_url(server)) as ws:
        ws.send('{"type": "session.config", "voice": "Café"}'.encode("latin-1"), text=True)
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1007
    deadline = time.monotonic() + 10
    while refused_sessions(server, "invalid_message", "400") < before + 1:
        assert time.monotonic() < deadline, "the session was not counted"
        time.sleep(0.05)
    with server.log_path.open("rb") as log:
        log.seek(start)
        written = log.read().decode("utf-8", errors="replace")
    lines = [
        r for r in json_log_records(written) if r.get("message") == "api request" and r.get("method") == "WEBSOCKET"
    ]
    assert [(r["status"], r["error"]["code"]) for r in lines] == [(400, "invalid_message")], written


def closed_with(ws: ClientConnection, code: int, timeout: float) -> None:
    """Everything the server still sends is read until it closes the session, with `code`."""
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=timeout)
    assert ws.close_code == code


def counted_refused_not_gone(server: RunningServer, before: dict[str, float], gone: float, deadline: float) -> None:
    """The open utterance counted as refused once the server has ended the session (after the client saw its close:
    waited for, up to `deadline`), not as its client gone (`gone`: that count before)."""
    while utterances_counted_since(server, before)["refused"] < 1:
        assert time.monotonic() < deadline, utterances_counted_since(server, before)
        time.sleep(0.05)
    assert server.metric("speech_ws_utterances_total", outcome="client_gone") == gone


def test_a_text_frame_that_is_not_utf8_counts_the_open_utterance_as_refused(server: RunningServer) -> None:
    """The client's own fault closed the session (1007), as a message over the body limit (1009) does: its open
    utterance was refused, not its client gone (client_gone feeds the disconnect panels)."""
    before = utterances_counted(server)
    gone = server.metric("speech_ws_utterances_total", outcome="client_gone")
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "An utterance still open"})
        ws.send('{"type": "input.text", "text": "Café"}'.encode("latin-1"), text=True)
        closed_with(ws, 1007, timeout=10)
    counted_refused_not_gone(server, before, gone, time.monotonic() + 10)


GUARDED_BODY_BYTES = 128 * 1024  # the least SPEECH_MAX_BODY_BYTES may be


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Keys required, one slot and no queue, short timeouts: for auth, admission, timeouts, disconnects, the drain."""
    log_path: Path = tmp_path_factory.mktemp("ws-server") / "server.log"
    running = start_server(
        log_path,
        env={
            "SPEECH_API_KEYS": KEY,
            "SPEECH_MAX_CONCURRENCY": "1",
            "SPEECH_MAX_QUEUE": "0",
            "SPEECH_WS_CONFIG_TIMEOUT_S": "1",
            "SPEECH_EMBEDDED__WORKERS": "1",
            "SPEECH_MAX_BODY_BYTES": str(GUARDED_BODY_BYTES),
        },
    )
    yield running
    running.stop()


def test_keys_by_header_or_query_never_logged(guarded_server: RunningServer) -> None:
    with connect(ws_url(guarded_server)) as ws:
        error = json.loads(ws.recv(timeout=10))
        assert error["code"] == "invalid_api_key"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1008
    with connect(ws_url(guarded_server, "?api_key=wrong")) as ws:
        assert json.loads(ws.recv(timeout=10))["code"] == "invalid_api_key"
    for url, headers in ((ws_url(guarded_server, f"?api_key={KEY}"), None), (ws_url(guarded_server), {})):
        with connect(url, additional_headers=headers if headers is None else {"Authorization": f"Bearer {KEY}"}) as ws:
            send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
            send(ws, {"type": "input.text", "text": "Keyed."})
            send(ws, {"type": "input.done"})
            events, _ = receive_utterance(ws)
            assert events[-1]["type"] == "session.done"
    assert KEY not in guarded_server.log_path.read_text()


def test_config_timeout_closes(guarded_server: RunningServer) -> None:
    before = refused_sessions(guarded_server, "session_config_timeout", "408")
    with connect(ws_url(guarded_server, f"?api_key={KEY}")) as ws:
        assert json.loads(ws.recv(timeout=10))["code"] == "session_config_timeout"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1008
    assert refused_sessions(guarded_server, "session_config_timeout", "408") == before + 1


def long_text(sentences: int) -> str:
    return " ".join(f"This is sentence number {n} of a long story that goes on and on." for n in range(sentences))


@pytest.mark.parametrize("closing", [False, True])
def test_full_service_answers_retry_after_and_closes_1013(guarded_server: RunningServer, closing: bool) -> None:
    """`closing`: the client sends session.close right after input.done; the refusal's 1013 (try again later) still
    closes the session, not the 1000 its own close would have."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with connect(ws_url(guarded_server), additional_headers=auth) as busy:
        send(busy, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(busy, {"type": "input.text", "text": long_text(1)})
        send(busy, {"type": "input.done"})
        assert json.loads(busy.recv(timeout=30))["type"] == "audio.start"  # holds the only slot now
        with connect(ws_url(guarded_server), additional_headers=auth) as ws:
            send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
            send(ws, {"type": "input.text", "text": "Am I admitted?"})
            send(ws, {"type": "input.done"})
            if closing:
                send(ws, {"type": "session.close"})
            events, _ = receive_utterance(ws)
            error = events[-1]
            assert error["type"] == "error" and error["code"] == "rate_limit_exceeded"
            assert isinstance(error["retry_after"], int) and error["retry_after"] >= 1
            with pytest.raises(ConnectionClosed):
                while True:
                    ws.recv(timeout=10)
            assert ws.close_code == 1013


def test_disconnect_aborts_the_engine_and_frees_the_slot(guarded_server: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    aborted = guarded_server.metric("speech_aborted_total", reason="client_gone")
    with connect(ws_url(guarded_server), additional_headers=auth) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": long_text(50)})
        send(ws, {"type": "input.done"})
        assert json.loads(ws.recv(timeout=30))["type"] == "audio.start"
    deadline = time.monotonic() + 10
    while guarded_server.metric("speech_aborted_total", reason="client_gone") <= aborted:
        assert time.monotonic() < deadline, "the engine work was not aborted"
        time.sleep(0.05)
    while guarded_server.metric("speech_in_flight") != 0 or guarded_server.metric("speech_ws_sessions") != 0:
        assert time.monotonic() < deadline, "the slot or the session was not freed"
        time.sleep(0.05)
    with connect(ws_url(guarded_server), additional_headers=auth) as ws:  # the one slot serves the next client
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Next."})
        send(ws, {"type": "input.done"})
        assert receive_utterance(ws)[0][-1]["type"] == "session.done"


def test_a_message_over_the_body_limit_closes_1009_and_its_utterance_counts_as_refused(
    guarded_server: RunningServer,
) -> None:
    """The server closes the session (1009) for a message over SPEECH_MAX_BODY_BYTES: the open utterance was refused,
    and the sentence it was speaking stopped as refused, not as its client gone (the client is still there;
    client_gone feeds the disconnect panels)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    before = {outcome: guarded_server.metric("speech_ws_utterances_total", outcome=outcome) for outcome in OUTCOMES}
    gone = guarded_server.metric("speech_ws_utterances_total", outcome="client_gone")
    aborted = {
        reason: guarded_server.metric("speech_aborted_total", reason=reason) for reason in ("refused", "client_gone")
    }
    with connect(ws_url(guarded_server), additional_headers=auth, max_size=None) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": long_text(50) + " And then"})
        assert json.loads(ws.recv(timeout=30))["type"] == "audio.start"  # its first sentence is being spoken
        send(ws, {"type": "input.text", "text": "a " * GUARDED_BODY_BYTES})
        closed_with(ws, 1009, timeout=30)
    deadline = time.monotonic() + 10
    counted_refused_not_gone(guarded_server, before, gone, deadline)
    while guarded_server.metric("speech_aborted_total", reason="refused") < aborted["refused"] + 1:
        assert time.monotonic() < deadline, "the sentence being spoken was not stopped as refused"
        time.sleep(0.05)
    assert guarded_server.metric("speech_aborted_total", reason="client_gone") == aborted["client_gone"]


def test_drain_finishes_the_utterance_then_closes_1001(guarded_server: RunningServer) -> None:
    """Last in this module: it stops the server. SIGTERM while an utterance is being spoken and its last sentence has
    not even been sent: the whole utterance is still spoken, then the session closes with 1001. A session asked for
    meanwhile is refused with the HTTP 503 a request gets (a balancer retries it elsewhere)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with (
        connect(ws_url(guarded_server), additional_headers=auth) as ws,
        connect(ws_url(guarded_server), additional_headers=auth) as idle,
    ):
        send(idle, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Before the signal. And"})
        assert json.loads(ws.recv(timeout=30))["type"] == "audio.start"
        guarded_server.process.send_signal(signal.SIGTERM)
        with pytest.raises(ConnectionClosed):
            idle.recv(timeout=10)
        assert idle.close_code == 1001  # nothing open: closed at once
        with pytest.raises(InvalidStatus) as refused:  # a new session: refused before the upgrade, as a request is
            connect(ws_url(guarded_server), additional_headers={**auth, "X-Request-Id": "ws-in-drain"})
        assert refused.value.response.status_code == 503 and refused.value.response.headers["Retry-After"] == "1"
        assert refused.value.response.headers["X-Request-Id"] == "ws-in-drain"
        assert json.loads(refused.value.response.body)["error"]["code"] == "server_shutting_down"
        assert guarded_server.metric("speech_rejected_total", reason="draining") == 1  # counted as a request's is
        assert refused_sessions(guarded_server, "server_shutting_down", "503") == 1
        send(ws, {"type": "input.text", "text": " after it."})
        send(ws, {"type": "input.done"})
        events, _ = receive_through_errors(ws)
        assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["And after it."]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1001
    assert guarded_server.process.wait(timeout=30) == 0
    # the refusal is a complete answer to the upgrade: no error for it in the server's log
    assert not [e for e in guarded_server.log_events() if e.get("level") == "error"]


def run_docs_example(heading: str, server: RunningServer, folder: Path) -> str:
    """The only Python example under `heading` in docs/websocket.md, as written (only the address changed): what it
    printed."""
    import subprocess
    import sys

    from tests.support.docs import fenced_blocks

    (code,) = [code for _, code in fenced_blocks("docs/websocket.md", heading, "python")]
    code = code.replace("ws://localhost:8000", server.base_url.replace("http://", "ws://"))
    result = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_docs_example_runs(server: RunningServer, tmp_path: Path) -> None:
    assert "'session.done'" in run_docs_example("## Streaming text in: WebSocket", server, tmp_path)
    text = "Hello there. This sentence streams in word by word, as an LLM writes it."
    audio = decode((tmp_path / "speech.pcm").read_bytes(), "pcm")
    assert word_error_rate(text, transcribe(audio)) <= 0.2


def test_docs_word_timestamps_example_runs(server: RunningServer, tmp_path: Path) -> None:
    """It prints each word with its time in the utterance: every word, in order, inside the audio it wrote."""
    lines = [line.split() for line in run_docs_example("### Over the WebSocket", server, tmp_path).splitlines()]
    assert [line[2] for line in lines] == "Captions follow the voice Every word has its time".split()
    times = [float(line[0]) for line in lines]
    audio = decode((tmp_path / "captions.pcm").read_bytes(), "pcm")
    assert times == sorted(times) and times[-1] < audio.duration_s  # the 2nd sentence's words placed after the 1st
    assert word_error_rate("Captions follow the voice. Every word has its time.", transcribe(audio)) <= 0.2


def test_omni_engine_streams_over_the_websocket(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The omni engine (over the vllm-omni fakes) behind the same endpoint, with its own fields (language,
    instructions) and a voice clone from a reference clip on the Base checkpoint."""
    from app.tools.qwen3_tts_model_dir import write_model_dir
    from tests.support.server import fake_omni_command
    from tests.support.wav import tone_wav

    folder = tmp_path_factory.mktemp("ws-omni")
    model = write_model_dir(folder / "model", "base")
    env = {
        "SPEECH_OMNI__MODEL": str(model),
        "SPEECH_OMNI__DEPLOY_CONFIG": "deploy/vllm-omni/voice-clone.yaml",
        "SPEECH_OMNI__WARMUP_BATCH_SIZES": "1",
    }
    omni = start_server(folder / "server.log", env=env, command=fake_omni_command())
    try:
        import base64

        clip = "data:audio/wav;base64," + base64.b64encode(tone_wav(2.0)).decode()
        with connect(ws_url(omni)) as ws:
            config = {"type": "session.config", "task_type": "Base", "ref_audio": clip, "ref_text": "Hello."}
            send(ws, {**config, "language": "English", "response_format": "flac"})
            send(ws, {"type": "input.text", "text": "A cloned voice. It streams too."})
            send(ws, {"type": "input.done"})
            events, audio = receive_utterance(ws)
        assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}, events
        for index in (0, 1):
            assert decode(audio[index], "flac").samples.size > 0
        assert_word_timestamps_as_capable(omni, config)
    finally:
        omni.stop()


def assert_word_timestamps_as_capable(server: RunningServer, config: dict[str, object]) -> None:
    """An engine that times words sends them; one that cannot refuses `word_timestamps` at session.config with the
    very error POST /v1/audio/speech gives, and the connection carries on."""
    import httpx

    capable = httpx.get(f"{server.base_url}/v1/audio/capabilities", timeout=10).json()["word_timestamps"]
    with connect(ws_url(server)) as ws:
        send(ws, {**config, "word_timestamps": True, "response_format": "pcm"})
        if not capable:
            error = json.loads(ws.recv(timeout=30))
            assert (error["type"], error["param"], error["code"]) == ("error", "word_timestamps", "invalid_value")
            body = {k: v for k, v in config.items() if k != "type"}
            body |= {"input": "Timed words.", "stream_format": "sse", "word_timestamps": True}
            http = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=30)
            assert http.status_code == 400 and http.json() == {"error": error["error"]}
            send(ws, {**config, "response_format": "pcm"})
        send(ws, {"type": "input.text", "text": "Timed words."})
        send(ws, {"type": "input.done"})
        events, audio = receive_utterance(ws)
    assert events[-1]["type"] == "session.done", events
    if capable:
        trailer = [e for e in events if e["type"] == "audio.chunk" and e["timestamps"] is not None]
        assert [w["word"] for w in trailer[0]["timestamps"]] == ["Timed", "words"], events  # type: ignore[index]
    else:
        assert len(audio[0]) > 1000 and all(e["type"] != "audio.chunk" for e in events)


def test_every_websocket_ttfa_has_its_phase_breakdown(server: RunningServer) -> None:
    """The utterance's TTFA is observed once, and so are the phases of the sentence that first spoke, up to its first
    bytes on the socket: the dashboard's breakdown covers WebSocket traffic too, and adds up to the TTFA."""
    ttfa_before = server.metric("speech_ttfa_seconds_count")
    phases_before = server.metric("speech_ttfa_phase_seconds_count", phase="engine")
    ttfa_sum_before = server.metric("speech_ttfa_seconds_sum")
    phases_sum_before = server.metric("speech_ttfa_phase_seconds_sum")
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm"})
        for _ in range(2):  # two utterances of two sentences
            send(ws, {"type": "input.text", "text": "One sentence here. And another one."})
            send(ws, {"type": "input.done"})
            assert receive_utterance(ws)[0][-1]["type"] == "session.done"
    assert server.metric("speech_ttfa_seconds_count") - ttfa_before == 2
    assert server.metric("speech_ttfa_phase_seconds_count", phase="engine") - phases_before == 2
    ttfa_s = server.metric("speech_ttfa_seconds_sum") - ttfa_sum_before
    assert server.metric("speech_ttfa_phase_seconds_sum") - phases_sum_before == pytest.approx(ttfa_s, rel=1e-6)


def test_a_streamed_sentence_with_nothing_to_say_keeps_its_word_in_the_timestamps(server: RunningServer) -> None:
    """Text streamed in pieces: "😀." is a sentence complete as soon as the next word begins, with nothing to say.
    It waits to go with the next sentence, so its word is timed (with no length) as every word of the input is."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm", "word_timestamps": True})
        for piece in ["Hello there.", " 😀.", " World is fine."]:
            send(ws, {"type": "input.text", "text": piece})
            time.sleep(0.3)  # each piece on its own, as an LLM's tokens come
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
    assert events[-1]["type"] == "session.done", events
    words = [w for e in events if e["type"] == "audio.chunk" and e["timestamps"] for w in e["timestamps"]]  # type: ignore[union-attr]
    assert [w["word"] for w in words] == ["Hello", "there", "😀", "World", "is", "fine"], events
    emoji = words[2]
    assert emoji["start_ms"] == emoji["end_ms"]


def test_silent_words_after_the_last_sentence_was_spoken_come_with_the_utterances_end(server: RunningServer) -> None:
    """A writer that pauses after its last sentence, until that sentence has been spoken, then ends with "😊": the
    sentence's words went out with its audio, so the word is timed at the end of the utterance in `session.done`,
    not lost."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm", "word_timestamps": True})
        send(ws, {"type": "input.text", "text": "Have a great day! "})
        send(ws, {"type": "input.text", "text": "😊"})  # the next word began: the sentence is cut and spoken now
        spoken: list[dict[str, object]] = []
        while not spoken or spoken[-1]["type"] != "audio.done":  # its audio, then its words, then its end
            message = ws.recv(timeout=60)
            if isinstance(message, str):
                spoken.append(json.loads(message))
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
    (trailer,) = [e for e in spoken if e["type"] == "audio.chunk" and e["timestamps"]]
    assert [w["word"] for w in trailer["timestamps"]] == ["Have", "a", "great", "day"], spoken  # type: ignore[union-attr]
    done = events[-1]
    assert done["type"] == "session.done" and done["total_sentences"] == 1, events
    end_ms = trailer["utterance_offset_ms"] + trailer["chunk_end_ms"]  # type: ignore[operator]
    assert done["timestamps"] == [{"word": "😊", "start_ms": end_ms, "end_ms": end_ms}], done


@pytest.mark.parametrize(
    "pieces",
    [
        ["Have a great day! ", "😊"],  # an LLM's reply that ends in an emoji: nothing of the utterance left to go with
        ["Hello there. 😀.", 1.5, " Bye now."],  # the writer paused (the idle cut) after a sentence with nothing to say
    ],
)
def test_silent_words_are_timed_at_the_end_of_an_utterance_and_through_a_pause(
    server: RunningServer, pieces: list[str | float]
) -> None:
    """Every word of the input is timed, as a request's is, also where the words with nothing to say come last (the
    sentence before them already cut, at input.done) or before a pause of the writer."""
    with connect(ws_url(server)) as ws:
        send(ws, {"type": "session.config", "voice": "alloy", "response_format": "pcm", "word_timestamps": True})
        for piece in pieces:
            if isinstance(piece, float):
                time.sleep(piece)
            else:
                send(ws, {"type": "input.text", "text": piece})
        send(ws, {"type": "input.done"})
        events, _ = receive_utterance(ws)
    assert events[-1]["type"] == "session.done", events
    trailers = [e for e in events if e["type"] == "audio.chunk" and e["timestamps"]]
    words = [w["word"] for e in trailers for w in e["timestamps"]]  # type: ignore[union-attr]
    assert words == [word.strip(".!") for piece in pieces if isinstance(piece, str) for word in piece.split()], events
    last = trailers[-1]
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= last["chunk_end_ms"] for w in last["timestamps"]), last
