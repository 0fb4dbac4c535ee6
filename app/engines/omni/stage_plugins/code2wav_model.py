"""The service's code2wav models for vllm-omni 0.30.0 (stage 1 of its Qwen3-TTS pipeline): vllm-omni's own
`Qwen3TTSCode2Wav`, which the code2wav process builds under the names below (registered by
`model_registration.register`, a `vllm_omni.general_plugins` entry point), with the decoder's dilated convolutions
kept off the slow kernel cuDNN's heuristics pick for them, in one of two ways. The service selects one with
`SPEECH_OMNI__CODE2WAV_MODEL`:
- `service-folded` (`SpeechFoldedQwen3TTSCode2Wav`, the default): each dilated conv computed as an undilated one over
  its input's phases (`dilated_convs.py`), whose kernel the heuristics pick: no timing, so no start cost. Measured on
  the whole server beside vllm-omni's code2wav (benchmarks/gpu/2026-11-28-h200x4-quad): code2wav's GPU time a frame
  0.69x at c=32, 1.03-1.09x the requests a second.
- `service` (`SpeechQwen3TTSCode2Wav`): cuDNN chooses each convolution's algorithm by timing them
  (`torch.backends.cudnn.benchmark`) while the decoder's graphs are made. Measured on the whole server
  (benchmarks/gpu/2026-11-28-h200x2-code2wav-timed): code2wav's GPU time a frame 0.69x at c=32, and 92.6 s more start.

Profiled at c=32 on an H200 (benchmarks/gpu/2026-11-28-h200x2-profiles), a third of code2wav's GPU time went to one
CUDA-core kernel, `implicit_convolve_sgemm`, about 1 ms a call. Alone on the GPU
(benchmarks/gpu/2026-11-28-h200-output-conv), cuDNN's heuristics pick that kernel for some of the decoder's dilated
convs at some batch sizes: `Conv1d(384, 384, 7, dilation=9)` over 8 windows 3 412 µs a call against 361-372 µs for
its undilated and dilation-3 neighbours, and at one window the dilated convs of two blocks 594-605 µs. Timed by
cuDNN, the same convs take 394 and 85-94 µs, the same sums in another kernel (equal up to rounding).

Both capture the decoder's graphs only for the kinds of stream the checkpoint can have (`decoder_graphs.py`: a
CustomVoice or VoiceDesign checkpoint never decodes after reference codes, so half of vllm-omni's graphs would never
be replayed).

cuDNN times a shape's algorithms the first time it meets that shape, which takes milliseconds a convolution. So the
timing is on only while vllm-omni warms up and captures the decoder's CUDA graphs at start: it runs every shape it
captures once before capturing it, so each graph holds the algorithms timed for its shape. Afterwards the switch is
back as it was: a shape decoded without a graph (an eager fallback) gets cuDNN's heuristics, as in vllm-omni's own
code2wav, rather than a timing pause in the middle of a stream. The switch is process-wide; code2wav runs in a stage
process of its own, as vllm-omni's own TF32 switch for it assumes (`decode_enable_tf32`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav import Qwen3TTSCode2Wav

from app.engines.omni.stage_plugins.decoder_graphs import decoder_graph_modes
from app.engines.omni.stage_plugins.dilated_convs import fold_dilated_convs

log = logging.getLogger("vllm.speech.code2wav")  # under vLLM's logger, whose handler the stage process has


def capture_only_usable_graphs(model: Qwen3TTSCode2Wav) -> None:
    """The decoder graphs of the kinds of stream the checkpoint can have (decoder_graphs.py): vllm-omni reads the
    modes from the model when it enables the decoder's graphs."""
    modes = decoder_graph_modes(model.model_path)
    if modes != tuple(model.decoder_cudagraph_modes):
        log.info(
            "code2wav: decoder graphs for %s streams only (the checkpoint gets no reference codes)", "/".join(modes)
        )
    model.decoder_cudagraph_modes = modes


class SpeechQwen3TTSCode2Wav(Qwen3TTSCode2Wav):
    """vllm-omni's code2wav with its decoder's graphs made from timed cuDNN algorithms. vllm-omni calls
    `_maybe_enable_decoder_cudagraph` from `load_weights` on a CUDA device, once the decoder holds its weights; it
    warms up and captures the decoder's graphs."""

    def _maybe_enable_decoder_cudagraph(self, **kwargs: Any) -> None:
        capture_only_usable_graphs(self)
        timed = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        started = time.perf_counter()
        try:
            super()._maybe_enable_decoder_cudagraph(**kwargs)
        finally:
            torch.backends.cudnn.benchmark = timed
        log.info("code2wav: decoder graphs made from timed cuDNN algorithms in %.1f s", time.perf_counter() - started)


class SpeechFoldedQwen3TTSCode2Wav(Qwen3TTSCode2Wav):
    """vllm-omni's code2wav with the decoder's dilated convs folded into undilated ones over their input's phases
    before it warms up and captures its graphs (vllm-omni calls `_maybe_enable_decoder_cudagraph` on a CUDA device
    once the weights are loaded, with graphs or without: folded either way)."""

    def _maybe_enable_decoder_cudagraph(self, **kwargs: Any) -> None:
        folded = fold_dilated_convs(self.decoder)
        log.info("code2wav: %d dilated convs of the decoder folded into undilated ones over their phases", folded)
        capture_only_usable_graphs(self)
        super()._maybe_enable_decoder_cudagraph(**kwargs)
