"""POST /v1/audio/speech/batch on the real server (embedded engine): vllm-omni 0.30's request and answer shapes, each
item's whole file read back by real decoders, items failing alone, the caps, a batch's share of the slots beside a
stream, and a caller that leaves."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import jsonschema
import pytest

from loadtest.audio import decode, transcribe, word_error_rate
from tests.support.docs import fenced_blocks
from tests.support.server import RunningServer, start_server

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Please call Stella and ask her to bring these things."]
MAX_ITEMS, MAX_CHARS = 6, 4096  # the text cap no lower than the longest input (the server refuses to start so)
# an item that takes a while to speak (about half a minute of audio), so that a batch of them is still running
LONG = " ".join(
    ["The quick brown fox jumps over the lazy dog while the patient farmer watches from the old wooden gate."] * 6
)


@pytest.fixture(scope="module")
def batch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Two slots, a batch's share one of them, and small caps to cross."""
    env = {
        "SPEECH_MAX_CONCURRENCY": "2",
        "SPEECH_BATCH_CONCURRENCY": "1",
        "SPEECH_BATCH_MAX_ITEMS": str(MAX_ITEMS),
        "SPEECH_BATCH_MAX_CHARS": str(MAX_CHARS),
    }
    server = start_server(tmp_path_factory.mktemp("batch") / "server.log", env=env)
    yield server
    server.stop()


def batch(server: RunningServer, body: dict[str, object], timeout: float = 120) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/audio/speech/batch", json=body, timeout=timeout)


