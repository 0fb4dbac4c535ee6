"""Judging word timestamps: their shape (in order, within the audio, reaching its end) and how far each word's start
lies from the start Whisper tiny.en hears for it."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping, Sequence

from loadtest.audio import DecodedAudio, normalise, to_16k, whisper

Word = Mapping[str, object]  # {"word", "start_ms", "end_ms"}, timed from the start of `audio`


def spans(words: Sequence[Word]) -> list[tuple[str, int, int]]:
    return [(str(w["word"]), int(w["start_ms"]), int(w["end_ms"])) for w in words]  # type: ignore[call-overload]


def assert_words_cover(words: Sequence[Word], audio: DecodedAudio) -> None:
    """In order, never overlapping, inside the audio, and the last word reaching its end."""
    timed = spans(words)
    assert all(start <= end for _, start, end in timed), timed
    overlaps = [(a, b) for a, b in itertools.pairwise(timed) if a[2] > b[1]]  # also: in order
    assert not overlaps, overlaps
    duration_ms = audio.duration_s * 1000
    assert timed[-1][2] <= duration_ms + 1, (timed[-1], duration_ms)  # rounded to the millisecond
    assert timed[-1][2] > duration_ms - 800, (timed[-1], duration_ms)  # the words reach the end of the audio


def start_errors_ms(words: Sequence[Word], audio: DecodedAudio) -> list[float]:
    """For every word that Whisper hears as written, how far apart the two start times are (ms)."""
    segments, _ = whisper().transcribe(to_16k(audio), language="en", beam_size=1, word_timestamps=True)
    heard = [(normalise(w.word), w.start * 1000) for s in segments for w in s.words if normalise(w.word)]
    ours = [(normalise(word), float(start)) for word, start, _ in spans(words)]
    matcher = difflib.SequenceMatcher(a=[k for k, _ in ours], b=[k for k, _ in heard], autojunk=False)
    return [abs(ours[i + k][1] - heard[j + k][1]) for i, j, n in matcher.get_matching_blocks() for k in range(n)]
