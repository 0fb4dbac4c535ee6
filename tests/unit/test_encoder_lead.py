"""What a decoder plays before the audio of each format (`Format.lead_samples`), measured on the real encoders and
decoders (FFmpeg through PyAV): a tone burst encoded, the file decoded as a player would, and the burst found in it.
Word timestamps are shifted by it, so that captions keep time with what a player plays."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from app.audio.encoders import create_encoder
from app.audio.formats import FORMATS, lead_samples


def decoded(data: bytes, container: str) -> np.ndarray:
    """The file's audio as FFmpeg decodes it for a player (its container's trimming applied), float mono."""
    with av.open(io.BytesIO(data), format=container) as source:
        pieces = [frame.to_ndarray().reshape(-1) for frame in source.decode(audio=0)]
    return np.concatenate(pieces).astype(np.float32)


def burst(rate: int) -> tuple[np.ndarray, int]:
    """Half a second of silence, a 30-ms tone burst, half a second of silence; and where the burst starts."""
    at = rate // 2
    t = np.arange(int(0.03 * rate)) / rate
    tone = 0.5 * np.sin(2 * np.pi * 440 * t) * np.hanning(len(t))
    signal = np.zeros(rate + len(t), np.float32)
    signal[at : at + len(t)] = tone
    return signal, at


@pytest.mark.parametrize("rate", [8_000, 24_000, 48_000])
@pytest.mark.parametrize("whole_file", [False, True], ids=["stream", "whole-file"])
@pytest.mark.parametrize("name", [name for name, fmt in FORMATS.items() if fmt.ffmpeg])
def test_the_lead_a_decoder_plays_before_the_audio_is_the_tables(name: str, whole_file: bool, rate: int) -> None:
    fmt = FORMATS[name]
    if fmt.sample_rates is not None and rate not in fmt.sample_rates:
        pytest.skip(f"{name} carries no {rate} Hz")
    signal, at = burst(rate)
    encoder = create_encoder(name, rate, whole_file)
    data = encoder.encode(signal) + encoder.finish()
    played = decoded(data, fmt.container or "")
    # where the burst is in what was played: the lag of the best match (a lossy codec smears its edges, not its place)
    window = len(signal)
    scores = np.correlate(played[: window + 4 * rate // 10], signal, mode="valid")
    lag = int(np.argmax(scores))
    tolerance = max(2, rate // 4000)  # a quarter of a millisecond
    assert abs(lag - lead_samples(name, whole_file)) <= tolerance, (name, whole_file, rate, lag, at)