def test_items_of_mixed_formats_and_voices_read_back_and_say_their_words(batch_server: RunningServer) -> None:
    soundfile = pytest.importorskip("soundfile", reason="python-soundfile reads the files a user saves")
    body = {
        "voice": "alloy",  # the default of every item that names none (an OpenAI name, an alias here)
        "items": [
            {"input": SENTENCES[0]},  # the batch's format: wav, vllm-omni's default for a batch
            {"input": SENTENCES[1], "response_format": "mp3", "speaker": "heart"},
            {"input": SENTENCES[0], "response_format": "flac", "sample_rate": 16000},
            {"input": SENTENCES[1], "response_format": "opus"},
        ],
    }
    delivered = metric(batch_server, "speech_audio_seconds_total")
    response = batch(batch_server, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["id"].startswith("speech-batch-") and (answer["total"], answer["succeeded"], answer["failed"]) == (
        4,
        4,
        0,
    )
    results = answer["results"]
    assert [r["index"] for r in results] == [0, 1, 2, 3] and all(r["status"] == "success" for r in results)
    assert [r["media_type"] for r in results] == ["audio/wav", "audio/mpeg", "audio/flac", "audio/ogg; codecs=opus"]
    assert all("error" not in r for r in results)  # absent fields are left out, as vllm-omni answers
    files = [base64.b64decode(r["audio_data"]) for r in results]
    wav, rate = soundfile.read(io.BytesIO(files[0]))
    assert rate == 24_000 and len(wav) / rate > 1.5
    flac, flac_rate = soundfile.read(io.BytesIO(files[2]))
    assert flac_rate == 16_000 and abs(len(flac) / flac_rate - len(wav) / rate) < 0.2
    heard_s = 0.0
    for data, fmt, sentence in zip(files, ["wav", "mp3", "flac", "opus"], SENTENCES * 2, strict=True):
        audio = decode(data, fmt)
        heard_s += audio.duration_s
        assert word_error_rate(sentence, transcribe(audio)) <= 0.25, fmt
    # the audio it delivered counted once, with the answer (codecs pad a few tens of milliseconds)
    assert abs(metric(batch_server, "speech_audio_seconds_total") - delivered - heard_s) < 0.5
    for result in results:
        usage = result["usage"]
        assert usage["output_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    # the answer is what the published schema says, usage field by field (a client generated from it reads it typed)
    published = httpx.get(f"{batch_server.base_url}/openapi.json").json()["components"]["schemas"]
    assert set(published["SpeechUsage"]["required"]) == {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "input_token_details",
    }
    jsonschema.validate(
        answer, {"$ref": "#/components/schemas/SpeechBatchResponse", "components": {"schemas": published}}
    )


def test_the_docs_example_answers_as_the_page_says(batch_server: RunningServer, tmp_path: Path) -> None:
    """docs/api.md's batch example, run with curl as written (only the address changed): the answer and each result
    have the fields the page names, the first item in the batch's default format (wav), the second in its own (mp3),
    each a whole file that decodes."""
    (code,) = [code for _, code in fenced_blocks("docs/api.md", "## Batches", "sh")]
    code = code.replace("localhost:8000", urlparse(batch_server.base_url).netloc)
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"id", "results", "total", "succeeded", "failed"}, answer.keys()
    assert (answer["total"], answer["succeeded"], answer["failed"]) == (2, 2, 0)
    results = answer["results"]
    assert [r["index"] for r in results] == [0, 1] and all(r["status"] == "success" for r in results)
    assert all(set(r) == {"index", "status", "audio_data", "media_type", "usage"} for r in results)
    assert [r["media_type"] for r in results] == ["audio/wav", "audio/mpeg"]
    usage = {"input_tokens", "output_tokens", "total_tokens", "input_token_details"}  # as in speech.audio.done
    assert all(set(r["usage"]) == usage for r in results)
    for result, kind in zip(results, ("wav", "mp3"), strict=True):
        assert decode(base64.b64decode(result["audio_data"]), kind).duration_s > 0.5


def test_a_bad_item_fails_alone_with_an_openai_error_naming_its_field(batch_server: RunningServer) -> None:
    body = {
        "response_format": "pcm",
        "items": [
            {"input": "Hello there."},
            {"input": "Who am I?", "voice": "nobody"},
            {"input": "Too fast.", "speed": 9},
            {"input": "Louder.", "stream": True},  # no stream switches in an item: each is a whole file
            {"text": "no input"},  # the first fault named: `input` is missing
            {"input": "Goodbye."},
        ],
    }
    response = batch(batch_server, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["succeeded"], answer["failed"]) == (2, 4)
    by_index = {r["index"]: r for r in answer["results"]}
    assert by_index[0]["status"] == by_index[5]["status"] == "success"
    params = [by_index[i]["error"]["param"] for i in (1, 2, 3, 4)]
    assert params == ["items[1].voice", "items[2].speed", "items[3].stream", "items[4].input"]  # where each is
    assert by_index[1]["error"]["code"] == "voice_not_found" and by_index[1]["error"]["type"] == "invalid_request_error"
    assert all("audio_data" not in by_index[i] and "usage" not in by_index[i] for i in (1, 2, 3, 4))


def test_an_item_that_is_no_object_fails_alone_named_as_the_item_it_is(batch_server: RunningServer) -> None:
    """docs/api.md: a bad item fails alone, and so does one that is not an object at all (it once failed the whole
    batch with a 400 naming `items`, not saying which)."""
    body = {"response_format": "pcm", "items": ["Not an object.", {"input": "Hello there."}, None, [1], 7, True]}
    response = batch(batch_server, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["succeeded"], answer["failed"]) == (1, 5)
    by_index = {r["index"]: r for r in answer["results"]}
    assert by_index[1]["status"] == "success"
    errors = [by_index[i]["error"] for i in (0, 2, 3, 4, 5)]
    assert [e["param"] for e in errors] == ["items[0]", "items[2]", "items[3]", "items[4]", "items[5]"]
    assert [e["message"].split(", not ")[1] for e in errors] == [
        "a string.", "null.", "an array.", "a number.", "true or false."
    ]  # fmt: skip
    assert all(e["type"] == "invalid_request_error" and e["code"] == "invalid_value" for e in errors), errors


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"items": [{"input": "Hi."}] * (MAX_ITEMS + 1)}, 400, "items"),
        ({"items": [{"input": "x" * (MAX_CHARS // 2 + 1)}] * 2}, 413, "items"),
        ({"items": []}, 400, "items"),
        ({"items": [{"input": "Hi."}], "word_timestamps": True}, 400, "word_timestamps"),
        ({"items": [{"input": "Hi."}], "voice": 7}, 400, "voice"),  # a bad default fails the batch: it is the batch's
        # a model this server does not serve: the batch's 404, as vllm-omni checks a batch's model before its items
        ({"items": [{"input": "Hi."}], "model": "nope"}, 404, "model"),
    ],
    ids=["too-many-items", "too-much-text", "no-items", "word-timestamps", "bad-default", "unknown-model"],
)
def test_a_batch_over_its_caps_or_with_a_bad_default_is_refused_whole(
    batch_server: RunningServer, body: dict[str, object], status: int, param: str
) -> None:
    """Refused whole, and counted once as a speech request (stream label `batch`), its items never having run; by
    the batch's format (wav, the batch default) where the body could be read, `unknown` where it could not."""
    fmt = "unknown" if param in ("voice",) or body["items"] == [] else "wav"
    labels = {"status": str(status), "stream": "batch", "response_format": fmt}
    before = metric(batch_server, "speech_requests_total", **labels)
    response = batch(batch_server, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param
    assert metric(batch_server, "speech_requests_total", **labels) == before + 1


def test_the_capabilities_tell_the_batch_limits_the_server_holds_a_batch_to(batch_server: RunningServer) -> None:
    """GET /v1/audio/capabilities, where a client learns the other limits, tells a batch's as the server enforces
    them: a batch at each limit is taken and one over it refused (one item, one character, one byte of body).
    Its items are refused for their own fault (a speed out of range), so that nothing is synthesized."""
    caps = httpx.get(f"{batch_server.base_url}/v1/audio/capabilities", timeout=30).json()
    limits = caps["batch"]
    # SPEECH_REQUEST_TIMEOUT_S left as it is: the deadline of a batch, whole
    assert limits == {"max_items": MAX_ITEMS, "max_chars": MAX_CHARS, "concurrency": 1, "timeout_s": 300.0}
    unspoken = {"input": "Hi.", "speed": 9}
    taken = batch(batch_server, {"items": [unspoken] * limits["max_items"]})
    assert taken.status_code == 200 and taken.json()["failed"] == limits["max_items"], taken.text
    over = batch(batch_server, {"items": [unspoken] * (limits["max_items"] + 1)})
    assert over.status_code == 400 and over.json()["error"]["param"] == "items", over.text
    assert f"at most {limits['max_items']} items" in over.json()["error"]["message"]
    half = limits["max_chars"] // 2
    texts = ["x" * half, "x" * (limits["max_chars"] - half)]
    taken = batch(batch_server, {"items": [{**unspoken, "input": text} for text in texts]})
    assert taken.status_code == 200, taken.text
    over = batch(batch_server, {"items": [{**unspoken, "input": text + "x"} for text in texts]})
    assert over.status_code == 413 and over.json()["error"]["code"] == "batch_too_large", over.text
    # the body: its bytes, whatever they hold (blanks after the JSON object here)
    whole = json.dumps({"items": [unspoken]}).encode()
    for extra, status in ((0, 200), (1, 413)):
        body = whole + b" " * (caps["max_body_bytes"] - len(whole) + extra)
        response = httpx.post(
            f"{batch_server.base_url}/v1/audio/speech/batch",
            content=body,
            headers={"content-type": "application/json"},
            timeout=120,
        )
        assert response.status_code == status, response.text[:300]


def test_an_item_takes_the_batch_default_as_a_request_would_take_its_own(batch_server: RunningServer) -> None:
    """A batch of clones by default whose item speaks a preset voice: the item's voice follows from its own task,
    not from a voice the batch's task implied (this engine cannot clone, so only that item can succeed)."""
    body = {
        "task_type": "Base",
        "response_format": "pcm",
        "items": [{"input": "Hi.", "task_type": "CustomVoice"}, {"input": "Hi."}],
    }
    results = batch(batch_server, body).json()["results"]
    assert results[0]["status"] == "success", results[0]
    assert results[1]["error"]["param"] == "task_type"


def test_an_item_nested_past_any_parsers_depth_is_an_item_error_not_a_server_error(
    batch_server: RunningServer,
) -> None:
    nested: object = 1
    for _ in range(900):
        nested = [nested]
    body = {"response_format": "pcm", "items": [{"input": "Hi.", "extra_params": {"a": nested}}, {"input": "Hi."}]}
    response = batch(batch_server, body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[0]["error"]["param"] == "items[0].extra_params" and results[1]["status"] == "success"


def metric(server: RunningServer, name: str, **labels: str) -> float:
    return server.metric(name, **labels)


def speech_lines(server: RunningServer) -> list[dict[str, object]]:
    """The server's log line of each speech request so far (a batch item's included)."""
    return [event for event in server.log_events() if event.get("message") == "speech request"]


def test_a_batch_takes_its_share_of_the_slots_and_a_stream_beside_it_is_admitted_at_once(
    batch_server: RunningServer,
) -> None:
    """Long items, one at a time (SPEECH_BATCH_CONCURRENCY=1 of 2 slots): while the batch runs it never holds more
    than its one slot, and a stream sent meanwhile waits for none. The items are counted as speech requests with the
    stream label `batch`."""
    before = metric(batch_server, "speech_requests_total", status="200", response_format="wav", stream="batch")
    items = [{"input": LONG} for _ in range(MAX_ITEMS)]  # about 0.25 s each here
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pending = pool.submit(batch, batch_server, {"items": items})
        other = pool.submit(batch, batch_server, {"items": items[:2]})  # batches share one share of the slots
        held = []
        for _ in range(4):
            time.sleep(0.1)
            held.append(metric(batch_server, "speech_in_flight"))
        stream = httpx.post(
            f"{batch_server.base_url}/v1/audio/speech",
            json={"input": "A stream beside the batch.", "response_format": "pcm"},
            headers={"x-request-id": "beside-the-batch"},
            timeout=60,
        )
        assert stream.status_code == 200
        still_running = not pending.done()
        answer = pending.result().json()
        assert other.result().json()["succeeded"] == 2
    share = httpx.get(f"{batch_server.base_url}/v1/audio/capabilities", timeout=30).json()["batch"]["concurrency"]
    assert max(held) == share == 1 and still_running  # its one slot the whole time; the stream came and went meanwhile
    assert answer["succeeded"] == MAX_ITEMS
    lines = speech_lines(batch_server)
    [beside] = [line for line in lines if line["request_id"] == "beside-the-batch"]
    assert beside["queued_s"] == 0.0  # the other slot was free for it
    batch_id = answer["id"].removeprefix("speech-batch-")
    items_logged = [line for line in lines if str(line["request_id"]).startswith(f"{batch_id}-")]
    assert len(items_logged) == MAX_ITEMS and all(line["stream_format"] == "batch" for line in items_logged)
    after = metric(batch_server, "speech_requests_total", status="200", response_format="wav", stream="batch")
    assert after - before == MAX_ITEMS + 2  # both batches' items


def test_a_caller_that_leaves_mid_batch_stops_the_rest(batch_server: RunningServer) -> None:
    """The connection closes while the first of six items runs: the batch stops, the items left never start, and
    every item is counted with 499, and none of their audio as delivered."""
    delivered = metric(batch_server, "speech_audio_seconds_total")
    items = [{"input": LONG} for _ in range(MAX_ITEMS)]
    payload = json.dumps({"items": items}).encode()
    address = urlparse(batch_server.base_url)
    with socket.create_connection((address.hostname, address.port)) as sock:
        head = (
            f"POST /v1/audio/speech/batch HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            f"X-Request-Id: leaves-mid-batch\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        sock.sendall(head.encode() + payload)
        time.sleep(0.4)
    deadline = time.monotonic() + 30
    while "batch abandoned by its client" not in batch_server.log_path.read_text():
        assert time.monotonic() < deadline, "the batch did not notice its caller had left"
        time.sleep(0.1)
    items_logged = [line for line in speech_lines(batch_server) if line["request_id"].startswith("leaves-mid-batch-")]
    assert len(items_logged) == MAX_ITEMS and {line["status"] for line in items_logged} == {499}
    deadline = time.monotonic() + 10
    while metric(batch_server, "speech_in_flight") > 0:  # the running item stopped, no other started
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert metric(batch_server, "speech_audio_seconds_total") == delivered


def test_a_batch_the_drain_outlasts_keeps_the_items_it_finished(tmp_path: Path) -> None:
    """SIGTERM, and a drain of 3 s, while a batch of two short items and eight of three and a half minutes each runs
    one item at a time: the answer is the short items' audio, and the items the drain stopped each fail with 503 (the
    whole batch once failed with 503, its finished items thrown away). The embedded engine speaks at over 100x real
    time on an idle machine (an item of 1 853 characters, 107 s of audio, in 0.75 s): the long items are the longest
    an input may be, and eight of them, so that they outlast the drain several times over on any machine."""
    env = {
        "SPEECH_BATCH_CONCURRENCY": "1",
        "SPEECH_BATCH_MAX_ITEMS": "10",
        "SPEECH_BATCH_MAX_CHARS": "40000",
        "SPEECH_DRAIN_TIMEOUT_S": "3",
    }
    server = start_server(tmp_path / "server.log", env=env)
    longest = " ".join([LONG] * 6)  # 3 707 characters, under the longest input (4 096)
    items = [{"input": "Hello there."}, {"input": "Short too."}, *({"input": longest} for _ in range(8))]
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(batch, server, {"items": items, "response_format": "pcm"})
            time.sleep(0.3)
            server.process.send_signal(signal.SIGTERM)
            response = pending.result()
        assert response.status_code == 200, response.text
        answer = response.json()
        by_index = {r["index"]: r for r in answer["results"]}
        assert by_index[0]["status"] == by_index[1]["status"] == "success"
        assert len(base64.b64decode(by_index[0]["audio_data"])) > 10_000
        stopped = [r for r in answer["results"] if r["status"] != "success"]
        assert stopped and all(r["error"]["code"] == "server_shutting_down" for r in stopped), answer["results"]
        assert (answer["succeeded"], answer["failed"]) == (len(items) - len(stopped), len(stopped))
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()


def test_an_item_refused_for_its_own_field_is_logged_with_its_refusal(batch_server: RunningServer) -> None:
    """As a request refused for a field is: the log line of an item refused for its own `speed` names the refusal
    (type, code, field) and its format; it had neither."""
    answer = batch(batch_server, {"items": [{"input": "One."}, {"input": "Two.", "speed": 99}]}).json()
    assert [result["status"] for result in answer["results"]] == ["success", "error"]
    batch_id = answer["id"].removeprefix("speech-batch-")
    [line] = [line for line in speech_lines(batch_server) if line["request_id"] == f"{batch_id}-1"]
    assert line["status"] == 400 and line["response_format"] == "wav", line
    assert line["error"] == {"type": "invalid_request_error", "code": "invalid_value", "param": "items[1].speed"}, line


def test_a_batch_accepted_before_a_drain_is_served_whole(batch_server: RunningServer) -> None:
    """SIGTERM while a batch's first item runs: the drain waits for every item, as it waits for accepted requests,
    then the server exits cleanly. (Last in this module: it stops the module's server.)"""
    items = [{"input": LONG} for _ in range(MAX_ITEMS)]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(batch, batch_server, {"items": items})
        time.sleep(0.3)
        batch_server.process.send_signal(signal.SIGTERM)
        answer = pending.result().json()
    assert answer["succeeded"] == MAX_ITEMS, answer
    assert batch_server.process.wait(timeout=60) == 0
