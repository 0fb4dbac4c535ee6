"""The talker's async-chunk producer (stage 0 of vllm-omni 0.30's Qwen3-TTS pipeline): vllm-omni's own, with every
stream's first window fixed under adaptive windows (`codec_adaptive_first_frames`), where vllm-omni would size it by
load. vllm-omni is not importable here: its producer is a stand-in that records what it found in its cache of
first-window sizes (`_cached_ic`, which it fills itself only for requests it has no entry for)."""

from __future__ import annotations

import collections
import dataclasses
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from app.engines.omni.stage_plugins import lever_switch, talker_windows
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
    monkeypatch.delenv(talker_windows.VARIABLE, raising=False)  # vllm-omni's batch builder unless a test sets it
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


class Codes:  # a tensor of codes, as far as the batch builder handles one
    def __init__(self, values: list[int], rows: int = 1) -> None:
        self.values, self.shape = values, (rows, len(values) // rows)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Codes) and (other.values, other.shape) == (self.values, self.shape)

    def numel(self) -> int:
        return len(self.values)

    def reshape(self, *shape: Any) -> Codes:
        rows = shape[0][0] if isinstance(shape[0], tuple) else shape[0]
        return Codes(self.values, 1 if rows == -1 else rows)

    def contiguous(self) -> Codes:
        return self

    def tolist(self) -> list[int]:
        return list(self.values)


@pytest.fixture
def batch_parts(upstream: list[Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """vllm-omni's batch builder's helpers in its stand-in module: the last frame of an output (its codes), whether
    to keep it (its `valid`), and the step's copy to the host (recorded; the same objects back); its batch builder
    recorded too."""
    module = sys.modules[UPSTREAM]
    seen: dict[str, list[Any]] = {"copied": [], "batches": []}
    upstream_batch = module.talker2code2wav_async_chunk_batch  # type: ignore[attr-defined]

    def batch(*arguments: Any) -> Any:
        seen["batches"].append(arguments[2])
        return upstream_batch(*arguments)

    def copy(tensors: list[Any]) -> list[Any]:
        seen["copied"].append(list(tensors))
        return list(tensors)

    monkeypatch.setattr(module, "torch", types.SimpleNamespace(Tensor=Codes), raising=False)
    monkeypatch.setattr(module, "_extract_last_frame", lambda output: output["codes"].get("audio"), raising=False)
    monkeypatch.setattr(
        module, "_should_append_async_frame", lambda output, frame: output["meta"]["valid"], raising=False
    )
    monkeypatch.setattr(module, "_copy_async_chunk_tensors_to_cpu", copy, raising=False)
    monkeypatch.setattr(module, "talker2code2wav_async_chunk_batch", batch)
    monkeypatch.setattr(lever_switch, "_process_switch", None)  # the process's switch, made again from this environment
    monkeypatch.delenv(lever_switch.VARIABLE, raising=False)
    return seen


def frames_manager() -> TransferManager:
    manager = TransferManager({"codec_chunk_ramp": [1, 2, 4, 8, 16, 25], "codec_chunk_frames": 25})
    manager.code_prompt_token_ids = collections.defaultdict(list)  # type: ignore[attr-defined]
    return manager


def test_frames_as_lists_keep_each_new_frame_as_its_codes_and_leave_every_window_to_vllm_omnis_producer(
    upstream: list[Any], batch_parts: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEECH_OMNI__FRAMES_AS_LISTS: vllm-omni's batch builder step for step (the step's kept frames and new reference
    codes copied to the host together, a stream's reference codes once, then vllm-omni's producer for every stream,
    an output or not), but each kept frame appended as the list of its codes, as vllm-omni's runtime declares them."""
    monkeypatch.setenv(talker_windows.VARIABLE, "1")
    manager = frames_manager()
    kept, dropped, reference = Codes([5, 6, 7]), Codes([0, 0, 0]), Codes([1, 2, 3, 4, 5, 6], rows=2)
    outputs = [
        {"codes": {"audio": kept, "ref": reference}, "meta": {"valid": True}},
        {"codes": {"audio": dropped}, "meta": {"valid": False}},
        None,  # a stream without an output this step
    ]
    requests = [Request("s1"), Request("s2"), Request("s3", finished=True)]
    payloads = talker_windows.talker2code2wav_async_chunk_batch(manager, outputs, requests, [False, False, True])
    assert payloads == ["payload of s1", "payload of s2", "payload of s3"]
    assert upstream == [("s1", None, False), ("s2", None, False), ("s3", None, True)]
    assert batch_parts["batches"] == [] and batch_parts["copied"] == [[kept, reference]]
    assert dict(manager.code_prompt_token_ids) == {"s1": [[5, 6, 7]]}  # type: ignore[attr-defined]
    assert type(manager.code_prompt_token_ids["s1"][0]) is list  # type: ignore[attr-defined]
    assert manager.request_payload == {"s1": reference}  # type: ignore[attr-defined]
    again = [{"codes": {"audio": Codes([8, 9, 10]), "ref": reference}, "meta": {"valid": True}}]
    talker_windows.talker2code2wav_async_chunk_batch(manager, again, [Request("s1")], [False])
    assert batch_parts["copied"][-1] == [again[0]["codes"]["audio"]]  # the reference codes are the stream's already
    assert manager.code_prompt_token_ids["s1"] == [[5, 6, 7], [8, 9, 10]]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="identical lengths"):
        talker_windows.talker2code2wav_async_chunk_batch(manager, [None], [], [])


def test_without_the_setting_or_while_a_switch_file_leaves_it_out_the_step_is_vllm_omnis(
    upstream: list[Any], batch_parts: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    outputs = [{"codes": {"audio": Codes([5, 6, 7])}, "meta": {"valid": True}}]
    talker_windows.talker2code2wav_async_chunk_batch(frames_manager(), outputs, [Request("u1")], [False])
    monkeypatch.setenv(talker_windows.VARIABLE, "1")
    switch = tmp_path / "levers"
    switch.write_text("prompt_batch")
    monkeypatch.setenv(lever_switch.VARIABLE, str(switch))
    talker_windows.talker2code2wav_async_chunk_batch(frames_manager(), outputs, [Request("u2")], [False])
    assert [[request.external_req_id for request in step] for step in batch_parts["batches"]] == [["u1"], ["u2"]]
    switch.write_text("frames_as_lists")
    monkeypatch.setattr(lever_switch, "_process_switch", None)  # read afresh rather than after a quarter second
    talker_windows.talker2code2wav_async_chunk_batch(frames_manager(), outputs, [Request("u3")], [False])
    assert len(batch_parts["batches"]) == 2 and batch_parts["copied"] == [[outputs[0]["codes"]["audio"]]]
