from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz codec frames


def torch_with_vllm_omni_030(written_against: str) -> Any:
    """torch, on a host with a CUDA device and vllm-omni 0.30, whose sources the calling test follows
    (`written_against`: what of them); otherwise the test is skipped, saying what is missing."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("vllm", reason="vllm is not installed")
    pytest.importorskip("vllm_omni", reason="vllm-omni is not installed")
    version = importlib.metadata.version("vllm-omni")
    if not version.startswith("0.30."):
        pytest.skip(f"written against vllm-omni 0.30's {written_against}, found {version}")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def speak(url: str, timeout: float = 300, **body: object) -> httpx.Response:
    payload = {"model": model_of(url), "voice": "vivian", "input": "Hello from the GPU.", **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=timeout)


_models: dict[str, str] = {}


def model_of(url: str) -> str:
    if url not in _models:
        _models[url] = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    return _models[url]


def stream_windows(frames: int, *, ramp: list[int] | None, steady: int, initial: int) -> list[int]:
    """The windows (new frames each) in which vllm-omni 0.30's talker->code2wav processor ships a request of `frames`
    codec frames when it is called once per generated frame (stage_input_processors/qwen3_tts.py:310-339 and
    chunk_size_utils.compute_ramp_emit): with a ramp, ramp[i] frames for window i, then `steady` each; without one,
    `initial` frames first when 0 < initial < steady, then `steady` each; the last window takes what is left."""
    if frames <= 0:
        return []
    if ramp:
        sizes = list(ramp)
    elif 0 < initial < steady:
        sizes = [initial]
    else:
        sizes = []
    windows: list[int] = []
    left = frames
    while left > 0:
        size = sizes[len(windows)] if len(windows) < len(sizes) else steady
        windows.append(min(size, left))
        left -= windows[-1]
    return windows


def full_context_frames(windows: list[int], sliding_window: int) -> int:
    """How many leading frames of a stream 0.30's stateful decoder decodes with all of the stream's history: a window
    that starts before `sliding_window` frames have been decoded is decoded with the whole stream so far (the cache
    has not rolled yet); from the first window that starts later on, only the last `sliding_window` frames are kept
    (modeling_qwen3_tts_tokenizer_v2.py `_is_suffix_cache_rolling`, `decode_suffix`)."""
    decoded = 0
    for window in windows:
        if decoded >= sliding_window:
            break
        decoded += window
    return decoded


@dataclass(frozen=True)
class WaveDiff:
    """How far `candidate` is from `reference`: the largest sample difference and the signal-to-noise ratio."""

    max_abs: float
    snr_db: float
    reference_rms: float

    def __str__(self) -> str:
        return f"max |diff| {self.max_abs:.3g}, SNR {self.snr_db:.1f} dB (reference RMS {self.reference_rms:.3g})"


def wave_diff(reference: Any, candidate: Any) -> WaveDiff:
    """Compare two waveforms of the same length; SNR = 10 log10(sum ref^2 / sum (ref - cand)^2), inf when equal."""
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(-1)
    if ref.shape != cand.shape:
        raise ValueError(f"waveforms differ in length: {ref.size} and {cand.size} samples")
    if ref.size == 0:
        raise ValueError("empty waveforms")
    noise = float(np.sum((ref - cand) ** 2))
    signal = float(np.sum(ref**2))
    snr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return WaveDiff(float(np.max(np.abs(ref - cand))), snr, math.sqrt(signal / ref.size))


def rolled_windows(windows: list[int], sliding_window: int) -> list[tuple[int, int]]:
    """The (first, end) frames of each window that 0.30's stateful decoder decodes after its cache has rolled: from
    the last `sliding_window` frames before the window and the window itself, nothing older
    (modeling_qwen3_tts_tokenizer_v2.py `decode_suffix` with `rolling`; vllm-omni's own
    test_xvec_rolling_matches_truncated_suffix_window holds it to a one-call decode of just those frames)."""
    spans: list[tuple[int, int]] = []
    decoded = 0
    for window in windows:
        if decoded >= sliding_window:
            spans.append((decoded, decoded + window))
        decoded += window
    return spans
