"""Word timestamps over SSE, from the embedded engine's own alignment, checked against Whisper's word timings."""

from __future__ import annotations

import base64
import json
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from loadtest.audio import DecodedAudio, transcribe
from tests.support.docs import fenced_blocks
from tests.support.server import RunningServer
from tests.support.word_timing import assert_words_cover, start_errors_ms

TEXT = (
    "The quick brown fox jumps over the lazy dog. On Monday, Dr. Smith paid $9.99 for 3 books at 7:30 pm. "
    "Then everyone went home happily."
)
# TEXT's words as the caller wrote them, in order
WRITTEN = [
    "The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog",
    "On", "Monday", "Dr", "Smith", "paid", "$9.99", "for", "3", "books", "at", "7:30", "pm",
    "Then", "everyone", "went", "home", "happily",
]  # fmt: skip


def sse_events(server: RunningServer, **body: object) -> list[dict[str, object]]:
    payload = {"model": "tts-1", "voice": "alloy", "response_format": "pcm", "stream_format": "sse", **body}
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=payload, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[len("data: ") :]) for line in response.iter_lines() if line.startswith("data: ")]


def test_word_timestamps_follow_the_input_and_agree_with_whisper(server: RunningServer) -> None:
    events = sse_events(server, input=TEXT, word_timestamps=True, seed=3)
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done"
    assert "speech.audio.timestamps" in kinds and kinds.index("speech.audio.timestamps") < len(kinds) - 1
    assert kinds.count("speech.audio.timestamps") == 3  # one per sentence
    pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    audio = DecodedAudio(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 24_000, 1, "pcm_s16le")
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]

    assert [w["word"] for w in words] == WRITTEN
    assert_words_cover(words, audio)
    diffs = start_errors_ms(words, audio)
    assert len(diffs) >= 15, diffs
    assert statistics.median(diffs) < 100, diffs  # the bar; measured: about 25 ms


def test_long_numbers_and_other_scripts_digits_are_timed_as_written(server: RunningServer) -> None:
    """A card number read digit by digit is still one word, and digits of another script keep their script: the
    words come back as the caller wrote them, each timed within the audio, in order."""
    text = "Order ١٢٣ and card 4111111111111111 ready. Call 1234567890123456789 now."
    events = sse_events(server, input=text, word_timestamps=True, seed=2)
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]
    written = ["Order", "١٢٣", "and", "card", "4111111111111111", "ready", "Call", "1234567890123456789", "now"]
    assert [w["word"] for w in words] == written
    card = words[4]
    assert card["end_ms"] - card["start_ms"] > 16 * 150  # sixteen digits spoken, not one  # type: ignore[operator]
    pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    audio = DecodedAudio(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 24_000, 1, "pcm_s16le")
    assert_words_cover(words, audio)


@pytest.mark.parametrize("text", ["I love 😀 pizza. Fine.", "I love pizza. 😀. Fine."])
def test_a_word_with_nothing_to_say_is_timed_where_it_stands_even_as_a_sentence_of_its_own(
    server: RunningServer, text: str
) -> None:
    """Every word of the input appears once (docs/websocket.md): an emoji the voice says nothing for too, with no
    length, whether inside a sentence or as a sentence of its own (which had dropped it)."""
    events = sse_events(server, input=text, word_timestamps=True, seed=4)
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]
    expected = ["I", "love", "😀", "pizza", "Fine"] if "😀 pizza" in text else ["I", "love", "pizza", "😀", "Fine"]
    assert [w["word"] for w in words] == expected
    emoji = next(w for w in words if w["word"] == "😀")
    assert emoji["start_ms"] == emoji["end_ms"]
    starts = [w["start_ms"] for w in words]
    assert starts == sorted(starts)


def test_a_symbol_the_voice_reads_is_spoken_and_timed_where_it_stands_alone(server: RunningServer) -> None:
    """ "&" is Unicode punctuation that the voice reads ("and"): alone after a sentence's end it was dropped, neither
    spoken nor among the words, where inside a sentence ("Tom & Jerry") it is both."""
    events = sse_events(server, input="Hello there. &", word_timestamps=True, seed=4)
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]
    assert [w["word"] for w in words] == ["Hello", "there", "&"]
    assert words[-1]["end_ms"] > words[-1]["start_ms"]  # said, not an instant  # type: ignore[operator]


def test_markdowns_marks_alone_are_no_words_and_an_abbreviation_keeps_its_full_stop(server: RunningServer) -> None:
    """What an LLM writes, timed as written: a heading's underline ("===") was a word, and said ("equals"); a strike's
    tildes stayed on the word they wrap; a rule written with spaces ("* * *") was three words; "x.ai." kept the
    sentence's full stop and "Lt.Col." lost its own."""
    text = "Setup\n=====\nRun the ~~old~~ tools.\n\n* * *\n\nVisit x.ai. Ask Lt.Col. Smith."
    events = sse_events(server, input=text, word_timestamps=True, seed=5)
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]
    written = ["Setup", "Run", "the", "old", "tools", "Visit", "x.ai", "Ask", "Lt.Col.", "Smith"]
    assert [w["word"] for w in words] == written
    pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    audio = DecodedAudio(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 24_000, 1, "pcm_s16le")
    assert_words_cover(words, audio)
    assert "equal" not in transcribe(audio).lower()


def test_word_timestamps_follow_speed(server: RunningServer) -> None:
    """At speed 2 the audio is time-stretched: the word times shrink with it and stay within the audio."""
    normal = sse_events(server, input="The quick brown fox jumps over the lazy dog.", word_timestamps=True, seed=1)
    fast = sse_events(
        server, input="The quick brown fox jumps over the lazy dog.", word_timestamps=True, seed=1, speed=2.0
    )
    for events in (normal, fast):
        pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
        last = [e for e in events if e["type"] == "speech.audio.timestamps"][-1]["words"][-1]  # type: ignore[index]
        assert last["end_ms"] <= len(pcm) / 2 / 24 + 0.5  # type: ignore[index]
    dog_normal = normal[-2]["words"][-1]["start_ms"]  # type: ignore[index]
    dog_fast = fast[-2]["words"][-1]["start_ms"]  # type: ignore[index]
    assert 0.4 < dog_fast / dog_normal < 0.65


def test_word_timestamps_need_sse(server: RunningServer) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": "Hello.", "word_timestamps": True},
        timeout=30,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "word_timestamps"
    assert "sse" in error["message"]


def test_no_timestamp_events_unless_asked(server: RunningServer) -> None:
    events = sse_events(server, input="Hello there. How are you?")
    assert all(event["type"] != "speech.audio.timestamps" for event in events)


def test_the_docs_example_prints_the_words_as_written(server: RunningServer, tmp_path: Path) -> None:
    """docs/websocket.md's word-timestamps example over server-sent events, run as written (only the address
    changed)."""
    (code,) = fenced_blocks("docs/websocket.md", "### Over HTTP (server-sent events)", "python")
    script = tmp_path / "timestamps.py"
    script.write_text(code[1].replace("http://localhost:8000", server.base_url))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    written = ["Dr", "Smith", "paid", "$9.99", "at", "7:30", "pm", "Then", "he", "went", "home"]
    assert [row[2] for row in rows] == written
    starts = [int(row[0]) for row in rows]
    assert starts == sorted(starts) and all(int(row[0]) <= int(row[1]) for row in rows)
