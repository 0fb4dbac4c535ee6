"""Models, voices, health, readiness, docs and the command line."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
from openai import OpenAI

from app.audio.formats import DEFAULT_SAMPLE_RATE, FORMATS
from app.settings import OPENAI_VOICES
from tests.support.server import RunningServer, server_command, start_server, wait_until


def test_models_list_in_openai_shape(server: RunningServer) -> None:
    body = httpx.get(f"{server.base_url}/v1/models").json()
    assert body["object"] == "list"
    ids = [m["id"] for m in body["data"]]
    assert ids[0] == "hibari"
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    assert all(m["object"] == "model" and isinstance(m["created"], int) and m["owned_by"] for m in body["data"])
    sdk_ids = [m.id for m in OpenAI(base_url=f"{server.base_url}/v1", api_key="x").models.list()]
    assert sdk_ids == ids


def test_a_model_is_retrieved_as_listed_and_an_unknown_one_is_an_openai_404(server: RunningServer) -> None:
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    listed = {m.id: m for m in client.models.list()}
    for model in ("hibari", "tts-1"):
        assert client.models.retrieve(model) == listed[model]
    response = httpx.get(f"{server.base_url}/v1/models/nope")
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model") and "hibari" in error["message"]


def test_a_model_named_with_a_slash_is_retrieved(tmp_path: Path) -> None:
    """Ids such as "openai/tts-1" or a checkpoint's "Qwen/..." name: the SDK puts them in the path as they are."""
    server = start_server(tmp_path / "server.log", env={"SPEECH_MODEL_ALIASES": "openai/tts-1"})
    try:
        client = OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
        assert "openai/tts-1" in [m.id for m in client.models.list()]
        assert client.models.retrieve("openai/tts-1").id == "openai/tts-1"
        missing = httpx.get(f"{server.base_url}/v1/models/openai/tts-2").json()["error"]
        assert missing["code"] == "model_not_found"
    finally:
        server.stop()


def test_capabilities_list_the_formats_table(server: RunningServer) -> None:
    caps = httpx.get(f"{server.base_url}/v1/audio/capabilities").json()
    assert caps["response_formats"] == list(FORMATS) == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
    assert caps["sample_rate"] == DEFAULT_SAMPLE_RATE == 24_000
    assert caps["sample_rate_range"] == {"min": 8_000, "max": 48_000}
    # each format: its Content-Type, the rates its codec carries (null: any in the range), and the rate its decoder
    # gives back whatever was asked (null: the rate asked): a client sets its player by it
    assert caps["formats"]["opus"] == {
        "content_type": "audio/ogg; codecs=opus",
        "sample_rates": [8000, 12000, 16000, 24000, 48000],
        "decoded_sample_rate": 48_000,
    }
    assert caps["formats"]["pcm"] == {"content_type": "audio/pcm", "sample_rates": None, "decoded_sample_rate": None}
    assert caps["formats"]["mp3"]["sample_rates"][:3] == [8000, 11025, 12000]
    assert list(caps["formats"]) == caps["response_formats"]


def test_voices_list_shows_aliases(server: RunningServer) -> None:
    voices = httpx.get(f"{server.base_url}/v1/audio/voices").json()["data"]
    assert [v["id"] for v in voices] == ["heart"]
    heart = voices[0]
    assert heart["languages"] == ["English"]
    assert heart["engine"] == "embedded"
    assert heart["name"]
    assert set(OPENAI_VOICES) == set(heart["aliases"])
    # any name a request may give looks up the voice it speaks with: the id, an alias, "default", in any case
    for name in ("heart", "alloy", "Nova", "default"):
        looked_up = httpx.get(f"{server.base_url}/v1/audio/voices/{name}")
        assert looked_up.status_code == 200 and looked_up.json() == heart, name
    assert httpx.get(f"{server.base_url}/v1/audio/voices/nobody").status_code == 404


