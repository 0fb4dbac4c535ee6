"""The talker's async-chunk producer (stage 0 of vllm-omni 0.30's Qwen3-TTS pipeline): vllm-omni's own, with every
stream's first window fixed under adaptive windows (`codec_adaptive_first_frames`), where vllm-omni would size it by
load. vllm-omni is not importable here: its producer is a stand-in that records what it found in its cache of
first-window sizes (`_cached_ic`, which it fills itself only for requests it has no entry for)."""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from app.engines.omni.stage_plugins import talker_windows
from tests.support.timeline import installed_recorder, recorded_events

UPSTREAM = "vllm_omni.model_executor.stage_input_processors.qwen3_tts"


@dataclasses.dataclass
class Entry:  # vllm-omni's additional-information entry: a request field as a list
    list_data: list[int] | None


@dataclasses.dataclass
class Info:
    entries: dict[str, Entry]


@dataclasses.dataclass
class Request:
    external_req_id: str
    additional_information: Info | None = None
    finished: bool = False

    def is_finished(self) -> bool:
        return self.finished


class Connector:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config


class TransferManager:  # the fields of vllm-omni's connector runtime that the producer reads
    def __init__(self, extra: dict[str, Any], wrapped: bool = True) -> None:
        self.connector = Connector({"extra": extra} if wrapped else extra)
        self._cached_ic: dict[str, int] = {}


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int | None, bool]]]:
    """vllm-omni's producer: records (request, the first-window size it found cached, is_finished)."""
    calls: list[tuple[str, int | None, bool]] = []

    def talker2code2wav_async_chunk(
        transfer_manager: Any, multimodal_output: Any, request: Any, is_finished: bool = False
    ) -> str:
        calls.append((request.external_req_id, transfer_manager._cached_ic.get(request.external_req_id), is_finished))
        return f"payload of {request.external_req_id}"

    def talker2code2wav_async_chunk_batch(
        transfer_manager: Any, pooling_outputs: list[Any], requests: list[Any], is_finished: list[bool]
    ) -> list[str]:
        return [
            talker2code2wav_async_chunk(transfer_manager, {}, request, finished)
            for request, finished in zip(requests, is_finished, strict=True)
        ]

    module = types.ModuleType(UPSTREAM)
    module.talker2code2wav_async_chunk = talker2code2wav_async_chunk  # type: ignore[attr-defined]
    module.talker2code2wav_async_chunk_batch = talker2code2wav_async_chunk_batch  # type: ignore[attr-defined]
    for name in ("vllm_omni", "vllm_omni.model_executor", "vllm_omni.model_executor.stage_input_processors"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, UPSTREAM, module)
    yield calls


ADAPTIVE = {"codec_chunk_adaptive": True, "codec_chunk_frames": 25, "codec_adaptive_first_frames": 1}


def test_adaptive_windows_start_every_stream_with_the_first_window_asked_for(upstream: list[Any]) -> None:
    manager = TransferManager(ADAPTIVE)
    assert talker_windows.talker2code2wav_async_chunk(manager, {"codes": 1}, Request("a")) == "payload of a"
    assert talker_windows.talker2code2wav_async_chunk(manager, None, Request("a"), is_finished=True) == "payload of a"
    assert upstream == [("a", 1, False), ("a", 1, True)]


def test_a_requests_own_first_window_wins(upstream: list[Any]) -> None:
    manager = TransferManager(ADAPTIVE, wrapped=False)  # a connector config that is its extra itself
    request = Request("b", Info({"initial_codec_chunk_frames": Entry([4])}))
    talker_windows.talker2code2wav_async_chunk(manager, {}, request)
    assert upstream == [("b", 4, False)]


def test_a_size_already_chosen_for_a_stream_is_kept(upstream: list[Any]) -> None:
    manager = TransferManager(ADAPTIVE)
    manager._cached_ic["c"] = 8  # chosen before (vllm-omni never changes a stream's first window once chosen)
    talker_windows.talker2code2wav_async_chunk(manager, {}, Request("c"))
    assert upstream == [("c", 8, False)]


@pytest.mark.parametrize(
    "extra",
    [
        {"codec_chunk_ramp": [1, 2, 4, 8, 16, 25], "codec_chunk_frames": 25, "codec_adaptive_first_frames": 1},
        {"codec_chunk_adaptive": True, "codec_chunk_frames": 25},
        {"codec_chunk_adaptive": False, "codec_adaptive_first_frames": 1},
        {"codec_chunk_adaptive": True, "codec_adaptive_first_frames": 0},
    ],
)
def test_otherwise_vllm_omni_decides_alone(upstream: list[Any], extra: dict[str, Any]) -> None:
    """A ramp (which sizes every window itself), adaptive windows without the setting, or the setting without
    adaptive windows: the producer is vllm-omni's, untouched."""
    manager = TransferManager(extra)
    talker_windows.talker2code2wav_async_chunk(manager, {}, Request("d"))
    assert upstream == [("d", None, False)] and manager._cached_ic == {}


def test_a_model_steps_batch_goes_to_vllm_omnis_batch_builder_with_every_first_window_set(upstream: list[Any]) -> None:
    """vllm-omni's native data plane looks for a `<producer>_batch` peer in the producer's module and builds one
    talker step's payloads with it (one copy of the step's frames): the service's module has one, which sets each
    stream's first window and hands the step to vllm-omni's."""
    manager = TransferManager(ADAPTIVE)
    requests = [Request("e"), Request("f", Info({"initial_codec_chunk_frames": Entry([2])}))]
    payloads = talker_windows.talker2code2wav_async_chunk_batch(manager, [{}, {}], requests, [False, True])
    assert payloads == ["payload of e", "payload of f"]
    assert upstream == [("e", 1, False), ("f", 2, True)]


def test_a_call_that_vllm_omni_would_drop_leaves_no_cache_entry(upstream: list[Any]) -> None:
    """No output and not finished: vllm-omni returns at once, before its own cache is touched; so does the fill, so
    that a late call can never leave an entry behind after vllm-omni's clean-up."""
    manager = TransferManager(ADAPTIVE)
    talker_windows.talker2code2wav_async_chunk(manager, None, Request("g"))
    assert manager._cached_ic == {} and upstream == [("g", None, False)]
    talker_windows.talker2code2wav_async_chunk(manager, None, Request("g", finished=True))
    assert manager._cached_ic == {"g": 1}


def test_while_a_timeline_records_each_window_handed_on_is_recorded(
    upstream: list[Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's payloads, one a stream (None where the step made no window for it): each window handed on is one
    `window_sent` of its stream; nothing while no run records."""

    recorder = installed_recorder(monkeypatch, "talker")
    manager, requests = TransferManager({}), [Request("r1"), Request("r2")]
    talker_windows.talker2code2wav_async_chunk_batch(manager, [{}, {}], requests, [False, False])
    assert not list(tmp_path.iterdir())
    recorder.pin(str(tmp_path))
    talker_windows.talker2code2wav_async_chunk_batch(manager, [{}, {}], requests, [False, False])
    talker_windows.talker2code2wav_async_chunk(manager, {}, Request("r3"))
    talker_windows.record_sent(requests, [None, "payload"])
    recorded = recorded_events(tmp_path, "talker")
    assert [(e["event"], e["request_id"]) for e in recorded] == [
        ("window_sent", "r1"),
        ("window_sent", "r2"),
        ("window_sent", "r3"),
        ("window_sent", "r2"),
    ]
