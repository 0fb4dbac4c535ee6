"""A stand-in for the part of torch that vllm-omni 0.30's Qwen3-TTS prompt builder (`build_prompt_embeds`, CustomVoice
and VoiceDesign) and the service's `prompt_batch` use, over numpy, so that both can run on a machine without torch and
their results be compared bit for bit; it also counts what a GPU would be asked for: each new tensor made on the GPU
(a kernel, `LAUNCHES`) and each copy to the GPU from pageable memory (`WAITING_COPIES`, one that waits for the stream).

Values are kept in float64 and the tests give integers small enough that every sum and product is exact, so the
order of a matrix product's sums (which a GPU's kernels choose by shape) cannot change a result here; dtypes are
carried, not applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

COUNTS = {"launches": 0, "waiting_copies": 0}


@dataclass(frozen=True)
class dtype:  # torch's name
    name: str

    def __repr__(self) -> str:
        return f"torch.{self.name}"


long = dtype("int64")
bfloat16 = dtype("bfloat16")
float32 = dtype("float32")


class device:  # torch's name
    def __init__(self, spec: Any) -> None:
        text = str(spec)
        self.type, _, index = text.partition(":")
        self.index = int(index) if index else None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def _launched(on: device) -> None:
    if on.type == "cuda":
        COUNTS["launches"] += 1


class Tensor:
    def __init__(self, array: np.ndarray, dtype: dtype, on: Any, pinned: bool = False) -> None:
        self.array = array
        self.dtype = dtype
        self.device = on if isinstance(on, device) else device(on)
        self.pinned = pinned

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return self.array.ndim

    def numel(self) -> int:
        return int(self.array.size)

    def _view(self, array: np.ndarray) -> Tensor:
        return Tensor(array, self.dtype, self.device)

    def _new(self, array: np.ndarray, kind: dtype | None = None) -> Tensor:
        _launched(self.device)
        return Tensor(np.array(array), kind or self.dtype, self.device)

    def __getitem__(self, key: Any) -> Tensor:
        return self._view(self.array[key])

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        index = [slice(None)] * self.ndim
        index[dim] = slice(start, start + length)
        return self._view(self.array[tuple(index)])

    def unsqueeze(self, dim: int) -> Tensor:
        return self._view(np.expand_dims(self.array, dim))

    def squeeze(self, dim: int) -> Tensor:
        return self._view(np.squeeze(self.array, dim) if self.array.shape[dim] == 1 else self.array)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return tuple(self._view(part) for part in np.array_split(self.array, chunks, axis=dim))

    def expand(self, *sizes: int) -> Tensor:
        shape = tuple(old if new == -1 else new for old, new in zip(self.shape, sizes, strict=True))
        return self._view(np.broadcast_to(self.array, shape))

    def view(self, *shape: int) -> Tensor:
        return self._view(self.array.reshape(shape))

    reshape = view

    def contiguous(self) -> Tensor:
        return self

    def detach(self) -> Tensor:
        return self

    def __add__(self, other: Tensor) -> Tensor:
        assert self.device == other.device, (self.device, other.device)
        return self._new(self.array + other.array)

    def to(self, device: Any = None, dtype: dtype | None = None, non_blocking: bool = False) -> Tensor:
        target = self.device if device is None else globals()["device"](device)
        if target == self.device and (dtype is None or dtype == self.dtype):
            return self
        if target.type == "cuda" and self.device.type == "cpu":
            if not (self.pinned and non_blocking):
                COUNTS["waiting_copies"] += 1
            return Tensor(np.array(self.array), dtype or self.dtype, target)
        return (
            Tensor(np.array(self.array), dtype or self.dtype, target)
            if target.type == "cpu"
            else self._new(self.array, dtype)
        )


def tensor(values: Any, *, dtype: dtype, device: Any = "cpu", pin_memory: bool = False) -> Tensor:
    made = Tensor(np.array(values, dtype=np.int64 if dtype == long else np.float64), dtype, "cpu", pinned=pin_memory)
    return made.to(device=device)


def full(shape: Sequence[int], value: Any, *, device: Any, dtype: dtype) -> Tensor:
    on = globals()["device"](device)
    _launched(on)
    return Tensor(np.full(tuple(shape), value, dtype=np.int64 if dtype == long else np.float64), dtype, on)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    assert len({str(t.device) for t in tensors}) == 1, "tensors on different devices"
    return tensors[0]._new(np.concatenate([t.array for t in tensors], axis=dim))


def inference_mode() -> Callable[[Any], Any]:
    return lambda function: function


class Embedding:
    """A lookup table on the GPU, called as an `nn.Embedding` is."""

    def __init__(self, table: np.ndarray, on: str = "cuda:0") -> None:
        self.weight = Tensor(table.astype(np.float64), bfloat16, on)

    def parameters(self) -> Iterator[Tensor]:
        yield self.weight

    def __call__(self, ids: Tensor) -> Tensor:
        assert ids.device == self.weight.device and ids.dtype == long
        return self.weight._new(self.weight.array[ids.array])


class Projection:
    """The talker's text projection (linear, activation, linear, each a kernel), here in exact integer arithmetic."""

    def __init__(self, first: np.ndarray, second: np.ndarray) -> None:
        self.first, self.second = first.astype(np.float64), second.astype(np.float64)

    def __call__(self, x: Tensor) -> Tensor:
        inner = x._new(x.array @ self.first)
        inner = inner._new(np.maximum(inner.array, 0))
        return inner._new(inner.array @ self.second)
