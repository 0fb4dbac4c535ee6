"""A stand-in for the part of torch that the talker's decode hooks use (vllm-omni 0.30's
`Qwen3TTSTalkerForConditionalGeneration.preprocess_decode_batch` and `make_omni_output`, and the service's
`steady_decode`), over numpy, so that both can run on a machine without torch and their results be compared.

What it keeps as torch does: a tensor's dtype, device, shape and strides (in elements); views where torch makes views
(basic indexing, `reshape` where the strides allow it, `expand`, `unbind`, `detach`) and new tensors where torch makes
new ones (`cat`, `stack`, comparisons, `to` another dtype or device, `contiguous` of a tensor that is not); `cat` and
`stack` raise RuntimeError for tensors on different devices or of different shapes, as torch does, and promote
dtypes as torch does among those below (bool < int8 < int64 < bfloat16, float16 < float32; bfloat16 with float16
makes float32). bfloat16 is kept in float32: the tests give it values bfloat16 holds exactly, and no hook computes
with them, it only moves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    storage: Any  # numpy dtype
    rank: int  # for promotion

    def __repr__(self) -> str:
        return f"torch.{self.name}"


bool = DType("bool", np.bool_, 0)
int8 = DType("int8", np.int8, 1)
long = DType("int64", np.int64, 2)
int64 = long
bfloat16 = DType("bfloat16", np.float32, 3)
float16 = DType("float16", np.float16, 3)
float32 = DType("float32", np.float32, 4)


def promote(dtypes: Sequence[DType]) -> DType:
    top = max(dtypes, key=lambda dtype: dtype.rank)
    if any(dtype.rank == top.rank and dtype != top for dtype in dtypes):
        return float32  # bfloat16 with float16
    return top


class Tensor:
    def __init__(self, array: np.ndarray, dtype: DType, device: str) -> None:
        self.array = array
        self.dtype = dtype
        self.device = device

    # -- what it is ---------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return self.array.ndim

    def numel(self) -> int:
        return int(self.array.size)

    def stride(self) -> tuple[int, ...]:
        return tuple(step // self.array.itemsize for step in self.array.strides)

    def is_contiguous(self) -> bool:
        return self.array.flags.c_contiguous

    # -- views --------------------------------------------------------------------------------------------------
    def _view(self, array: np.ndarray) -> Tensor:
        assert array.size == 0 or np.may_share_memory(array, self.array), "expected a view"
        return Tensor(array, self.dtype, self.device)

    def __getitem__(self, key: Any) -> Tensor:
        if isinstance(key, int):
            return self._view(self.array[key, ...])  # numpy's a[i] of a vector is a scalar, torch's a 0-d view
        assert isinstance(key, slice), key
        return self._view(self.array[key])

    def reshape(self, *shape: Any) -> Tensor:
        target = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        # a view where the strides allow one, else a copy: numpy's rule and torch's
        return Tensor(self.array.reshape(target), self.dtype, self.device)

    def expand(self, *sizes: int) -> Tensor:
        target = tuple(current if size == -1 else size for size, current in zip(sizes, self.shape, strict=True))
        return self._view(np.broadcast_to(self.array, target))

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        assert dim == 0
        return tuple(self[index] for index in range(self.shape[0]))

    def detach(self) -> Tensor:
        return Tensor(self.array, self.dtype, self.device)

    def contiguous(self) -> Tensor:
        if self.is_contiguous():
            return self
        return Tensor(np.ascontiguousarray(self.array), self.dtype, self.device)

    # -- new tensors --------------------------------------------------------------------------------------------
    def to(self, device: str | None = None, dtype: DType | None = None, non_blocking: Any = False) -> Tensor:
        device = self.device if device is None else device
        dtype = self.dtype if dtype is None else dtype
        if device == self.device and dtype == self.dtype:
            return self
        return Tensor(self.array.astype(dtype.storage, copy=True), dtype, device)

    def _compare(self, other: Any, op: Any) -> Tensor:
        assert not isinstance(other, Tensor)
        return Tensor(op(self.array, other), bool, self.device)

    def __ge__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, np.greater_equal)

    def __lt__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, np.less)

    def __and__(self, other: Tensor) -> Tensor:
        if other.device != self.device:
            raise RuntimeError("Expected all tensors to be on the same device")
        return Tensor(np.logical_and(self.array, other.array), bool, self.device)

    def __repr__(self) -> str:
        return f"Tensor({self.array!r}, dtype={self.dtype!r}, device={self.device!r})"


def _joined(tensors: Sequence[Tensor]) -> tuple[DType, str]:
    if not tensors:
        raise RuntimeError("expected a non-empty list of Tensors")
    devices = {tensor.device for tensor in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found {sorted(devices)}")
    return promote([tensor.dtype for tensor in tensors]), tensors[0].device


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    assert dim == 0
    dtype, device = _joined(tensors)
    if len({tensor.shape[1:] for tensor in tensors}) > 1 or any(tensor.ndim == 0 for tensor in tensors):
        raise RuntimeError("Sizes of tensors must match except in dimension 0")
    return Tensor(np.concatenate([tensor.array.astype(dtype.storage) for tensor in tensors]), dtype, device)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    assert dim == 0
    dtype, device = _joined(tensors)
    if len({tensor.shape for tensor in tensors}) > 1:
        raise RuntimeError("stack expects each tensor to be equal size")
    return Tensor(np.stack([tensor.array.astype(dtype.storage) for tensor in tensors]), dtype, device)


def empty(shape: Any, *, device: str = "cpu", dtype: DType = float32) -> Tensor:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    return Tensor(np.zeros(shape, dtype=dtype.storage), dtype, device)


def full(shape: Any, value: Any, *, dtype: DType, device: str = "cpu") -> Tensor:
    return Tensor(np.full(tuple(shape), value, dtype=dtype.storage), dtype, device)


def zeros_like(tensor: Tensor) -> Tensor:
    return Tensor(np.zeros_like(tensor.array), tensor.dtype, tensor.device)


def tensor(values: Any, *, dtype: DType, device: str = "cpu") -> Tensor:
    return Tensor(np.array(values, dtype=dtype.storage), dtype, device)


def same(a: Any, b: Any, path: str = "result") -> None:
    """`a` and `b` the same: tensors of the same dtype, device, shape, strides and values; dicts with the same keys in
    the same order; lists and tuples item by item; anything else equal and of the same type."""
    if isinstance(a, Tensor):
        assert isinstance(b, Tensor), f"{path}: {type(b).__name__}, not a tensor"
        assert (a.dtype, a.device, a.shape, a.stride()) == (b.dtype, b.device, b.shape, b.stride()), (
            f"{path}: {(a.dtype, a.device, a.shape, a.stride())} != {(b.dtype, b.device, b.shape, b.stride())}"
        )
        assert np.array_equal(a.array, b.array), f"{path}: values differ"
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), f"{path}: keys {list(a)} != {b!r}"
        for key in a:
            same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a).__name__} of {len(a)} != {b!r}"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{index}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"
