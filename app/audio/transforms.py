"""Sample-level transforms through FFmpeg (PyAV): streaming resampling and pitch-preserving time-stretching."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np


def _frame(samples: np.ndarray, sample_rate: int, pts: int | None = None) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(samples, dtype=np.float32)[None, :], format="flt", layout="mono"
    )
    frame.sample_rate = sample_rate
    if pts is not None:
        frame.pts = pts
        frame.time_base = Fraction(1, sample_rate)
    return frame


def _samples(frames: list[av.AudioFrame]) -> np.ndarray:
    if not frames:
        return np.zeros(0, np.float32)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32, copy=False)


class StreamResampler:
    """Resamples a stream chunk by chunk. The filter state carries across chunks, so joins stay seamless; `flush`
    returns the tail the filter still holds."""

    def __init__(self, source_rate: int, target_rate: int) -> None:
        self.source_rate = source_rate
        self.target_rate = target_rate
        self._resampler = (
            av.AudioResampler(format="flt", layout="mono", rate=target_rate) if source_rate != target_rate else None
        )
        self._pts = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        if self._resampler is None or len(samples) == 0:
            return np.asarray(samples, dtype=np.float32)
        frame = _frame(samples, self.source_rate, self._pts)
        self._pts += len(samples)
        return _samples(self._resampler.resample(frame))

    def flush(self) -> np.ndarray:
        if self._resampler is None:
            return np.zeros(0, np.float32)
        return _samples(self._resampler.resample(None))


class StreamTimeStretch:
    """Plays a stream `tempo` times faster without changing its pitch, chunk by chunk (FFmpeg's atempo, WSOLA): one
    filter carries across chunks, so joins stay seamless; `flush` returns what it still holds. tempo in [0.25, 100]:
    below atempo's 0.5, two filters halve it in turn.

    A filter graph gives back a pushed frame's audio only once the next frame arrives: a chunk pushed whole would come
    out with the next chunk, a whole window late. Each chunk is pushed in slices of 20 ms instead, so what a chunk
    returns lags its input by one slice and the filter's own window (tens of milliseconds), not by a chunk."""

    SLICE_S = 0.02

    def __init__(self, sample_rate: int, tempo: float) -> None:
        self.sample_rate = sample_rate
        self.tempo = tempo
        self._slice = max(1, int(sample_rate * self.SLICE_S))
        self._pts = 0
        self._graph: av.filter.Graph | None = None
        if tempo == 1.0:
            return
        graph = av.filter.Graph()
        source = graph.add_abuffer(
            format="flt", sample_rate=sample_rate, layout="mono", time_base=Fraction(1, sample_rate)
        )
        stages = [tempo] if tempo >= 0.5 else [0.5, tempo / 0.5]
        previous = source
        for stage in stages:
            atempo = graph.add("atempo", f"{stage:.6f}")
            previous.link_to(atempo)
            previous = atempo
        sink = graph.add("abuffersink")
        previous.link_to(sink)
        graph.configure()
        self._graph = graph

    def _pull(self) -> np.ndarray:
        assert self._graph is not None
        frames: list[av.AudioFrame] = []
        while True:
            try:
                frames.append(self._graph.pull())
            except (av.BlockingIOError, av.EOFError):
                return _samples(frames)

    def process(self, samples: np.ndarray) -> np.ndarray:
        if self._graph is None or len(samples) == 0:
            return np.asarray(samples, dtype=np.float32)
        out: list[np.ndarray] = []
        for start in range(0, len(samples), self._slice):
            piece = samples[start : start + self._slice]
            self._graph.push(_frame(piece, self.sample_rate, self._pts))
            self._pts += len(piece)
            out.append(self._pull())
        return np.concatenate(out)

    def flush(self) -> np.ndarray:
        if self._graph is None:
            return np.zeros(0, np.float32)
        self._graph.push(None)
        tail = self._pull()
        self._graph = None
        return tail


def time_stretch(samples: np.ndarray, sample_rate: int, tempo: float) -> np.ndarray:
    """Play `samples` `tempo` times faster without changing pitch (FFmpeg's atempo, WSOLA). tempo in [0.25, 100]."""
    if tempo == 1.0 or len(samples) == 0:
        return np.asarray(samples, dtype=np.float32)
    stretch = StreamTimeStretch(sample_rate, tempo)
    return np.concatenate([stretch.process(samples), stretch.flush()])


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """A whole clip at another rate (the streaming resampler, flushed)."""
    resampler = StreamResampler(source_rate, target_rate)
    return np.concatenate([resampler.process(samples), resampler.flush()])
