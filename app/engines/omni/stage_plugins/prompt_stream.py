"""Each request's prompt embeddings built on a CUDA stream of their own (`SPEECH_OMNI__PROMPT_STREAM`).

vllm-omni 0.30 builds a CustomVoice or VoiceDesign request's prompt embeddings inside the talker's prefill step, one
request after another (`Qwen3TTSPromptEmbedsBuilder.build_prompt_embeds`): it tokenizes the text and copies the ids to
the GPU, and makes the speaker's id a tensor on the GPU — copies from pageable memory, each of which returns only once
everything queued before it on its stream has run. On the talker's stream, with asynchronous scheduling, that is the
step still on the GPU: each prefill step of a burst waits for the step the host meant to prepare it beside.

On a stream of their own the copies wait only for the builder's own work; the talker's stream then waits for that
work on the GPU (the host does not), and the tensors the builder returns are marked as used on the talker's stream so
that their memory is not given to anything else before it is done with them. Same kernels on the same inputs: the same
embeddings.

Only requests whose inputs hold no tensor on the GPU go aside (a CustomVoice or VoiceDesign request: text, speaker,
language and instructions, from the request): a Base request's reference-audio features are made on the talker's
stream by the batched pass before, which this stream would not wait for. Nothing goes aside while a CUDA graph is
being captured. The builder's caches (token ids and projections it keeps between requests) are made on this stream:
it waits for the talker's (on the GPU) before its first build, and again after any build made on the talker's stream,
whose new cache entries it may read. What it reads besides (the weights, the talker's pad embedding) is written at
load only. The stream is one of high priority, a pool of its own: its few small kernels go first.

Plain Python at import (the server reads VARIABLE); torch is imported where a build is made aside.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

VARIABLE = "SPEECH_OMNI_PROMPT_STREAM"
ASIDE_TASKS = frozenset({"CustomVoice", "VoiceDesign"})

log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(VARIABLE, "") == "1"


def gpu_tensors(value: Any) -> Iterator[Any]:
    """The tensors on a GPU in `value`, searched through mappings, lists and tuples."""
    if getattr(value, "is_cuda", False) is True:
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from gpu_tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from gpu_tensors(item)


def _torch_cuda() -> Any:
    import torch

    return torch.cuda


class PromptsAside:
    """`build` (a prompt builder's `build_prompt_embeds`) on a CUDA stream of its own wherever it may go there.
    `cuda` is `torch.cuda` unless given (the tests give a stand-in)."""

    def __init__(
        self, build: Callable[..., Any], cuda: Any = None, switched_on: Callable[[], bool] | None = None
    ) -> None:
        self._build = build
        self._cuda = cuda
        self._switched_on = switched_on  # lever_switch.py: whether the stream is in force now (None: always)
        self._stream: Any = None
        self._behind = True  # the talker's stream may hold work the builder's next build reads

    def behind(self) -> None:
        """Work on the talker's stream may have made what the builder's next build reads (the prompts built together
        before the step's rows, prompt_batch.py): that build waits for it first, on the GPU."""
        self._behind = True

    def __call__(self, *, task_type: str, info_dict: dict[str, Any]) -> Any:
        cuda = self._cuda if self._cuda is not None else _torch_cuda()
        if (
            task_type not in ASIDE_TASKS
            or (self._switched_on is not None and not self._switched_on())
            or any(True for _ in gpu_tensors(info_dict))
            or not cuda.is_available()
            or cuda.is_current_stream_capturing()
        ):
            self._behind = True  # a cache entry made here, on the talker's stream, is read aside later
            return self._build(task_type=task_type, info_dict=info_dict)
        main = cuda.current_stream()
        if self._stream is None:
            self._stream = cuda.Stream(device=main.device, priority=-1)
            log.info("prompt embeddings built on a CUDA stream of their own (%s)", VARIABLE)
        if self._behind:  # on the GPU, not the host: what the builder kept from the talker's stream is done
            self._stream.wait_stream(main)
            self._behind = False
        with cuda.stream(self._stream):
            built = self._build(task_type=task_type, info_dict=info_dict)
        main.wait_stream(self._stream)
        for tensor in gpu_tensors(built):
            tensor.record_stream(main)
        return built
