"""The sizes of the windows in which vllm-omni 0.30's Qwen3-TTS talker hands its codec frames to code2wav.

Stage 0's chunk builder (`vllm_omni/model_executor/stage_input_processors/qwen3_tts.py`) cuts a stream's frames into
windows by the deploy profile's connector settings: either a first window of `initial_codec_chunk_frames` and then
`codec_chunk_frames` each, or, when `codec_chunk_ramp` is set, the ramp's sizes one after the other and then
`codec_chunk_frames` each, or, with `codec_chunk_adaptive`, sizes chosen at run time from how far each stream is
ahead of its listener (`chunk_size_utils.AdaptiveChunkController`), up to `codec_chunk_frames`. Both the ramp and the
adaptive sizes replace the first-window size, the per-request one included, which the service then refuses rather
than ignores; but with `codec_adaptive_first_frames` beside adaptive windows, the service's talker producer
(`stage_plugins/talker_windows.py`) fixes the first window, a request's own size first. Pure Python: read from the
profile's YAML, no engine import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engines.omni.stage_plugins.talker_windows import first_window_frames


@dataclass(frozen=True, slots=True)
class CodecWindows:
    """Window i holds `first[i]` new frames while i < len(first), `steady` frames after that."""

    first: tuple[int, ...]
    steady: int
    ramp: bool = False  # the sizes come from `codec_chunk_ramp` (vllm-omni then ignores a request's first size)
    adaptive: bool = False  # `codec_chunk_adaptive`: sizes chosen at run time; `first` is only the smallest window
    # with adaptive windows, `first` is the first window, fixed by the service's talker producer
    # (`codec_adaptive_first_frames`, stage_plugins/talker_windows.py), which honours a request's own first size
    first_fixed: bool = False

    @property
    def request_first_size_ignored(self) -> bool:
        """vllm-omni ignores a request's own `initial_codec_chunk_frames` under a ramp or adaptive windows (but where
        the service's talker producer fixes adaptive windows' first one)."""
        return self.ramp or (self.adaptive and not self.first_fixed)

    def __post_init__(self) -> None:
        if not self.first or any(size <= 0 for size in self.first) or self.steady <= 0:
            raise ValueError(f"window sizes must be positive: {self.first} then {self.steady}")

    @classmethod
    def from_connector_extra(cls, extra: Mapping[str, Any]) -> CodecWindows | None:
        """The schedule a connector's `extra` settings give, as vllm-omni 0.30 reads them (`chunk_size_utils`:
        `parse_adaptive_config`, which wins over `parse_chunk_ramp`: a list or a comma-separated string of at least
        two positive sizes, else no ramp). None when the first window is left to vllm-omni, which then sizes it by
        load: no fixed schedule exists."""
        steady = int(extra.get("codec_chunk_frames") or 25)
        if _flag(extra.get("codec_chunk_adaptive")):
            first = first_window_frames(extra, request=None)  # the talker producer's own reading of the profile
            if first is not None:
                return cls((min(first, steady),), steady, adaptive=True, first_fixed=True)
            return cls((max(1, int(extra.get("codec_chunk_min_frames") or 2)),), steady, adaptive=True)
        ramp = _ramp(extra.get("codec_chunk_ramp"))
        if ramp is not None:
            return cls(ramp, steady, ramp=True)
        initial = int(extra.get("initial_codec_chunk_frames") or 0)
        if initial <= 0:
            return None
        return cls((min(initial, steady),), steady)  # vllm-omni clamps a first window larger than the steady ones


# vllm-omni 0.30's own qwen3_tts.yaml, used when a deployment gives no profile: a first window of 1 frame, then 25
VLLM_OMNI_DEFAULT = CodecWindows((1,), 25)


def _ramp(raw: object) -> tuple[int, ...] | None:
    if raw is None:
        return None
    try:
        sizes = [int(x.strip()) for x in raw.split(",")] if isinstance(raw, str) else [int(x) for x in raw]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None
    if len(sizes) < 2 or any(size <= 0 for size in sizes):
        return None
    return tuple(sizes)


def _flag(raw: object) -> bool:
    """`codec_chunk_adaptive` as vllm-omni 0.30 reads it: `bool(value)`, so that any non-empty string is yes. A string
    that says no to a person ("false", "0", "no", "off") would switch adaptive windows on in vllm-omni while the
    profile says off: refused, so that the service never serves a schedule other than the one it reads."""
    if isinstance(raw, str) and raw.strip().lower() in {"false", "0", "no", "off"}:
        raise ValueError(
            f"the deploy profile's connector setting codec_chunk_adaptive is the string {raw!r}, which vllm-omni "
            "reads as on (any non-empty string is true to it): write true or false without quotes"
        )
    return bool(raw)
