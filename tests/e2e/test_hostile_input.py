"""Hostile and extreme input against the real server: a schema fuzzer, odd text, the longest text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest.audio import DecodedAudio, decode, normalise, transcribe, word_error_rate
from tests.support.server import RunningServer, raw_answer


def test_schemathesis_finds_no_server_error(server: RunningServer) -> None:
    """Up to 500 generated requests per operation, over 5,000 across the 11 (valid and invalid): never a 5xx. (1,000
    per operation took twice as long, about 3 minutes of the suite, spent generating in schemathesis itself.)"""
    script = Path(sys.executable).parent / "schemathesis"
    done = subprocess.run(
        [
            str(script),
            "run",
            f"{server.base_url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "-n",
            "500",
            "--generation-deterministic",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    generated, passed = map(int, re.search(r"(\d+) generated, (\d+) passed", done.stdout).groups())
    assert generated >= 5000 and passed == generated
    assert server.process.poll() is None


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("Hello\u0000 wor\u0007ld, \u001b[31mred\u001b[0m and \u202eright to left\u202c.", 200),
        ("Tabs\tand\r\nnew\nlines\u2028and paragraph\u2029separators.", 200),
        ("Zero\u200bwidth\ufeff joiners and 🎉 emoji.", 200),
        ("\u0000\u0001\u0002", 400),
        ("🎉🎉🎉", 400),
        ('<speak>Hello <break time="500ms"/> world.</speak>', 400),  # SSML: refused, not read out tag by tag
        ('\ufeff<?xml version="1.0"?><speak>Hello.</speak>', 400),  # after a byte-order mark and its prolog too
        ("A <speak> tag opens SSML.", 200),
    ],
)
def test_odd_text_never_fails_the_server(server: RunningServer, text: str, status: int) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"},
    )
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["param"] == "input"
        if "<speak>" in text:
            assert "SSML" in response.json()["error"]["message"]


def test_lone_surrogates_are_a_400_naming_input(server: RunningServer) -> None:
    raw = b'{"model": "tts-1", "voice": "alloy", "input": "Hello \\ud800 world \\udfff."}'
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"


FIRST = "The old lighthouse stood alone on the northern cliff above the sea."
LAST = "And that is where the story of the lighthouse keeper finally comes to an end."
MIDDLE = (
    "Every evening the keeper climbed the narrow stairs to light the great lamp. Ships far out in the dark water "
    "watched for its steady beam, and sailors said a quiet thank you as they passed. In winter the storms were wild, "
    "and the waves threw spray high against the windows. "
)


def test_long_text_is_spoken_completely(server: RunningServer) -> None:
    text = FIRST + " " + MIDDLE * 13 + LAST
    assert 3000 <= len(text) <= 4096
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=300,
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"},
    )
    assert response.status_code == 200
    audio = decode(response.content, "wav")
    assert audio.duration_s > 150  # about 3500 characters of speech
    head = DecodedAudio(audio.samples[: 6 * audio.sample_rate], audio.sample_rate, 1, "wav")
    tail = DecodedAudio(audio.samples[-7 * audio.sample_rate :], audio.sample_rate, 1, "wav")
    first_words, last_words = len(FIRST.split()), len(LAST.split())
    heard_first = " ".join(normalise(transcribe(head)).split()[:first_words])
    heard_last = " ".join(normalise(transcribe(tail)).split()[-last_words:])
    assert word_error_rate(FIRST, heard_first) <= 0.2, heard_first
    assert word_error_rate(LAST, heard_last) <= 0.2, heard_last  # the very end is there: nothing was dropped


def test_sentences_are_joined_with_natural_pauses(server: RunningServer) -> None:
    """Each join is a pause (the engine's own ~0.7 s of padding trimmed), present but never dragging on."""
    text = " ".join(["This sentence is one of several."] * 6)
    audio = decode(
        httpx.post(
            f"{server.base_url}/v1/audio/speech",
            timeout=60,
            json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"},
        ).content,
        "pcm",
    )
    samples = audio.samples
    gaps = _silent_runs(samples, audio.sample_rate)
    assert len(gaps) >= 5 and max(gaps) < 0.6  # a pause between each pair of sentences, none dragging on


def _silent_runs(samples, rate: int) -> list[float]:
    loud = abs(samples) >= 0.01
    runs, length = [], 0
    for is_loud in loud[int(0.4 * rate) : -int(0.4 * rate)]:
        if is_loud:
            if length > 0.15 * rate:
                runs.append(length / rate)
            length = 0
        else:
            length += 1
    return runs


HOSTILE = ["\\ud800", "\\udc80abc", "ok\\u0000", "\\u001b[31mred", "next\\u0085line", "\\u202eevil"]  # JSON escapes
SPEECH_FIELDS = ["model", "voice", "voice.id", "instructions", "language", "ref_text", "ref_audio"]


def speech_body_with(field: str, hostile: str) -> bytes:
    fields = {"model": '"tts-1"', "voice": '"alloy"', "input": '"Hello there."'}
    if field == "voice.id":
        fields["voice"] = f'{{"id": "{hostile}"}}'
    else:
        fields[field] = f'"{hostile}"'
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize("field", SPEECH_FIELDS)
def test_every_text_field_refuses_invalid_unicode_and_control_characters(server: RunningServer, field: str) -> None:
    for hostile in HOSTILE:
        response = httpx.post(
            f"{server.base_url}/v1/audio/speech",
            content=speech_body_with(field, hostile),
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 400, (field, hostile, response.text)
        assert response.json()["error"]["param"] == field.split(".")[0], (field, hostile)
        assert response.text.isascii()  # whatever is echoed comes back escaped


# (control bytes in a header never reach the application: the HTTP parser refuses the request with its own 400)
@pytest.mark.parametrize("value", [b"\xff\xfe", b"caf\xc3\xa9", b"\xed\xa0\x80"])
def test_request_id_that_is_not_printable_ascii_is_a_400(server: RunningServer, value: bytes) -> None:
    body = b'{"model": "tts-1", "voice": "alloy", "input": "Hi."}'
    request = (
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nX-Request-Id: " + value + b"\r\n\r\n" + body
    )
    status, headers, payload = raw_answer(server, request)
    assert status.startswith("HTTP/1.1 400"), (status, payload[:300])
    assert json.loads(payload)["error"]["param"] == "X-Request-Id"
    assert not any(value.decode("latin-1") in echoed for echoed in headers.values())  # never echoed into a header


def test_hostile_fields_leave_the_log_clean(server: RunningServer) -> None:
    for hostile in HOSTILE:
        httpx.post(
            f"{server.base_url}/v1/audio/speech",
            content=speech_body_with("voice", hostile),
            headers={"content-type": "application/json"},
            timeout=30,
        )
    text = server.log_path.read_text(encoding="utf-8")
    assert not any(ch in text for ch in "\x00\x1b\x85\u202e")  # escaped in the JSON lines, never raw
    assert all(e.get("status") != 500 for e in server.log_events())


@pytest.mark.parametrize(
    "text",
    [
        "The code is " + "9" * 40 + ".",
        "Hello there. The code is " + "9" * 60 + ". Goodbye.",
        "Hello. Account " + "1,000," * 20 + "000 is yours.",
        "Pay $" + "9" * 100 + " today.",
    ],
)
def test_numbers_of_any_length_are_spoken(server: RunningServer, text: str) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"},
    )  # a stream cut mid-body raises here
    assert response.status_code == 200, response.text
    assert decode(response.content, "wav").duration_s > 2


@pytest.mark.parametrize("word", ["supercalifragilisticexpialidocious", "#throwbackthursdayvibesforever"])
def test_a_long_unknown_word_is_spoken_to_its_last_letter(server: RunningServer, word: str) -> None:
    """The voice's reader of unknown words reads 24 letters; a word of ten times as many letters is still read to its
    end (before: 1.6 s of audio for 340 letters where the 34 alone took 2.4 s), and so is a long hashtag's ending."""

    def seconds(text: str) -> float:
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
        response = httpx.post(f"{server.base_url}/v1/audio/speech", timeout=120, json=body)
        assert response.status_code == 200, response.text
        return decode(response.content, "wav").duration_s

    once, repeated = seconds(word), seconds(word.lstrip("#") * 10)
    assert repeated > 6 * once, (once, repeated)


def test_a_later_sentence_in_another_script_is_refused_before_any_audio(server: RunningServer) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={
            "model": "tts-1",
            "voice": "alloy",
            "input": "Hello there, how are you today? 你好世界。 And goodbye now.",
            "response_format": "pcm",
        },
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input" and "你好世界" in error["message"]


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        ("Add \u00bd cup of water.", "half"),  # a vulgar fraction: read as 1/2
        ("The room is 20 m\u00b2 in all.", "m2"),  # a superscript two (the ASR writes what it heard as m2)
        ("Step \u2460 comes first.", "step 1"),  # a circled digit
        ("King Henry \u216b was here.", "henry xii"),  # a roman numeral
        ("\uff26\uff35\uff2c\uff2c speed ahead.", "full"),  # full-width letters
    ],
)
def test_english_in_compatibility_characters_is_read_not_refused(server: RunningServer, text: str, heard: str) -> None:
    """Characters an LLM writes in English text (`½`, `m²`, `①`, `Ⅻ`, `ＦＵＬＬ`) are numbers or Latin letters in
    another form, not another script: read as Unicode's compatibility decomposition makes them (heard by the ASR),
    never refused as a "foreign script"; word timestamps name them as written."""
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", timeout=60, json=body)
    assert response.status_code == 200, response.text
    assert heard in normalise(transcribe(decode(response.content, "wav"))), text
    timed = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={**body, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True},
    )
    assert timed.status_code == 200, timed.text
    events = [json.loads(line[6:]) for line in timed.text.splitlines() if line.startswith("data: ")]
    words = [w["word"] for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    assert words == text.rstrip(".").split(), words


@pytest.mark.parametrize(
    ("text", "heard", "unheard"),
    [
        ("# Getting started", "getting started", "hashtag"),  # a Markdown heading's mark
        ("Please install version 3.11.2 today.", "version 3 11 2 today", "3112"),  # heard "3.11.2", not "3112"
    ],
)
def test_what_an_llm_writes_is_read_as_a_listener_expects(
    server: RunningServer, text: str, heard: str, unheard: str
) -> None:
    """Markdown marks and numbers written as LLMs write them: read as a person would read them aloud (heard by the
    ASR), not as their symbols or as amounts."""
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", timeout=60, json=body)
    assert response.status_code == 200, response.text
    transcript = normalise(transcribe(decode(response.content, "wav")))
    assert heard in transcript and unheard not in transcript, (text, transcript)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_speed_that_is_no_number_is_refused_as_such(server: RunningServer, value: str) -> None:
    """JSON as Python reads it takes NaN and Infinity: refused naming `speed` for what they are (before, NaN was
    told it should be at most 4)."""
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        content='{"input": "Hello.", "speed": ' + value + "}",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "speed" and "finite" in error["message"], error
