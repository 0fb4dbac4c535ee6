"""`speech-loadtest --ws`, the pure parts: tokens, the token that completes the first sentence, the text check, the
listener across sentences (gaps at the joins, stalls inside), decoding one file per sentence, the report and the
command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

import loadtest.ws
from app.audio.encoders import create_encoder, wav_stream_header
from loadtest.cli import parse_args
from loadtest.measure import RequestResult
from loadtest.playback import listen_sentences, simulate_playback
from loadtest.report import aggregate, summary_markdown, write_outputs
from loadtest.runner import LevelRun
from loadtest.targets import Target
from loadtest.ws import (
    ProtocolError,
    UtteranceResult,
    check_sentences,
    completing_token,
    decode_sentences,
    measure_utterance,
    tokens,
)

RATE = 24_000
SECOND = 2 * RATE  # bytes of one second of 16-bit mono pcm


# -- tokens and the first sentence -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["One two three.", "  Leading space. And\ntwo lines.\n", "word", "Trailing   spaces.   ", "中文没有空格。第二句。"],
)
def test_tokens_are_words_with_their_whitespace_and_add_up_to_the_text(text: str) -> None:
    pieces = tokens(text)
    assert "".join(pieces) == text
    assert len(pieces) == len(text.split())
    assert all(piece.strip() and len(piece.split()) == 1 for piece in pieces)


def test_tokens_of_nothing() -> None:
    assert tokens("") == []
    assert tokens("   ") == ["   "]  # still sent: nothing is dropped silently


def test_the_token_that_completes_the_first_sentence_holds_its_last_character() -> None:
    sent = tokens("Hello there. How are you? Fine.")
    assert completing_token(sent, "Hello there.") == 1  # "there. " is the second token
    assert completing_token(sent, "Hello there. How are you?") == 4
    # the server normalises whitespace (a line break, runs of spaces) in the sentences it reports
    assert completing_token(tokens("Hello\n\n  there. How"), "Hello there.") == 1
    # a sentence the text does not begin with: no answer rather than a wrong one
    assert completing_token(sent, "Goodbye there.") is None
    assert completing_token(sent, "Hello there. How are you? Fine. More.") is None


def test_the_sentences_spoken_must_be_the_text_sent() -> None:
    text = "One thing. Another thing.\nA third."
    check_sentences(text, ["One thing.", "Another thing.", "A third."], 3)
    check_sentences(text, ["One thing. Another thing.", "A third."], None)  # the server may join or cut
    with pytest.raises(ProtocolError) as lost:
        check_sentences(text, ["One thing.", "A third."], 2)
    assert lost.value.code == "text_mismatch"
    with pytest.raises(ProtocolError) as miscounted:
        check_sentences(text, ["One thing.", "Another thing.", "A third."], 4)
    assert miscounted.value.code == "sentence_count_mismatch"


# -- the listener across sentences -------------------------------------------------------------------------------------
def test_waits_say_where_the_playhead_ran_dry() -> None:
    playback = simulate_playback([(0.0, 0.2), (0.5, 0.4), (1.0, 2.0)])
    assert playback is not None
    assert [w.at_audio_s for w in playback.waits] == [0.2, 0.4]
    assert [w.waited_s for w in playback.waits] == pytest.approx([0.3, 0.3])
    assert playback.stalls == 2 and playback.stalled_s == pytest.approx(0.6)


def test_silence_at_a_join_is_a_gap_and_inside_a_sentence_a_stall() -> None:
    # sentence 0: 1 s of pcm at 0.1 s; sentence 1: its first half second at 1.6 s (0.5 s after sentence 0 ran out),
    # its second half at 2.6 s (0.5 s after the first half ran out); sentence 2 arrives while sentence 1 still plays
    sentences = [
        (bytes(SECOND), [(0.1, SECOND)]),
        (bytes(SECOND), [(1.6, SECOND // 2), (2.6, SECOND)]),
        (bytes(SECOND), [(2.7, SECOND)]),
    ]
    heard = listen_sentences(sentences, "pcm", RATE, 0.0)
    assert heard is not None
    assert heard.gaps_s == pytest.approx((0.5, 0.0))
    assert heard.playback.stalls == 1 and heard.playback.stalled_s == pytest.approx(0.5)
    assert heard.playback.start_s == 0.1 and heard.playback.audio_s == 3.0
    assert heard.playback.least_in_hand_s is None  # a join's gap would pass for the stalls' margin


def test_each_sentence_is_a_file_of_its_own() -> None:
    # wav: every sentence starts with its own header, which plays nothing: the next sentence is there only once its
    # first samples are
    header = wav_stream_header(RATE)
    first, second = header + bytes(SECOND), header + bytes(SECOND)
    arrivals_1 = [(0.0, len(first))]
    arrivals_2 = [(0.5, len(header)), (1.25, len(second))]  # the header alone comes early
    heard = listen_sentences([(first, arrivals_1), (second, arrivals_2)], "wav", RATE, 0.0)
    assert heard is not None
    assert heard.gaps_s == pytest.approx((0.25,))
    assert heard.playback.stalls == 0 and heard.playback.audio_s == 2.0


def test_a_buffer_long_enough_hears_no_gap() -> None:
    sentences = [(bytes(SECOND // 2), [(0.0, SECOND // 2)]), (bytes(SECOND), [(0.8, SECOND)])]
    no_buffer = listen_sentences(sentences, "pcm", RATE, 0.0)
    buffered = listen_sentences(sentences, "pcm", RATE, 1.5)
    assert no_buffer is not None and buffered is not None
    assert no_buffer.gaps_s == pytest.approx((0.3,))
    assert buffered.gaps_s == (0.0,) and buffered.playback.start_s == 0.8


def test_an_unreadable_sentence_gives_no_playback_rather_than_a_guess() -> None:
    assert listen_sentences([(b"not audio" * 20, [(0.1, 180)])], "mp3", RATE, 0.0) is None


def encoded(fmt: str, seconds: float, hz: float) -> bytes:
    encoder = create_encoder(fmt, RATE)
    try:
        t = np.arange(round(seconds * RATE)) / RATE
        return encoder.encode((0.4 * np.sin(2 * np.pi * hz * t)).astype(np.float32)) + encoder.finish()
    finally:
        encoder.close()


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav"])
def test_an_utterance_decodes_sentence_by_sentence(fmt: str) -> None:
    payloads = [encoded(fmt, 0.5, 220), encoded(fmt, 1.0, 440)]
    audio = decode_sentences(payloads, fmt, RATE)
    assert audio.duration_s == pytest.approx(1.5, abs=0.15)  # both files (each with its codec's padding)
    half_second = audio.sample_rate // 2
    spectrum = np.abs(np.fft.rfft(audio.samples[-2 * half_second : -half_second]))
    assert np.argmax(spectrum) / 0.5 == pytest.approx(440, abs=4)  # the second sentence comes second
    result = UtteranceResult(0, "t", 101, True, sample_rate=RATE, sentence_audio=payloads)
    assert result.kept_audio and len(result.decode_audio(fmt).samples) == len(audio.samples)


# -- the report ------------------------------------------------------------------------------------------------------
def utterance(gaps: list[float], stalls: int = 0) -> UtteranceResult:
    return UtteranceResult(
        0, "t", 101, True, ttfa_s=0.2, e2e_s=4.0, audio_s=12.0, stalls=stalls, stalled_s=0.1 * stalls,
        connect_s=0.003, text_send_s=3.5, first_sentence_sent_s=0.9, sentences=len(gaps) + 1, gaps_s=gaps,
    )  # fmt: skip


def ws_meta() -> dict[str, object]:
    return {
        "started_at": "now",
        "response_format": "opus",
        "stream_format": None,
        "transport": "websocket",
        "text_rate": 20.0,
        "texts": "English/long",
        "requests": 4,
        "warmup": 0,
        "playback_buffer_ms": 0.0,
        "targets": [{"index": 0, "label": "A: http://a", "model": "m", "voice": "v"}],
    }


def ws_level(results: list[UtteranceResult], concurrency: int = 2) -> LevelRun:
    return LevelRun(Target(0, "http://a", "m", "v"), "concurrency", concurrency, list(results), 10.0, concurrency)


def test_gaps_per_level_over_every_join(tmp_path: Path) -> None:
    refused = UtteranceResult(0, "t", 101, False, "rate_limit_exceeded", error_message="full")
    results = [utterance([0.0, 0.0]), utterance([0.0, 0.4], stalls=1), utterance([]), utterance([0.2]), refused]
    run = aggregate(ws_level(results), None)
    stream = run["text_stream"]
    assert (stream["utterances"], stream["sentences"], stream["joins"]) == (4, 9, 5)
    assert stream["gapped_share"] == pytest.approx(2 / 5)
    assert stream["gap_s"] == {"p50": 0.0, "p95": pytest.approx(0.36), "max": 0.4}
    assert stream["text_send_s"]["p50"] == 3.5 and stream["first_sentence_sent_s"]["p50"] == 0.9
    assert run["playback"]["stalled_share"] == pytest.approx(1 / 4)
    assert run["error_groups"] == [{"status": 101, "code": "rate_limit_exceeded", "count": 1, "message": "full"}]
    assert run["per_request"][1]["gaps_s"] == [0.0, 0.4] and run["per_request"][1]["sentences"] == 3

    text = summary_markdown(ws_meta(), [run])
    assert "text of each utterance sent at 20 tokens (words) per second" in text
    assert "| A: http://a | 2 | 4 | 9 | 5 | 40% | 0 | 360 | 400 | 3.50 | 0.90 |" in text
    assert "  - 101 rate_limit_exceeded ×1: full" in text

    paths = write_outputs(ws_meta(), [run, aggregate(ws_level([utterance([0.1])], 4), None)], tmp_path)
    assert paths["gaps_plot"].read_bytes()[:4] == b"\x89PNG"
    saved = json.loads(paths["results"].read_text())
    assert saved["runs"][1]["text_stream"]["gap_s"]["max"] == 0.1


def test_only_streamed_text_adds_its_section() -> None:
    http = LevelRun(Target(0, "http://a"), "concurrency", 1, [RequestResult(0, "t", 200, True, ttfa_s=0.1)])
    assert "text_stream" not in aggregate(http, None)
    all_failed = aggregate(ws_level([UtteranceResult(0, "t", 0, False, "client_OSError")]), None)
    assert all_failed["text_stream"]["utterances"] == 0 and all_failed["text_stream"]["gap_s"]["p50"] is None


# -- the command line ------------------------------------------------------------------------------------------------
def test_ws_options() -> None:
    args = parse_args(["--target", "http://a", "--ws"])
    assert (args.ws, args.text_rate, args.texts) == (True, 20.0, "long")  # texts of several sentences by default
    assert parse_args(["--target", "http://a"]).texts == "medium"
    assert parse_args(["--target", "http://a", "--ws", "--texts", "short", "--text-rate", "5"]).texts == "short"


@pytest.mark.parametrize(
    "argv",
    [
        ["--ws", "--text-rate", "0"],
        ["--ws", "--stream-format", "sse"],
        ["--ws", "--target", "engine+http://b"],
    ],
)
def test_ws_refuses_what_it_cannot_do(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--target", "http://a", *argv])
    assert "--" in capsys.readouterr().err


def test_the_stream_url_follows_the_scheme() -> None:
    assert Target(0, "http://a:8000").next_stream_url() == "ws://a:8000/v1/audio/speech/stream"
    assert Target(0, "https://a").next_stream_url() == "wss://a/v1/audio/speech/stream"


@pytest.mark.parametrize("close_first", [True, False])
async def test_a_refusal_told_as_the_session_opens_counts_under_its_code(
    close_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that refuses a session at once (a wrong key: `error` `invalid_api_key`, then 1008) says why before it
    closes: the refusal counts under its code, whether its close reached the client before its session.config went
    or after (it was counted `connection_closed_1008`, its message lost, when the close came first)."""

    async def refuse(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "error", "code": "invalid_api_key", "message": "Invalid API key."}))
        await ws.close(1008)

    @contextlib.asynccontextmanager
    async def connected_after_the_refusal(*args: Any, **kwargs: Any) -> AsyncIterator[ClientConnection]:
        async with connect(*args, **kwargs) as ws:
            await asyncio.sleep(0.2)  # the refusal and its close arrive before the client sends anything
            yield ws

    if close_first:
        monkeypatch.setattr(loadtest.ws, "connect", connected_after_the_refusal)
    async with serve(refuse, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        result = await measure_utterance(
            Target(0, f"http://127.0.0.1:{port}", "m", "v"), "Hello there.", "pcm", 20.0, False, timeout_s=10
        )
    assert (result.ok, result.error_code, result.error_message) == (False, "invalid_api_key", "Invalid API key.")
