"""vllm-omni 0.30's own clients' request shapes against the real server on the embedded engine, written from reading
them (examples/online_serving/qwen3_tts: openai_speech_client.py, tts_common.py, streaming_speech_client.py), plus
every whole file (`stream: false`) read back with python-soundfile and FFmpeg. The request of `vllm bench serve
--omni` is replayed in test_vllm_bench_request.py."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from loadtest.audio import decode, transcribe, word_error_rate
from tests.support.server import RunningServer, free_port, server_command, wait_until

SENTENCE = "The quick brown fox jumps over the lazy dog."


def speech(server: RunningServer, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=120)


# -- openai_speech_client.py / tts_common.py -------------------------------------------------------------------------


def test_the_voice_listing_a_0_30_client_reads(server: RunningServer) -> None:
    """tts_common.fetch_voices hands `voices` to a dropdown of names; this server's objects are under `data`."""
    body = httpx.get(f"{server.base_url}/v1/audio/voices", timeout=30).json()
    assert body["voices"] == ["heart", "default"] and all(isinstance(name, str) for name in body["voices"])
    assert body["uploaded_voices"] == []
    assert [voice["id"] for voice in body["data"]] == ["heart"] and body["object"] == "list"
    for name in body["voices"]:  # every listed name speaks
        assert speech(server, {"input": "Hi.", "voice": name, "response_format": "pcm"}).status_code == 200


def test_a_non_streamed_request_gets_a_whole_file(server: RunningServer) -> None:
    """build_payload(stream=False): response_format and speed, `stream: false`; the client saves the body as a file."""
    body = {"input": SENTENCE, "response_format": "wav", "stream": False, "speed": 1.0, "task_type": "CustomVoice"}
    response = speech(server, {**body, "speaker": "heart"})
    assert response.status_code == 200, response.text
    assert response.headers["content-length"] == str(len(response.content))
    assert "transfer-encoding" not in response.headers
    data = response.content
    riff, wave_size = struct.unpack_from("<4sI", data)[0], struct.unpack_from("<I", data, 4)[0]
    assert riff == b"RIFF" and wave_size == len(data) - 8 and struct.unpack_from("<I", data, 40)[0] == len(data) - 44


def test_generic_voice_and_no_voice_speak_the_default_voice(server: RunningServer) -> None:
    bodies = [{"voice": "default"}, {}, {"speaker": "default"}]
    audio = [speech(server, {"input": "Hello.", "response_format": "pcm", "seed": 3, **b}).content for b in bodies]
    reference = speech(server, {"input": "Hello.", "response_format": "pcm", "seed": 3, "voice": "heart"}).content
    assert audio == [reference] * 3


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"speaker_embedding": [0.1] * 1024}, "speaker_embedding"),
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),
        ({"voice": "heart", "speaker": "ryan"}, "speaker"),
    ],
)
def test_what_the_embedded_engine_cannot_do_is_a_400_naming_the_field(
    server: RunningServer, extra: dict[str, object], param: str
) -> None:
    capabilities = httpx.get(f"{server.base_url}/v1/audio/capabilities", timeout=10).json()
    assert (capabilities["speaker_embedding_dim"], capabilities["extra_params"]) == (None, False)  # says so first
    response = speech(server, {"input": "Hi.", **extra})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_word_timestamps_of_a_whole_file_in_its_header(server: RunningServer) -> None:
    body = {"input": SENTENCE, "voice": "heart", "response_format": "wav", "stream": False, "word_timestamps": True}
    response = speech(server, body)
    assert response.status_code == 200, response.text
    words = json.loads(response.headers["x-word-timestamps"])
    assert [w["word"] for w in words] == ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
    duration_ms = (len(response.content) - 44) / 2 / 24_000 * 1000
    assert all(0 <= w["start_ms"] < w["end_ms"] <= duration_ms + 1 for w in words)
    assert [w["start_ms"] for w in words] == sorted(w["start_ms"] for w in words)
    streamed = speech(server, {**body, "stream": True, "stream_format": "audio"})
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "word_timestamps"


# -- whole files, every format ----------------------------------------------------------------------------------------


