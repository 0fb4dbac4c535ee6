"""A dilated convolution of the codec decoder computed as an undilated one over its input's phases ("space to batch").

cuDNN's heuristics pick a slow CUDA-core kernel (`implicit_convolve_sgemm`) for some of the decoder's dilated convs:
`Conv1d(384, 384, 7, dilation=9)` over 8 windows takes 3.4 ms a call against 0.36 ms for its undilated neighbour, and
at one window the dilated convs of two blocks take ~0.6 ms against ~0.06 (benchmarks/gpu/2026-11-28-h200-output-conv,
2026-11-28-h200x2-code2wav-timed). Timing the algorithms at start fixes the choice but costs the start a minute and a
half. The same sums as an undilated conv need no timing: with dilation d, output t = j·d + p reads only inputs
p, p + d, p + 2d, ..., so each of the d phases of the input is an ordinary conv with the same weights. The input's
phases become d times the batch, the conv runs undilated, and the phases are put back in order.

`folded_conv1d(x, conv)` equals `conv(x)` for a `torch.nn.Conv1d` with stride 1, no padding of its own and one group
(the decoder's causal convs pad before they call it), up to the rounding of another summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def can_fold(conv: nn.Module) -> bool:
    """A conv `folded_conv1d` computes: a dilated Conv1d, stride 1, no padding, one group."""
    return (
        type(conv) is nn.Conv1d  # not a subclass with a forward of its own (its padding, say), nor one folded already
        and conv.dilation[0] > 1
        and conv.stride == (1,)
        and conv.padding == (0,)
        and conv.groups == 1
    )


def folded_conv1d(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv(x)` for a dilated `conv` (`can_fold`), as an undilated conv over x's phases: x is (batch, channels,
    length), the result (batch, out_channels, length - (kernel - 1) * dilation)."""
    (dilation,) = conv.dilation
    (kernel,) = conv.kernel_size
    batch, channels, length = x.shape
    out_length = length - (kernel - 1) * dilation
    phases = -(-length // dilation)  # input samples per phase, the last phases padded with zeros
    if phases * dilation != length:  # the padding reaches only outputs past out_length, cut below
        x = F.pad(x, (0, phases * dilation - length))
    # (batch, channels, phases, dilation) -> (batch, dilation, channels, phases): phase p holds x[p], x[p + d], ...
    folded = (
        x.reshape(batch, channels, phases, dilation).permute(0, 3, 1, 2).reshape(batch * dilation, channels, phases)
    )
    y = F.conv1d(folded, conv.weight, conv.bias)
    # (batch, dilation, out, n) -> (batch, out, n, dilation): output j of phase p is output j * d + p
    out = y.reshape(batch, dilation, conv.out_channels, y.shape[-1]).permute(0, 2, 3, 1)
    out = out.reshape(batch, conv.out_channels, y.shape[-1] * dilation)
    return out[:, :, :out_length]


class FoldedConv1d(nn.Conv1d):
    """A dilated `nn.Conv1d` whose calls go through `folded_conv1d`: the same module, parameters and state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return folded_conv1d(x, self)


def fold_dilated_convs(model: nn.Module) -> int:
    """Every dilated Conv1d in `model` computed by `folded_conv1d` from now on: its class becomes `FoldedConv1d`, its
    parameters untouched, so loading, copies and state dicts see the same module. Returns how many."""
    folded = 0
    for module in model.modules():
        if can_fold(module):
            module.__class__ = FoldedConv1d
            folded += 1
    return folded
