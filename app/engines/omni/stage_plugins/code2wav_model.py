"""The service's code2wav model for vllm-omni 0.30.0 (stage 1 of its Qwen3-TTS pipeline): vllm-omni's own
`Qwen3TTSCode2Wav`, which the code2wav process builds under the name `SpeechQwen3TTSCode2Wav` (registered by
`model_registration.register`, a `vllm_omni.general_plugins` entry point), with one change to how its codec decoder
runs and none to what it computes beyond rounding. The service selects it with `SPEECH_OMNI__CODE2WAV_MODEL`.

The decoder's last layer is a convolution from 96 channels to one, over every output sample (`Conv1d(96, 1, 7)`). For
a single output channel cuDNN has no tensor-core kernel: profiled at c=32 on an H200
(benchmarks/gpu/2026-11-28-h200x2-profiles), a third of code2wav's GPU time went to one CUDA-core kernel,
`implicit_convolve_sgemm`, about 1 ms a call. Here that conv computes with output channels up to a multiple of 8, the
first the trained filter and the others zero, and the decoder keeps the first: the same sum for every output sample,
in a shape cuDNN has tensor-core kernels for (the sums may be added in another order: equal up to rounding). The
change is made after the weights are loaded and before the decoder's CUDA graphs are captured, so that the graphs hold
it. What it saves is measured on a GPU, not assumed: until then the setting is off by default.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav import Qwen3TTSCode2Wav

log = logging.getLogger("vllm.speech.code2wav")  # under vLLM's logger, whose handler the stage process has

TENSOR_CORE_CHANNELS = 8  # a bf16 tensor-core convolution takes its output channels in multiples of 8


class WidenedOutputConv1d(nn.Conv1d):
    """An `nn.Conv1d` that computes with zero filters added up to a multiple of `multiple` output channels and
    returns its own channels only. It holds the trained conv's own parameters, under their names (vLLM's loader checks
    every parameter's name against the weights it loaded, and a reload writes into them); the widened weight is made
    from them at each call, one small copy inside the decoder's CUDA graph."""

    multiple: int

    @classmethod
    def of(cls, conv: nn.Conv1d, multiple: int = TENSOR_CORE_CHANNELS) -> WidenedOutputConv1d:
        if conv.groups != 1 or conv.padding_mode != "zeros":
            # grouped: the added filters would change which inputs each group sees; other padding modes pad inside
            raise ValueError(f"only an ungrouped, zero-padded Conv1d can be widened, not {conv}")
        widened = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            bias=conv.bias is not None,
            device="meta",  # no memory of its own: the trained parameters replace these below
        )
        widened.weight = conv.weight
        widened.bias = conv.bias
        widened.multiple = multiple
        return widened

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        added = -self.out_channels % self.multiple
        weight = F.pad(self.weight, (0, 0, 0, 0, 0, added))  # (out, in, kernel): zero filters after the trained ones
        bias = None if self.bias is None else F.pad(self.bias, (0, added))
        return self._conv_forward(hidden, weight, bias)[:, : self.out_channels]


def widen_output_conv(decoder: nn.Module, multiple: int = TENSOR_CORE_CHANNELS) -> int:
    """Give the codec decoder's last conv (`decoder.decoder[-1].conv`, vllm-omni 0.30's
    `Qwen3TTSTokenizerV2CausalConvNet(output_dim, 1, 7)`) output channels up to `multiple`: the channels it computes
    with now, 0 where it has a multiple already (or was widened before)."""
    final = decoder.decoder[-1]
    conv = final.conv
    if isinstance(conv, WidenedOutputConv1d) or conv.out_channels % multiple == 0:
        return 0
    final.conv = WidenedOutputConv1d.of(conv, multiple)
    return -(-conv.out_channels // multiple) * multiple


class SpeechQwen3TTSCode2Wav(Qwen3TTSCode2Wav):
    """vllm-omni's code2wav with the decoder's output conv on tensor cores. vllm-omni calls
    `_maybe_enable_decoder_cudagraph` from `load_weights` on a CUDA device, once the decoder holds its weights and
    before it captures the decoder's graphs; on another device, or with dummy weights, the decoder stays as it is."""

    def _maybe_enable_decoder_cudagraph(self, **kwargs: Any) -> None:
        # vllm-omni catches and logs whatever this raises as a failure to capture its graphs; a decoder of another
        # shape must stop the start instead, so the error waits for the loader's next call below
        try:
            channels = widen_output_conv(self.decoder)
            if channels:
                log.info("code2wav: the decoder's output conv widened to %d channels", channels)
        except Exception as error:
            self._speech_widen_error = error
            raise
        super()._maybe_enable_decoder_cudagraph(**kwargs)

    def process_weights_after_loading(self) -> None:
        error = getattr(self, "_speech_widen_error", None)
        if error is not None:
            raise RuntimeError("code2wav: could not widen the decoder's output conv") from error
        upstream = getattr(super(), "process_weights_after_loading", None)
        if upstream is not None:
            upstream()
