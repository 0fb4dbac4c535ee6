"""The voice registry on real servers: CRUD, validation, two replicas over one store, restarts, concurrent uploads —
on the omni engine with a Base checkpoint (over the vllm-omni fakes), which clones; the embedded engine, which cannot,
refuses uploads."""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir
from loadtest.audio import decode
from tests.support.docs import fenced_blocks
from tests.support.server import RunningServer, fake_omni_command, start_server
from tests.support.wav import pcm_wav, tone_wav


@pytest.fixture(scope="module")
def sample(server: RunningServer) -> bytes:
    """Real speech to register: three seconds or so from the server's own voice, as a WAV file."""
    response = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        timeout=60,
        json={
            "model": "tts-1",
            "voice": "alloy",
            "input": "This is my voice. Please keep it safe.",
            "response_format": "wav",
        },
    )
    return pcm_wav(np.frombuffer(response.content[44:], "<i2"), 24_000)  # real sizes, as a caller would upload


def upload(
    url: str,
    name: str,
    audio: bytes,
    consent: str | None = "true",
    ref_text: str | None = "Hello.",
    filename: str = "sample.wav",
) -> httpx.Response:
    data = {"name": name}
    if consent is not None:
        data["consent"] = consent
    if ref_text is not None:
        data["ref_text"] = ref_text
    return httpx.post(
        f"{url}/v1/audio/voices", data=data, files={"audio_sample": (filename, audio, "audio/wav")}, timeout=60
    )


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Base checkpoint, served under its directory's name: the one docs/voices.md's example speaks with."""
    return write_model_dir(tmp_path_factory.mktemp("base-model") / "Qwen3-TTS-12Hz-0.6B-Base", "base")


def start_cloning_server(log_path: Path, base_model: Path, store: Path, **settings: str) -> RunningServer:
    env = {
        "SPEECH_OMNI__MODEL": str(base_model),
        "SPEECH_OMNI__DEPLOY_CONFIG": "deploy/vllm-omni/voice-clone.yaml",
        "SPEECH_OMNI__WARMUP_BATCH_SIZES": "1",
        "SPEECH_VOICE_STORE": str(store),
        **settings,
    }
    return start_server(log_path, env=env, command=fake_omni_command())


@pytest.fixture(scope="module")
def cloning(tmp_path_factory: pytest.TempPathFactory, base_model: Path) -> Iterator[RunningServer]:
    """A server whose engine clones: the omni engine on a Base checkpoint."""
    folder = tmp_path_factory.mktemp("cloning")
    running = start_cloning_server(folder / "server.log", base_model, folder / "voices")
    yield running
    running.stop()


@pytest.fixture
def shared_store(tmp_path: Path, base_model: Path) -> Iterator[tuple[RunningServer, RunningServer, Path]]:
    store = tmp_path / "store"
    a = start_cloning_server(tmp_path / "a.log", base_model, store)
    b = start_cloning_server(tmp_path / "b.log", base_model, store)
    yield a, b, store
    a.stop()
    b.stop()


def test_crud(cloning: RunningServer, sample: bytes) -> None:
    server = cloning
    created = upload(server.base_url, "my-voice_1", sample, ref_text="This is my voice. Please keep it safe.")
    assert created.status_code == 201, created.text
    voice = created.json()
    assert set(voice) == {"id", "name", "duration_s", "sample_rate", "created_at", "has_ref_text"}
    assert voice["name"] == "my-voice_1" and voice["has_ref_text"] is True and voice["sample_rate"] == 24_000
    assert 1.5 < voice["duration_s"] < 6
    listed = httpx.get(f"{server.base_url}/v1/audio/voices").json()["data"]
    assert {v["name"] for v in listed if v["type"] == "uploaded"} == {"my-voice_1"}
    assert all(v["engine"] == "omni" for v in listed)
    assert httpx.get(f"{server.base_url}/v1/audio/voices/my-voice_1").json()["id"] == voice["id"]
    # the listing's id names the voice as its name does (OpenAI's voices are named by id)
    by_id = httpx.get(f"{server.base_url}/v1/audio/voices/{voice['id']}")
    assert by_id.status_code == 200 and by_id.json()["name"] == "my-voice_1" and by_id.json()["aliases"] == []
    assert upload(server.base_url, "my-voice_1", sample).status_code == 409
    assert httpx.delete(f"{server.base_url}/v1/audio/voices/my-voice_1").status_code == 204
    gone = httpx.get(f"{server.base_url}/v1/audio/voices/my-voice_1")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "voice_not_found"
    assert httpx.delete(f"{server.base_url}/v1/audio/voices/my-voice_1").status_code == 404


def test_the_docs_example_runs(cloning: RunningServer, sample: bytes, tmp_path: Path) -> None:
    """docs/voices.md's example, run with curl as written (only the address changed) beside a narrator.wav: the upload
    answers the fields its comment shows, the speech with the voice decodes, the listing has it, the delete took it."""
    (code,) = [code for _, code in fenced_blocks("docs/voices.md", "## Voice cloning", "sh")]
    (tmp_path / "narrator.wav").write_bytes(sample)
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + code.replace("http://localhost:8000", cloning.base_url)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    printed, at = [], 0  # the upload's answer, then the listing (curl adds no line breaks)
    while at < len(done.stdout.rstrip()):
        body, at = json.JSONDecoder().raw_decode(done.stdout, at)
        printed.append(body)
    uploaded, listing = printed
    (shown,) = re.findall(r"^# (\{.*\})$", code, re.M)  # the answer the page shows
    assert set(uploaded) == set(re.findall(r'"(\w+)":', shown)), (uploaded, shown)
    assert uploaded["name"] == "narrator" and uploaded["has_ref_text"] is True and uploaded["id"].startswith("voice_")
    assert "narrator" in listing["voices"] and "narrator" in [v["name"] for v in listing["data"]]
    assert decode((tmp_path / "hello.mp3").read_bytes(), "mp3").duration_s > 0.5
    assert httpx.get(f"{cloning.base_url}/v1/audio/voices/narrator", timeout=30).status_code == 404


@pytest.mark.parametrize(
    ("name", "audio", "consent", "status", "param"),
    [
        ("Bad Name", "sample", "true", 400, "name"),
        ("x" * 65, "sample", "true", 400, "name"),
        ("ok-name", "sample", "false", 400, "consent"),
        ("ok-name", "sample", None, 400, "consent"),
        ("too-short", "short", "true", 400, "audio_sample"),
        ("too-long", "long", "true", 400, "audio_sample"),
        ("silence", "silence", "true", 400, "audio_sample"),
        ("noise-bytes", "random", "true", 400, "audio_sample"),
        ("oversized", "huge", "true", 413, "audio_sample"),
    ],
)
def test_upload_validation(
    cloning: RunningServer, sample: bytes, name: str, audio: str, consent: str | None, status: int, param: str
) -> None:
    clips = {
        "sample": sample,
        "short": tone_wav(0.5),
        "long": tone_wav(31),
        "silence": tone_wav(3, amplitude=0.0),
        "random": np.random.default_rng(1).bytes(50_000),
        "huge": b"RIFF" + b"\0" * (10 * 1024 * 1024 + 10),
    }
    response = upload(cloning.base_url, name, clips[audio], consent=consent)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_a_broken_upload_is_told_what_is_wrong_with_its_form(cloning: RunningServer) -> None:
    """The form parser's own 400 (here: a multipart body without its boundary) keeps its message: it is no JSON."""
    response = httpx.post(
        f"{cloning.base_url}/v1/audio/voices",
        content=b"--x\r\n",
        headers={"content-type": "multipart/form-data"},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "boundary" in error["message"].lower() and "JSON" not in error["message"], error
    assert error["code"] == "invalid_multipart", error  # a code to branch on, as every other 400 has


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ([("name", "second")], "name"),  # one of them was taken, silently
        ([("voice_name", "x")], "voice_name"),  # a misspelt field was ignored, where a JSON body's is refused
        ([("name\u202e", "x")], "(a name of unprintable characters)"),  # never echoed as sent
    ],
)
def test_a_form_field_sent_twice_or_unknown_is_refused_naming_it(
    cloning: RunningServer, sample: bytes, extra: list[tuple[str, str]], param: str
) -> None:
    fields = [("name", "twice"), ("consent", "true"), ("ref_text", "Hello."), *extra]
    response = httpx.post(
        f"{cloning.base_url}/v1/audio/voices",
        data=dict(fields) if len({k for k, _ in fields}) == len(fields) else None,
        files=[("audio_sample", ("s.wav", sample, "audio/wav"))]
        + ([(k, (None, v)) for k, v in fields] if len({k for k, _ in fields}) != len(fields) else []),
        timeout=30,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param, response.text
    assert httpx.get(f"{cloning.base_url}/v1/audio/voices/twice").status_code == 404  # nothing registered


@pytest.mark.parametrize("body", [{"json": {"name": "x", "consent": True}}, {"data": {"name": "x", "consent": "true"}}])
def test_a_body_that_is_no_multipart_form_is_told_the_form_it_needs(cloning: RunningServer, body: dict) -> None:
    """JSON, or a form with no file in it, is told that the upload is a multipart form and what it holds, not that
    the `name` it sent is missing."""
    response = httpx.post(f"{cloning.base_url}/v1/audio/voices", timeout=30, **body)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "multipart/form-data" in message and "audio_sample" in message and "Missing" not in message, message


def test_registry_fields_refuse_control_characters(cloning: RunningServer, sample: bytes) -> None:
    """On a server that clones (elsewhere every upload is refused before its fields are read)."""
    url = f"{cloning.base_url}/v1/audio/voices"
    for field, value in [
        ("name", "bad\x1bname"),
        ("name", "\x85"),
        ("ref_text", "said \x1b[2J this"),
        ("ref_text", "\u202e"),
    ]:
        data = {"name": "hostile-fields", "consent": "true", "ref_text": "Hello.", field: value}
        response = httpx.post(url, data=data, files={"audio_sample": ("clip.wav", sample, "audio/wav")}, timeout=60)
        assert response.status_code == 400 and response.json()["error"]["param"] == field, (field, response.text)
    assert httpx.get(f"{url}/hostile-fields", timeout=30).status_code == 404  # nothing stored
    for method in ("GET", "DELETE"):
        response = httpx.request(method, f"{url}/bad%1Bname", timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == "name"


def test_an_engine_that_cannot_clone_refuses_uploads(server: RunningServer, sample: bytes) -> None:
    response = upload(server.base_url, "refused", sample)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "voice_cloning_unsupported"
    assert error["param"] is None and "cannot clone" in error["message"]
    assert httpx.get(f"{server.base_url}/v1/audio/voices/refused").status_code == 404  # nothing stored
    # told that first, whatever its fields: a misspelt one is not what keeps it from registering here
    misspelt = httpx.post(
        f"{server.base_url}/v1/audio/voices",
        data={"name": "refused", "consent": "true", "voice_name": "x"},
        files={"audio_sample": ("s.wav", sample, "audio/wav")},
        timeout=60,
    )
    assert misspelt.json()["error"]["code"] == "voice_cloning_unsupported", misspelt.text
    # nor what it lacks, nor a body of another kind: those would be told before, and then this
    for incomplete in (
        {"data": {"name": "refused", "consent": "true"}},
        {"data": {"name": "refused"}, "files": {"audio_sample": ("s.wav", sample, "audio/wav")}},
        {"json": {"name": "refused"}},
    ):
        response = httpx.post(f"{server.base_url}/v1/audio/voices", timeout=60, **incomplete)  # type: ignore[arg-type]
        assert response.json()["error"]["code"] == "voice_cloning_unsupported", (incomplete, response.text)


def test_a_delete_on_an_engine_that_cannot_clone_finds_no_uploaded_voice_and_keeps_the_built_in_ones(
    server: RunningServer,
) -> None:
    """docs/api.md: a delete there is a 404, and a built-in voice's name a 400 on `name` on every server."""
    response = httpx.delete(f"{server.base_url}/v1/audio/voices/never-uploaded")
    assert response.status_code == 404 and response.json()["error"]["code"] == "voice_not_found", response.text
    for built_in in ("heart", "alloy"):  # the engine's own voice, and an alias that speaks with it
        response = httpx.delete(f"{server.base_url}/v1/audio/voices/{built_in}")
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_value", "name"), error
    assert httpx.get(f"{server.base_url}/v1/audio/voices/heart").status_code == 200  # still there


def test_a_voice_registered_by_a_cloning_replica_on_one_that_cannot_clone(
    cloning: RunningServer, tmp_path: Path, sample: bytes
) -> None:
    store = cloning.env["SPEECH_VOICE_STORE"]
    embedded = start_server(tmp_path / "embedded.log", env={"SPEECH_VOICE_STORE": store})
    try:
        assert upload(cloning.base_url, "cloned", sample).status_code == 201
        response = httpx.post(
            f"{embedded.base_url}/v1/audio/speech", json={"model": "tts-1", "voice": "cloned", "input": "Hello."}
        )
        assert response.status_code == 400 and response.json()["error"]["param"] == "voice"
        assert "clone" in response.json()["error"]["message"]
        # the voice it cannot speak is neither listed nor found by name there, as the list and a request agree
        assert "cloned" not in httpx.get(f"{embedded.base_url}/v1/audio/voices").json()["voices"]
        response = httpx.get(f"{embedded.base_url}/v1/audio/voices/cloned")
        assert response.status_code == 404 and response.json()["error"]["code"] == "voice_not_found", response.text
        # nor deleted there: the replicas that clone still speak it
        response = httpx.delete(f"{embedded.base_url}/v1/audio/voices/cloned")
        assert response.status_code == 404 and response.json()["error"]["code"] == "voice_not_found", response.text
        assert httpx.get(f"{cloning.base_url}/v1/audio/voices/cloned").status_code == 200
    finally:
        embedded.stop()
        httpx.delete(f"{cloning.base_url}/v1/audio/voices/cloned")


def test_two_replicas_share_one_store_and_survive_restarts(
    shared_store, sample: bytes, tmp_path: Path, base_model: Path
) -> None:
    a, b, store = shared_store
    assert upload(a.base_url, "shared", sample).status_code == 201
    assert httpx.get(f"{b.base_url}/v1/audio/voices/shared").status_code == 200  # no restart, no cache to refresh
    assert upload(b.base_url, "shared", sample).status_code == 409
    assert upload(b.base_url, "kept", sample, ref_text=None).status_code == 201
    assert httpx.delete(f"{b.base_url}/v1/audio/voices/shared").status_code == 204
    assert httpx.get(f"{a.base_url}/v1/audio/voices/shared").status_code == 404
    a.stop()
    restarted = start_cloning_server(tmp_path / "a2.log", base_model, store)
    try:
        kept = httpx.get(f"{restarted.base_url}/v1/audio/voices/kept").json()
        assert kept["has_ref_text"] is False and kept["type"] == "uploaded"
    finally:
        restarted.stop()


def test_concurrent_uploads_never_corrupt_the_store(shared_store, sample: bytes) -> None:
    a, b, _ = shared_store
    names = [f"voice-{i}" for i in range(12)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda i: upload((a, b)[i % 2].base_url, names[i], sample).status_code, range(12)))
    assert statuses == [201] * 12
    listed = {v["name"]: v for v in httpx.get(f"{a.base_url}/v1/audio/voices").json()["data"]}
    assert set(names) <= set(listed)
    assert len({listed[n]["duration_s"] for n in names}) == 1  # every copy whole
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # the same name from both replicas at once
        same = list(pool.map(lambda i: upload((a, b)[i % 2].base_url, "contested", sample).status_code, range(8)))
    assert sorted(same) == [201] + [409] * 7


RATE = 24_000  # the rate a reference clip is kept at: its samples are counted as sent


def clip(samples: int) -> bytes:
    return tone_wav(samples / RATE, rate=RATE)


def test_the_capabilities_tell_the_reference_audio_limits_an_upload_is_held_to(
    tmp_path: Path, base_model: Path
) -> None:
    """GET /v1/audio/capabilities did not tell how large and how long a clip to clone from may be, and an upload was
    held to 10 MiB whatever SPEECH_REF_AUDIO_MAX_BYTES said (a request's `ref_audio` was held to it). An upload is
    now held to that setting, and the capabilities tell it and the clip's shortest and longest, as the server holds
    an upload to them: a clip at each limit is taken, one sample or one byte more refused."""
    longest = len(clip(30 * RATE))
    # room for one sample more than the longest clip
    server = start_cloning_server(
        tmp_path / "server.log", base_model, tmp_path / "voices", SPEECH_REF_AUDIO_MAX_BYTES=str(longest + 2)
    )
    try:
        limits = httpx.get(f"{server.base_url}/v1/audio/capabilities", timeout=30).json()["reference_audio"]
        assert limits == {"max_bytes": longest + 2, "min_seconds": 1.0, "max_seconds": 30.0}, limits
        shortest, longest_samples = int(limits["min_seconds"] * RATE), int(limits["max_seconds"] * RATE)
        assert upload(server.base_url, "shortest", clip(shortest)).status_code == 201
        assert upload(server.base_url, "longest", clip(longest_samples)).status_code == 201
        for name, audio in (("too-short", clip(shortest - 1)), ("too-long", clip(longest_samples + 1))):
            refused = upload(server.base_url, name, audio)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == "audio_sample" and " s" in refused.json()["error"]["message"]
        at_limit = clip(longest_samples + 1)  # refused for its length, not its size: its size was taken
        assert len(at_limit) == limits["max_bytes"]
        over = upload(server.base_url, "too-large", at_limit + b"\0")
        assert over.status_code == 413, over.text
        assert over.json()["error"]["param"] == "audio_sample"
        assert f"larger than {limits['max_bytes']} bytes" in over.json()["error"]["message"]
    finally:
        server.stop()
