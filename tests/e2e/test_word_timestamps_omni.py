"""Word timestamps on the omni engine (the vllm-omni fakes behind a real server), over SSE and the WebSocket: Qwen3-TTS
has no alignment of its own, so Whisper tiny.en's forced alignment times the words after each job's audio. The fakes
speak noise, so these tests check the events' shape, order and bounds; tests/unit/test_forced_alignment_speech.py
checks accuracy on real speech."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.support.server import RunningServer, fake_omni_command, json_log_records, start_server

TEXT = "On Monday, Dr. Smith paid $9.99 for 3 books. Then everyone went home at 7:30 pm!"
WRITTEN = ["On", "Monday", "Dr", "Smith", "paid", "$9.99", "for", "3", "books", "Then", "everyone", "went", "home"]
WRITTEN += ["at", "7:30", "pm"]
RATE = 24_000


@pytest.fixture(scope="module", params=[False, True], ids=["whole-text", "sentence-pipeline"])
def omni(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("omni-timestamps")
    env = {
        "SPEECH_OMNI__MODEL": str(write_model_dir(folder / "model", "custom_voice")),
        "SPEECH_OMNI__DEPLOY_CONFIG": "deploy/vllm-omni/customvoice.yaml",
        "SPEECH_OMNI__WARMUP_BATCH_SIZES": "1",
        "SPEECH_OMNI__SENTENCE_PIPELINE": "true" if request.param else "false",
    }
    server = start_server(folder / "server.log", env=env, command=fake_omni_command())
    yield server
    server.stop()


def sse(server: RunningServer, **body: object) -> httpx.Response:
    payload = {"voice": "vivian", "input": TEXT, "response_format": "pcm", "stream_format": "sse", **body}
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=payload, timeout=120)


def events_of(response: httpx.Response) -> list[dict[str, object]]:
    assert response.status_code == 200, response.text
    return [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]


def test_timestamps_follow_the_audio_and_come_before_done(omni: RunningServer) -> None:
    events = events_of(sse(omni, word_timestamps=True, language="English"))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and "error" not in kinds
    pipeline = omni.env["SPEECH_OMNI__SENTENCE_PIPELINE"] == "true"
    assert kinds.count("speech.audio.timestamps") == (2 if pipeline else 1)  # per job: a sentence, or the text
    first_timing = kinds.index("speech.audio.timestamps")
    assert kinds[first_timing - 1] == "speech.audio.delta"  # a job's words follow its audio
    pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    duration_ms = len(pcm) / 2 / RATE * 1000
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]  # type: ignore[attr-defined]
    assert [w["word"] for w in words] == WRITTEN  # as written, every one, in order
    assert all(set(w) == {"word", "start_ms", "end_ms"} for w in words)
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= duration_ms + 0.5 for w in words), (words, duration_ms)
    assert all(a["start_ms"] <= b["start_ms"] for a, b in itertools.pairwise(words)), words
    if pipeline:  # each sentence's words lie in that sentence's audio: the second's after all of the first's
        sentence_one = next(e for e in events if e["type"] == "speech.audio.timestamps")["words"]
        assert [w["word"] for w in sentence_one] == WRITTEN[:9]  # type: ignore[attr-defined]
        first_pcm = b"".join(base64.b64decode(str(e["audio"])) for e in events[:first_timing] if "audio" in e)
        first_ms = len(first_pcm) / 2 / RATE * 1000
        assert words[8]["end_ms"] <= first_ms + 0.5 <= words[9]["start_ms"] + 1, (words, first_ms)


def test_the_aligner_is_loaded_at_start(omni: RunningServer) -> None:
    records = json_log_records(omni.log_path.read_text())
    assert any(r.get("message") == "word aligner ready" for r in records), records[-20:]


def test_languages_the_aligner_cannot_time_are_refused_before_any_audio(omni: RunningServer) -> None:
    for body in (
        {"language": "French", "input": "Bonjour tout le monde."},
        {"language": "Auto", "input": "你好，世界。"},
        {"input": "Hello 世界."},  # language omitted: the text decides
    ):
        response = sse(omni, word_timestamps=True, **body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "word_timestamps" and error["type"] == "invalid_request_error", error
        assert "English" in error["message"]
        assert sse(omni, **body).status_code == 200  # the same request without timestamps is spoken


def test_no_timestamps_unless_asked(omni: RunningServer) -> None:
    kinds = [event["type"] for event in events_of(sse(omni))]
    assert "speech.audio.timestamps" not in kinds and kinds[-1] == "speech.audio.done"


def test_the_websocket_carries_the_aligned_words_per_sentence(omni: RunningServer) -> None:
    """The WebSocket reads the same chunks: each sentence's trailing audio.chunk has its words, timed from the
    sentence, within its audio; a language the aligner cannot time is refused at session.config (a first config: one
    error, then the socket closes, as vllm-omni 0.30's does)."""
    url = omni.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        french = {"type": "session.config", "voice": "vivian", "language": "French", "word_timestamps": True}
        ws.send(json.dumps(french))
        error = json.loads(ws.recv(timeout=30))
        assert (error["type"], error["param"]) == ("error", "word_timestamps"), error
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    with connect(url) as ws:
        config = {"type": "session.config", "voice": "vivian", "response_format": "pcm", "word_timestamps": True}
        ws.send(json.dumps(config))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        messages = []
        while (message := json.loads(ws.recv(timeout=60)))["type"] != "session.done":
            assert message["type"] != "error", message
            messages.append(message)
    trailers = [m for m in messages if m["type"] == "audio.chunk" and not m["audio_b64"]]
    assert [[w["word"] for w in t["timestamps"]] for t in trailers] == [WRITTEN[:9], WRITTEN[9:]]
    for trailer in trailers:
        pcm = b"".join(
            base64.b64decode(m["audio_b64"])
            for m in messages
            if m["type"] == "audio.chunk" and m["audio_b64"] and m["sentence_index"] == trailer["sentence_index"]
        )
        assert trailer["chunk_end_ms"] == round(len(pcm) / 2 / RATE * 1000)
        words = trailer["timestamps"]
        assert all(0 <= w["start_ms"] <= w["end_ms"] <= trailer["chunk_end_ms"] for w in words), words
        assert all(a["start_ms"] <= b["start_ms"] for a, b in itertools.pairwise(words)), words