def ffmpeg_decodes(data: bytes, suffix: str, tmp_path: Path) -> float | None:
    """Seconds of audio the ffmpeg program reads from the file, or None where there is no ffmpeg program."""
    program = shutil.which("ffmpeg")
    if program is None:
        return None
    path = tmp_path / f"speech.{suffix}"
    path.write_bytes(data)
    out = subprocess.run(
        [program, "-v", "error", "-i", str(path), "-f", "s16le", "-ac", "1", "-ar", "24000", "-"],
        capture_output=True,
        check=True,
    ).stdout
    return len(out) / 2 / 24_000


@pytest.mark.parametrize("response_format", ["wav", "flac", "mp3", "opus", "aac"])
def test_every_whole_file_reads_back(server: RunningServer, response_format: str, tmp_path: Path) -> None:
    soundfile = pytest.importorskip("soundfile", reason="python-soundfile (libsndfile) reads the files a user saves")
    response = speech(
        server, {"input": SENTENCE, "voice": "heart", "response_format": response_format, "stream": False}
    )
    assert response.status_code == 200, response.text
    data = response.content
    assert response.headers["content-length"] == str(len(data))
    via_ffmpeg = decode(data, response_format)  # FFmpeg's own libraries (PyAV), as browsers and players read it
    assert 1.5 < via_ffmpeg.duration_s < 6.0
    assert word_error_rate(SENTENCE, transcribe(via_ffmpeg)) <= 0.2
    program_s = ffmpeg_decodes(data, {"opus": "ogg"}.get(response_format, response_format), tmp_path)
    if program_s is not None:
        assert abs(program_s - via_ffmpeg.duration_s) < 0.1
    if response_format == "aac":
        return  # libsndfile has no AAC
    samples, rate = soundfile.read(io.BytesIO(data))
    assert rate in (24_000, 48_000) and abs(len(samples) / rate - via_ffmpeg.duration_s) < 0.1
    if response_format == "flac":
        info = soundfile.info(io.BytesIO(data))
        assert info.frames == len(samples) > 0  # STREAMINFO carries the sample count


# -- streaming_speech_client.py ----------------------------------------------------------------------------------------


def ws_url(server: RunningServer) -> str:
    return server.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def utterance(server: RunningServer, config: dict[str, object], text: str) -> list[object]:
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "session.config", **config}))
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        messages: list[object] = []
        while True:
            message = ws.recv(timeout=60)
            messages.append(message if isinstance(message, bytes) else json.loads(message))
            if isinstance(messages[-1], dict) and messages[-1]["type"] in ("session.done", "error"):
                return messages


@pytest.mark.parametrize(("granularity", "sentences"), [("none", 1), ("sentence", 2), ("clause", 3), (None, 2)])
def test_split_granularity(server: RunningServer, granularity: str | None, sentences: int) -> None:
    config: dict[str, object] = {"speaker": "heart", "language": "Auto", "response_format": "wav", "speed": 1.0}
    if granularity is not None:
        config["split_granularity"] = granularity
    messages = utterance(server, config, "Hello there, my friend. How are you?")
    starts = [m for m in messages if isinstance(m, dict) and m["type"] == "audio.start"]
    assert len(starts) == sentences, starts
    assert messages[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": sentences}


# -- where it runs ---------------------------------------------------------------------------------------------------


def test_starts_as_an_unprivileged_user_from_a_read_only_directory(tmp_path: Path) -> None:
    """`speech-server` run by a service user (nobody) from `/`, which it cannot write, with a home it cannot write
    either, and no SPEECH_VOICE_STORE: it serves, and writes nothing (the voice store is created on the first upload,
    which an engine that cannot clone never takes)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the server as another, unprivileged user")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux) to drop privileges")
    home = tmp_path / "home"
    home.mkdir()  # root's: the service user cannot write it
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPEECH_", "XDG_"))}
    env.update({"HOME": str(home), "SPEECH_HOST": "127.0.0.1", "SPEECH_PORT": str(port)})
    nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"]
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [setpriv, *nobody, "--", *server_command(), "--engine", "embedded"],
            cwd="/",
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    running = RunningServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until(running, "/ready", 120)
        response = speech(running, {"input": "Hello.", "voice": "heart", "response_format": "pcm"})
        assert response.status_code == 200 and len(response.content) > 1000
        assert httpx.get(f"{running.base_url}/v1/audio/voices", timeout=30).json()["voices"] == ["heart", "default"]
        assert list(home.iterdir()) == []
    finally:
        running.stop()
    assert "PermissionError" not in log_path.read_text()