def test_health_ready_and_docs(server: RunningServer) -> None:
    assert httpx.get(f"{server.base_url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server.base_url}/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert httpx.get(f"{server.base_url}/docs").status_code == 200
    schema = httpx.get(f"{server.base_url}/openapi.json").json()
    assert "/v1/audio/speech" in schema["paths"]
    for path in ("/health", "/ready", "/v1/models"):  # as some balancers and uptime checkers probe: GET, no body
        head = httpx.head(f"{server.base_url}{path}")
        assert head.status_code == 200 and head.content == b"" and head.headers["x-request-id"], path


def test_not_ready_until_the_engine_is_warm(tmp_path: Path) -> None:
    """/health answers while the engine loads; /ready and speech answer 503 (OpenAI shape) until it is warm."""
    server = start_server(tmp_path / "server.log", wait_ready=False)
    try:
        wait_until(server, "/health", 120)
        early_ready = httpx.get(f"{server.base_url}/ready")
        early_speech = httpx.post(
            f"{server.base_url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."}
        )
        assert early_ready.status_code == 503
        assert early_ready.json()["error"]["code"] == "engine_unavailable"
        assert early_ready.headers["Retry-After"] == "5"  # as a request refused before the engine is ready is told
        assert early_speech.status_code == 503
        assert early_speech.json()["error"]["code"] == "engine_unavailable"
        assert early_speech.headers["retry-after"]
        wait_until(server, "/ready", 120)
        late = httpx.post(
            f"{server.base_url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."}
        )
        assert late.status_code == 200
    finally:
        assert server.stop() == 0


def test_settings_from_environment(tmp_path: Path) -> None:
    env = {
        "SPEECH_MODEL_ALIASES": "my-tts",
        "SPEECH_VOICE_ALIASES": '{"narrator": "heart"}',
        "SPEECH_MAX_INPUT_CHARS": "20",
    }
    server = start_server(tmp_path / "server.log", env=env)
    try:
        models = [m["id"] for m in httpx.get(f"{server.base_url}/v1/models").json()["data"]]
        assert models == ["hibari", "my-tts"]
        ok = httpx.post(
            f"{server.base_url}/v1/audio/speech", json={"model": "my-tts", "voice": "narrator", "input": "Hi."}
        )
        assert ok.status_code == 200
        alloy = httpx.post(
            f"{server.base_url}/v1/audio/speech", json={"model": "my-tts", "voice": "alloy", "input": "Hi."}
        )
        assert alloy.json()["error"]["param"] == "voice"
        long = httpx.post(
            f"{server.base_url}/v1/audio/speech", json={"model": "my-tts", "voice": "heart", "input": "x" * 21}
        )
        assert long.status_code == 400 and long.json()["error"]["param"] == "input"
        # past OpenAI's 4096 too: the limit told is this server's, as its capabilities say, in a batch item too
        for url, body in (
            ("/v1/audio/speech", {"voice": "heart", "input": "x" * 5000}),
            ("/v1/audio/speech/batch", {"voice": "heart", "items": [{"input": "x" * 5000}]}),
        ):
            told = httpx.post(f"{server.base_url}{url}", json=body).json()
            error = told["error"] if "error" in told else told["results"][0]["error"]
            assert "at most 20 characters, not 5000" in error["message"], told
    finally:
        server.stop()


def test_cli_help_documents_every_setting() -> None:
    result = subprocess.run([*server_command(), "--help"], capture_output=True, text=True, timeout=60, check=True)
    for flag in ("--host", "--port", "--engine", "--log-level"):
        assert flag in result.stdout
    for variable in (
        "SPEECH_HOST",
        "SPEECH_PORT",
        "SPEECH_ENGINE",
        "SPEECH_LOG_LEVEL",
        "SPEECH_VOICE_ALIASES",
        "SPEECH_MODEL_ALIASES",
        "SPEECH_MAX_BODY_BYTES",
        "SPEECH_EMBEDDED__WORKERS",
    ):
        assert variable in result.stdout


def test_flags_override_environment(tmp_path: Path) -> None:
    log = (tmp_path / "server.log").open("wb")
    from tests.support.server import free_port

    port = free_port()
    process = subprocess.Popen(
        [*server_command(), "--host", "127.0.0.1", "--port", str(port), "--engine", "embedded"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin", "SPEECH_PORT": "1", "SPEECH_ENGINE": "omni"},
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.get(f"http://127.0.0.1:{port}/ready").json()["engine"] == "embedded"
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_labelled_counters_start_at_zero_without_created_series(tmp_path: Path) -> None:
    """A fresh server already exposes every rejection and abort reason at 0 (so the first event shows as an
    increase), and no `_created` series."""
    from prometheus_client.parser import text_string_to_metric_families

    from app.metrics import ABORT_REASONS, REJECT_REASONS

    server = start_server(tmp_path / "server.log")
    try:
        text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    finally:
        server.stop()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert not [s.name for s in samples if s.name.endswith("_created")]
    for name, reasons in (("speech_rejected_total", REJECT_REASONS), ("speech_aborted_total", ABORT_REASONS)):
        found = {s.labels["reason"]: s.value for s in samples if s.name == name}
        assert found == dict.fromkeys(reasons, 0.0), name
