"""Word timestamps on the omni engine on a GPU: Qwen3-TTS has no alignment of its own, so the service times each
job's words with Whisper tiny.en's forced alignment (the `align` extra) after its audio has streamed. The servers run
random weights, whose audio is noise: these tests check the events' shape, order and bounds, not the accuracy
(tests/unit/test_forced_alignment_speech.py measures that on real speech)."""

from __future__ import annotations

import base64
import concurrent.futures
import itertools
import json

import httpx
import pytest

from tests.gpu.support import SAMPLES_PER_FRAME, model_of, speak

TOKENS = 51  # -> 50 codec frames = 4.0 s of audio
TEXT = "On Monday, Dr. Smith paid $9.99 for 3 books at 7:30 pm."
WRITTEN = ["On", "Monday", "Dr", "Smith", "paid", "$9.99", "for", "3", "books", "at", "7:30", "pm"]


@pytest.fixture(autouse=True)
def _needs_an_aligner(omni_url: str) -> None:
    """These tests time words with the server's aligner (the `align` extra: faster-whisper with Whisper tiny.en); a
    server without it refuses word_timestamps, which test_omni_websocket checks."""
    if not httpx.get(f"{omni_url}/v1/audio/capabilities", timeout=30).json()["word_timestamps"]:
        pytest.skip("the server has no word aligner (install the service's `align` extra on the GPU host)")


def sse_events(url: str, **body: object) -> list[dict]:
    response = speak(url, response_format="pcm", stream_format="sse", word_timestamps=True, **body)
    assert response.status_code == 200, response.text
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]


def pcm_samples(events: list[dict]) -> int:
    return sum(len(base64.b64decode(e["audio"])) // 2 for e in events if e["type"] == "speech.audio.delta")


def check_words(words: list[dict], written: list[str], duration_ms: float) -> None:
    assert [w["word"] for w in words] == written  # every word as written, in order
    assert all(set(w) == {"word", "start_ms", "end_ms"} for w in words)
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= duration_ms + 0.5 for w in words), (words, duration_ms)
    assert all(a["start_ms"] <= b["start_ms"] for a, b in itertools.pairwise(words)), words


def test_sse_word_timestamps_follow_the_audio(omni_url: str) -> None:
    events = sse_events(omni_url, input=TEXT, language="English", max_new_tokens=TOKENS)
    kinds = [e["type"] for e in events]
    # a token budget makes the whole text one job (with or without the sentence pipeline): one timing event, after
    # all of its audio, before done
    assert kinds[-2:] == ["speech.audio.timestamps", "speech.audio.done"], kinds
    assert set(kinds[:-2]) == {"speech.audio.delta"}
    assert pcm_samples(events) == (TOKENS - 1) * SAMPLES_PER_FRAME
    check_words(events[-2]["words"], WRITTEN, (TOKENS - 1) * SAMPLES_PER_FRAME / 24)
    assert events[-1]["usage"]["output_tokens"] == TOKENS - 1


def test_concurrent_requests_all_get_their_words(omni_url: str) -> None:
    texts = [f"Request number {i} asks for its words." for i in range(8)]

    def one(text: str) -> list[dict]:
        return sse_events(omni_url, input=text, max_new_tokens=TOKENS)

    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        results = list(pool.map(one, texts))
    for text, events in zip(texts, results, strict=True):
        timings = [e for e in events if e["type"] == "speech.audio.timestamps"]
        assert len(timings) == 1 and events[-1]["type"] == "speech.audio.done"
        check_words(timings[0]["words"], text.rstrip(".").split(), pcm_samples(events) / 24)


def test_each_sentence_is_timed_on_the_utterance_timeline(omni_url: str, sentence_tokens: int) -> None:
    """With the sentence pipeline each sentence is a job: its words follow its audio, and the second sentence's
    words lie after all of the first sentence's audio."""
    events = sse_events(omni_url, input="The first sentence is here. A second one follows it.")
    kinds = [e["type"] for e in events]
    assert kinds.count("speech.audio.timestamps") == 2 and kinds[-1] == "speech.audio.done"
    first = kinds.index("speech.audio.timestamps")
    first_ms = pcm_samples(events[:first]) / 24
    assert 0 < first_ms <= (sentence_tokens - 1) * SAMPLES_PER_FRAME / 24
    one, two = (e["words"] for e in events if e["type"] == "speech.audio.timestamps")
    check_words(one, ["The", "first", "sentence", "is", "here"], first_ms)
    check_words(two, ["A", "second", "one", "follows", "it"], pcm_samples(events) / 24)
    assert two[0]["start_ms"] + 1 >= first_ms


def test_languages_the_aligner_cannot_time_are_refused(omni_url: str) -> None:
    for body in ({"language": "Chinese", "input": "你好，世界。"}, {"input": "你好，世界。"}):
        response = speak(omni_url, stream_format="sse", word_timestamps=True, max_new_tokens=6, **body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "word_timestamps"
        assert speak(omni_url, stream_format="sse", max_new_tokens=6, **body).status_code == 200
    response = httpx.post(
        f"{omni_url}/v1/audio/speech",
        json={"model": model_of(omni_url), "voice": "vivian", "input": "Hi.", "word_timestamps": True},
        timeout=60,
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "word_timestamps"  # needs sse
