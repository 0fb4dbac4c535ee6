"""What a response cost, where vllm-omni 0.30 puts it: `usage` in the SSE `speech.audio.done` event, and on a whole
file (`stream: false`) its headers X-VLLM-OMNI-INPUT-TOKENS, -OUTPUT-TOKENS, -TOTAL-TOKENS, -INPUT-TEXT-TOKENS and
-INPUT-AUDIO-TOKENS; the same counts either way, on both engines (the omni one over the vllm-omni stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import RunningServer, start_fake_omni

TEXT = "Billing code reads what each request cost."  # 7 words: 7 tokens of the stand-in's tokenizer
HEADERS = ["INPUT-TOKENS", "OUTPUT-TOKENS", "TOTAL-TOKENS", "INPUT-TEXT-TOKENS", "INPUT-AUDIO-TOKENS"]


@pytest.fixture(scope="module")
def omni(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_fake_omni(tmp_path_factory.mktemp("usage-omni"))
    yield server
    server.stop()


def usage_of_whole_file(server: RunningServer, body: dict[str, object]) -> dict[str, int]:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json={**body, "stream": False}, timeout=60)
    assert response.status_code == 200, response.text
    return {name: int(response.headers[f"X-VLLM-OMNI-{name}"]) for name in HEADERS}


def usage_of_sse(server: RunningServer, body: dict[str, object]) -> dict[str, int]:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json={**body, "stream_format": "sse"}, timeout=60)
    [done] = [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"speech.audio.done"' in line
    ]
    return done["usage"]


@pytest.mark.parametrize("engine", ["embedded", "omni"])
def test_a_whole_files_headers_say_what_the_sse_done_event_says(
    engine: str, server: RunningServer, omni: RunningServer
) -> None:
    target = server if engine == "embedded" else omni
    body = {"input": TEXT, "voice": "heart" if engine == "embedded" else "vivian", "response_format": "pcm", "seed": 5}
    headers = usage_of_whole_file(target, body)
    sse = usage_of_sse(target, body)
    assert (headers["INPUT-TOKENS"], headers["OUTPUT-TOKENS"], headers["TOTAL-TOKENS"]) == (
        sse["input_tokens"],
        sse["output_tokens"],
        sse["total_tokens"],
    )
    assert (
        headers["TOTAL-TOKENS"] == headers["INPUT-TOKENS"] + headers["OUTPUT-TOKENS"] and headers["OUTPUT-TOKENS"] > 0
    )
    assert headers["INPUT-AUDIO-TOKENS"] == 0 and headers["INPUT-TEXT-TOKENS"] == headers["INPUT-TOKENS"]


def test_the_omni_engine_counts_the_text_as_vllm_omni_does(omni: RunningServer) -> None:
    """The text's tokens (the stand-in's tokenizer counts words), instructions included, not the length of the
    placeholder prompt; output: one token per codec frame generated (39 with the stand-in's end of speech)."""
    usage = usage_of_whole_file(omni, {"input": TEXT, "voice": "vivian", "response_format": "pcm"})
    assert (usage["INPUT-TEXT-TOKENS"], usage["OUTPUT-TOKENS"]) == (7, 39)
    styled = usage_of_whole_file(
        omni, {"input": TEXT, "voice": "vivian", "response_format": "pcm", "instructions": "Calm and slow."}
    )
    assert styled["INPUT-TEXT-TOKENS"] == 7 + 3


@pytest.mark.parametrize("engine", ["embedded", "omni"])
def test_each_batch_item_carries_its_usage_and_the_batch_runs_on_both_engines(
    engine: str, server: RunningServer, omni: RunningServer
) -> None:
    target = server if engine == "embedded" else omni
    voice = "heart" if engine == "embedded" else "vivian"
    items = [{"input": TEXT}, {"input": TEXT, "instructions": "Calm and slow."}, {"input": "Hi.", "voice": "nobody"}]
    response = httpx.post(
        f"{target.base_url}/v1/audio/speech/batch",
        json={"voice": voice, "response_format": "pcm", "seed": 5, "items": items},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["success", "success", "error"]
    alone = usage_of_whole_file(target, {"input": TEXT, "voice": voice, "response_format": "pcm", "seed": 5})
    assert results[0]["usage"] == {
        "input_tokens": alone["INPUT-TOKENS"],
        "output_tokens": alone["OUTPUT-TOKENS"],
        "total_tokens": alone["TOTAL-TOKENS"],
        "input_token_details": {"text_tokens": alone["INPUT-TEXT-TOKENS"], "audio_tokens": alone["INPUT-AUDIO-TOKENS"]},
    }
    assert results[2]["error"]["param"] == "items[2].voice" and "usage" not in results[2]
