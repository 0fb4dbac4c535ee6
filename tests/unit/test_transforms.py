"""StreamResampler, time_stretch, and the embedded engine's pure helpers model_speed_for and chunk_phonemes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.audio.transforms import StreamResampler, StreamTimeStretch, time_stretch
from app.engines.embedded.engine import FAST_MODEL_SPEED, FAST_SPEED, MAX_PHONEMES, chunk_phonemes, model_speed_for


def sine(n: int, rate: int, freq: float, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * freq * np.arange(n) / rate)).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum)) * rate / len(samples)


def resample_in_chunks(samples: np.ndarray, source: int, target: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = random.Random(seed)
    resampler = StreamResampler(source, target)
    out: list[np.ndarray] = []
    i = 0
    while i < len(samples):
        n = rng.choice([1, 7, 160, 480, 1000, 2400, 4800, rng.randint(1, 6000)])
        out.append(resampler.process(samples[i : i + n]))
        i += n
    return out, resampler.flush()


# -- StreamResampler -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), [(24_000, 16_000), (24_000, 44_100), (24_000, 48_000), (24_000, 8000)])
@pytest.mark.parametrize("seed", [0, 1])
def test_resampler_chunk_by_chunk_gives_the_expected_length(source: int, target: int, seed: int) -> None:
    n = 2 * source + 123
    parts, tail = resample_in_chunks(sine(n, source, 440), source, target, seed)
    total = sum(len(p) for p in parts) + len(tail)
    assert abs(total - n * target / source) <= 3
    assert all(p.dtype == np.float32 and p.ndim == 1 for p in [*parts, tail])


@pytest.mark.parametrize("target", [16_000, 44_100, 8000])
def test_resampler_output_is_seamless_and_in_phase(target: int) -> None:
    """Chunked output equals one-shot output, and both are the same sine sampled at the new rate (no delay)."""
    source = 24_000
    x = sine(2 * source, source, 440)
    parts, tail = resample_in_chunks(x, source, target, seed=3)
    chunked = np.concatenate([*parts, tail])
    whole = StreamResampler(source, target)
    one_shot = np.concatenate([whole.process(x), whole.flush()])
    assert len(chunked) == len(one_shot)
    np.testing.assert_allclose(chunked, one_shot, atol=1e-5)
    ideal = sine(len(chunked), target, 440)
    edge = target // 100  # the filter's own start and end transients
    assert np.max(np.abs(chunked[edge:-edge] - ideal[edge:-edge])) < 1e-3
    assert dominant_frequency(chunked, target) == pytest.approx(440, abs=2)


def test_resampler_passthrough_at_equal_rates() -> None:
    resampler = StreamResampler(24_000, 24_000)
    x = sine(4800, 24_000, 440)
    parts = [resampler.process(x[:1000]), resampler.process(x[1000:1001]), resampler.process(x[1001:])]
    assert [len(p) for p in parts] == [1000, 1, 3799]
    np.testing.assert_array_equal(np.concatenate(parts), x)
    assert len(resampler.flush()) == 0


def test_resampler_converts_dtype_and_ignores_empty_chunks() -> None:
    passthrough = StreamResampler(16_000, 16_000).process(np.array([0.25, -0.5], dtype=np.float64))
    assert passthrough.dtype == np.float32
    np.testing.assert_array_equal(passthrough, np.array([0.25, -0.5], dtype=np.float32))
    resampler = StreamResampler(24_000, 16_000)
    assert len(resampler.process(np.zeros(0, dtype=np.float32))) == 0
    out = resampler.process(sine(2400, 24_000, 440))
    assert len(out) + len(resampler.flush()) == 1600


# -- time_stretch --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tempo", [0.5, 0.8, 1.3, 2.0, 3.2])
def test_time_stretch_changes_length_and_keeps_pitch(tempo: float) -> None:
    rate = 24_000
    x = sine(rate, rate, 300)
    y = time_stretch(x, rate, tempo)
    assert y.dtype == np.float32
    # atempo works in ~40 ms overlapping windows, so the length is off by up to ~25 ms (not proportional to length).
    assert abs(len(y) - len(x) / tempo) <= 0.025 * rate
    assert dominant_frequency(y, rate) == pytest.approx(300, abs=3)  # a resampler would have moved it to 300*tempo
    middle = y[len(y) // 4 : 3 * len(y) // 4]
    assert float(np.sqrt(np.mean(middle**2))) == pytest.approx(0.5 / np.sqrt(2), rel=0.1)


def test_time_stretch_half_and_double() -> None:
    x = sine(48_000, 24_000, 300)
    slow, fast = time_stretch(x, 24_000, 0.5), time_stretch(x, 24_000, 2.0)
    assert len(slow) / len(x) == pytest.approx(2.0, rel=0.03)
    assert len(fast) / len(x) == pytest.approx(0.5, rel=0.03)


def test_time_stretch_identity_and_empty() -> None:
    x = sine(1000, 24_000, 300)
    np.testing.assert_array_equal(time_stretch(x, 24_000, 1.0), x)
    assert len(time_stretch(np.zeros(0, dtype=np.float32), 24_000, 2.0)) == 0


# -- model_speed_for ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speed", "model_speed"), [(0.25, 1.0), (0.75, 1.0), (1.0, 1.0), (2.0, 1.0), (2.01, 1.25), (4.0, 1.25)]
)
def test_hibari_is_asked_for_its_own_speed_only_above_twice(speed: float, model_speed: float) -> None:
    """Up to FAST_SPEED atempo sets the whole speed (exact: hibari rounds its sounds to whole frames); above it hibari
    speaks at FAST_MODEL_SPEED first, for intelligibility, and atempo makes up the rest from what it made."""
    assert (FAST_SPEED, FAST_MODEL_SPEED) == (2.0, 1.25)
    assert model_speed_for(speed) == model_speed


def test_the_tempo_left_to_atempo_stays_within_what_time_stretch_takes() -> None:
    """atempo's share is the speed over what hibari made of its own: at most the speed over 1.0 (hibari made nothing
    faster), at least the speed over FAST_MODEL_SPEED (it made all of it)."""
    for i in range(0, 376):
        speed = 0.25 + i / 100  # every API speed from 0.25 to 4.0
        model_speed = model_speed_for(speed)
        assert 0.25 <= speed / model_speed and speed <= 100  # time_stretch's range (FFmpeg's atempo, chained)


# -- chunk_phonemes ------------------------------------------------------------------------------------------------


def test_short_phonemes_are_one_piece() -> None:
    assert chunk_phonemes("həlˈoʊ wˈɜːld", 400) == ["həlˈoʊ wˈɜːld"]
    assert chunk_phonemes("x" * MAX_PHONEMES) == ["x" * MAX_PHONEMES]


def test_chunk_phonemes_prefers_clause_boundaries() -> None:
    clause = "ðə kwˈɪk bɹˈaʊn fˈɑːks"  # 22 characters
    text = ", ".join([clause] * 6)
    pieces = chunk_phonemes(text, 50)
    assert all(len(p) <= 50 for p in pieces)
    assert all(p.endswith(",") for p in pieces[:-1])
    assert " ".join(pieces) == text


def test_chunk_phonemes_hard_cuts_a_giant_word_without_losing_it() -> None:
    giant = "ə" * 1000
    pieces = chunk_phonemes(f"ab {giant} cd", 400)
    assert all(len(p) <= 400 for p in pieces)
    assert "".join(pieces).replace(" ", "") == f"ab{giant}cd"


_PHONEME_ALPHABET = "abdefhijklmnoprstuvwzæðŋɑɔəɛɪʊʃʒθˈˌː"


@pytest.mark.parametrize("seed", range(5))
def test_chunk_phonemes_invariants(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        limit = rng.choice([10, 40, 100, 400, rng.randint(5, 500)])
        words = []
        for _ in range(rng.randint(1, 150)):
            word = "".join(rng.choice(_PHONEME_ALPHABET) for _ in range(rng.choice([1, 3, 6, 12, rng.randint(1, 80)])))
            word += rng.choice(["", "", "", ",", ";", ":", "—", "."])
            words.append(word)
        text = " ".join(words)
        pieces = chunk_phonemes(text, limit)
        assert all(0 < len(p) <= limit for p in pieces), (limit, pieces)
        # Only the joining spaces are lost: nothing else dropped, duplicated or reordered.
        assert "".join(pieces).replace(" ", "") == text.replace(" ", "")
        if all(len(w) <= limit for w in words):  # no hard cut needed: pieces are whole words
            assert " ".join(pieces).split(" ") == words


@pytest.mark.parametrize("tempo", [0.3, 0.5, 2.0])
def test_a_streamed_stretch_gives_each_chunk_back_at_once_not_with_the_next(tempo: float) -> None:
    """A filter graph holds a pushed frame until the next: pushed whole, every window of a stream came back one window
    late, the first as nothing at all. Each chunk's audio is back by the end of its own push, but for one 20 ms slice
    and the filter's window."""
    rate = 24_000
    signal = (0.3 * np.sin(2 * np.pi * 200 * np.arange(rate * 4) / rate)).astype(np.float32)
    stretch = StreamTimeStretch(rate, tempo)
    position, given = 0, 0.0
    for frames in (1, 2, 4, 8, 8, 8):
        chunk = signal[position : position + frames * 1920]
        position += len(chunk)
        given += len(stretch.process(chunk))
        expected = position / tempo
        assert expected - given <= 0.06 * rate / tempo, (frames, expected, given)  # 60 ms of input at most behind
    assert given + len(stretch.flush()) == pytest.approx(position / tempo, rel=0.01)
