"""The prompts' own CUDA stream (app/engines/omni/stage_plugins/prompt_stream.py) with a stand-in for torch.cuda:
which builds go aside, and what is ordered around them. On a GPU, with vllm-omni's own builder:
tests/gpu/test_prompt_stream.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.engines.omni.stage_plugins import prompt_stream
from app.engines.omni.stage_plugins.prompt_stream import PromptsAside


@dataclass
class Tensor:
    name: str
    is_cuda: bool = True
    recorded_on: list[str] = field(default_factory=list)

    def record_stream(self, stream: Stream) -> None:
        self.recorded_on.append(stream.name)


@dataclass
class Stream:
    name: str
    events: list[str]
    device: str = "cuda:0"

    def wait_stream(self, other: Stream) -> None:
        self.events.append(f"{self.name} waits for {other.name}")


class Cuda:
    """torch.cuda as PromptsAside uses it, recording what it is asked."""

    def __init__(self, available: bool = True, capturing: bool = False) -> None:
        self.events: list[str] = []
        self.available, self.capturing = available, capturing
        self.current = Stream("talker", self.events)

    def is_available(self) -> bool:
        return self.available

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def current_stream(self) -> Stream:
        return self.current

    def Stream(self, device: str, priority: int = 0) -> Stream:  # torch.cuda's name
        self.events.append(f"new stream on {device}, priority {priority}")
        return Stream("prompts", self.events, device)

    @contextlib.contextmanager
    def stream(self, stream: Stream) -> Iterator[None]:
        talker, self.current = self.current, stream
        self.events.append(f"on {stream.name}")
        try:
            yield
        finally:
            self.current = talker
            self.events.append(f"back on {talker.name}")


def builder(cuda: Cuda, built: Any) -> Any:
    def build(*, task_type: str, info_dict: dict[str, Any]) -> Any:
        cuda.events.append(f"built {task_type} on {cuda.current.name}")
        return built

    return build


def test_a_customvoice_prompt_is_built_aside_and_the_talkers_stream_waits_for_it_on_the_gpu() -> None:
    cuda = Cuda()
    embeds, hidden = Tensor("embeds"), Tensor("hidden")
    built = (embeds, hidden, None, None)
    aside = PromptsAside(builder(cuda, built), cuda)
    assert aside(task_type="CustomVoice", info_dict={"text": ["Hi."], "speaker": ["vivian"]}) is built
    assert cuda.events == [
        "new stream on cuda:0, priority -1",  # high: its few small kernels go first
        "prompts waits for talker",  # the caches the builder keeps were made before, on the talker's stream
        "on prompts",
        "built CustomVoice on prompts",
        "back on talker",
        "talker waits for prompts",
    ]
    assert embeds.recorded_on == ["talker"] and hidden.recorded_on == ["talker"]
    cuda.events.clear()
    aside(task_type="VoiceDesign", info_dict={"text": ["Hi."], "instruct": ["warm"]})
    assert cuda.events == ["on prompts", "built VoiceDesign on prompts", "back on talker", "talker waits for prompts"]


def test_after_a_build_on_the_talkers_stream_the_next_one_aside_waits_for_it_on_the_gpu() -> None:
    """A build that stays on the talker's stream may add to the builder's caches there, asynchronously: the next build
    aside waits for the talker's stream first (on the GPU), once."""
    cuda = Cuda()
    aside = PromptsAside(builder(cuda, "built"), cuda)
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    aside(task_type="Base", info_dict={"text": ["Hi."]})
    cuda.events.clear()
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    assert cuda.events == [
        "prompts waits for talker",
        *["on prompts", "built CustomVoice on prompts", "back on talker", "talker waits for prompts"] * 2,
    ]


def test_what_may_not_go_aside_is_built_on_the_talkers_stream() -> None:
    """A Base prompt (its reference features made on the talker's stream before), inputs holding a tensor on the GPU,
    a CUDA graph being captured, no GPU."""
    for cuda, task, info in (
        (Cuda(), "Base", {"text": ["Hi."]}),
        (Cuda(), "CustomVoice", {"text": ["Hi."], "features": [{"ref_code": Tensor("ref")}]}),
        (Cuda(capturing=True), "CustomVoice", {"text": ["Hi."]}),
        (Cuda(available=False), "CustomVoice", {"text": ["Hi."]}),
    ):
        aside = PromptsAside(builder(cuda, "built"), cuda)
        assert aside(task_type=task, info_dict=info) == "built"
        assert cuda.events == [f"built {task} on talker"]


def test_the_tensors_on_a_gpu_are_found_wherever_they_sit() -> None:
    inner = Tensor("inner")
    value = {"a": [1, (Tensor("cpu", is_cuda=False), {"b": inner})], "c": "text"}
    assert list(prompt_stream.gpu_tensors(value)) == [inner]
    assert list(prompt_stream.gpu_tensors(None)) == []


def test_the_stage_reads_the_servers_setting_from_the_environment() -> None:
    assert prompt_stream.enabled({prompt_stream.VARIABLE: "1"})
    assert not prompt_stream.enabled({}) and not prompt_stream.enabled({prompt_stream.VARIABLE: "0"})


def test_switched_off_the_prompts_are_built_on_the_talkers_stream_and_the_next_build_aside_waits_for_it() -> None:
    """With a lever switch (lever_switch.py) the stream is in force only while switched on; a build made on the
    talker's stream meanwhile may add to the builder's caches there, so the first build aside after it waits first."""
    cuda = Cuda()
    switched = [True]
    aside = PromptsAside(builder(cuda, "built"), cuda, switched_on=lambda: switched[0])
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    switched[0] = False
    cuda.events.clear()
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    assert cuda.events == ["built CustomVoice on talker"]
    switched[0] = True
    cuda.events.clear()
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    assert cuda.events == [
        "prompts waits for talker",
        "on prompts",
        "built CustomVoice on prompts",
        "back on talker",
        "talker waits for prompts",
    ]


def test_work_on_the_talkers_stream_said_to_be_behind_makes_the_next_build_aside_wait_for_it() -> None:
    """The prompts built together (prompt_batch.py) run on the talker's stream before the step's rows: the talker
    says so, and the next build aside waits for the talker's stream first, on the GPU."""
    cuda = Cuda()
    aside = PromptsAside(builder(cuda, "built"), cuda)
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    aside.behind()
    cuda.events.clear()
    aside(task_type="CustomVoice", info_dict={"text": ["Hi."]})
    assert cuda.events[0] == "prompts waits for talker"
