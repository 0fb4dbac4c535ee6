"""The forced aligner (Whisper tiny.en) on real speech: hibari's sentences, whose words hibari times itself from its
phoneme durations, an independent ground truth. The aligner must find the same words at the same times."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import statistics
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from app.audio.alignment import WhisperAligner
from app.engine_protocol import AudioChunk, EngineCapabilities, SynthesisJob
from app.engines.aligned import ForcedAlignedEngine
from app.engines.embedded.engine import SAMPLE_RATE, EmbeddedEngine
from app.settings import Settings
from app.speech.sentences import SentencePipeline
from app.text.words import WordTiming

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "On Monday, Dr. Smith paid $9.99 for 3 books at 7:30 pm.",
    "Please turn left at the next corner.",
    "In 2024, the U.S. team scored 42 points; e.g. a record!",
    "The train to the airport leaves every fifteen minutes from the second platform, so there is no need to hurry.",
    '"Really?" she asked, and everyone laughed.',
    "Our support line is open from nine in the morning until eight in the evening, every day of the week.",
]


@dataclasses.dataclass
class Spoken:
    text: str
    samples: np.ndarray
    words: tuple[WordTiming, ...]  # hibari's own timings


class UntimedHibari(EmbeddedEngine):
    """hibari as an engine without an alignment of its own would be: the forced aligner has to time its words."""

    def capabilities(self) -> EngineCapabilities:
        return dataclasses.replace(super().capabilities(), word_timestamps=False)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def aligner(runner: asyncio.Runner) -> Iterator[WhisperAligner]:
    aligner = WhisperAligner()
    runner.run(aligner.start())
    yield aligner
    runner.run(aligner.close())


@pytest.fixture(scope="module")
def hibari(runner: asyncio.Runner) -> Iterator[UntimedHibari]:
    engine = UntimedHibari(Settings(embedded_workers=1).embedded)
    runner.run(engine.start())
    yield engine
    runner.run(engine.close())


@pytest.fixture(scope="module")
def spoken(runner: asyncio.Runner, hibari: UntimedHibari) -> list[Spoken]:
    async def speak(index: int, text: str) -> Spoken:
        job = SynthesisJob(request_id=f"s{index}", text=text, voice="heart", seed=7, word_timestamps=True)
        chunks = [chunk async for chunk in hibari.synthesize(job)]
        return Spoken(text, np.concatenate([c.samples for c in chunks]), chunks[-1].words)

    return [runner.run(speak(index, text)) for index, text in enumerate(SENTENCES)]


def start_differences(ours: list[WordTiming], truth: list[WordTiming] | tuple[WordTiming, ...]) -> list[float]:
    assert [w.word for w in ours] == [w.word for w in truth]  # every written word, as written, in order
    return [abs(a.start_s - b.start_s) for a, b in zip(ours, truth, strict=True)]


def check_timeline(words: list[WordTiming], duration_s: float) -> None:
    assert all(0.0 <= w.start_s <= w.end_s <= duration_s + 1e-6 for w in words), words
    assert all(a.start_s <= b.start_s and a.end_s <= b.start_s + 1e-6 for a, b in itertools.pairwise(words)), words


def test_sentences_are_timed_as_hibari_times_them(
    runner: asyncio.Runner, aligner: WhisperAligner, spoken: list[Spoken]
) -> None:
    differences: list[float] = []
    for sentence in spoken:
        words = runner.run(aligner.align(sentence.samples, SAMPLE_RATE, sentence.text))
        check_timeline(words, len(sentence.samples) / SAMPLE_RATE)
        differences += start_differences(words, sentence.words)
    assert "$9.99" in [w.word for s in spoken for w in s.words]  # one written word, spoken as five
    median = statistics.median(differences)
    print(f"\nforced alignment vs hibari: {len(differences)} words, median |start difference| {median * 1000:.0f} ms")
    assert median < 0.1
    assert np.percentile(differences, 90) < 0.25


def test_audio_longer_than_whispers_window_is_aligned_window_by_window(
    runner: asyncio.Runner, aligner: WhisperAligner, spoken: list[Spoken]
) -> None:
    pause = np.zeros(int(0.4 * SAMPLE_RATE), np.float32)
    parts: list[np.ndarray] = []
    truth: list[WordTiming] = []
    at = 0
    for sentence in spoken * 2:  # about a minute of speech: three windows
        truth += [word.shifted(at / SAMPLE_RATE) for word in sentence.words]
        parts += [sentence.samples, pause]
        at += len(sentence.samples) + len(pause)
    audio = np.concatenate(parts)
    assert len(audio) / SAMPLE_RATE > 60
    words = runner.run(aligner.align(audio, SAMPLE_RATE, " ".join(s.text for s in spoken * 2)))
    check_timeline(words, len(audio) / SAMPLE_RATE)
    differences = start_differences(words, truth)
    median = statistics.median(differences)
    print(f"\n{len(audio) / SAMPLE_RATE:.0f} s in windows: median |start difference| {median * 1000:.0f} ms")
    assert median < 0.1
    assert max(differences) < 0.6  # no window lost its place


def test_through_the_sentence_pipeline_the_aligned_words_match_hibaris(
    runner: asyncio.Runner, aligner: WhisperAligner, hibari: UntimedHibari
) -> None:
    """The same utterance (same seed: the same audio), timed by hibari and by the aligner behind the sentence
    pipeline, which trims the silence between sentences: the words land on the same points of the audio sent."""
    text = " ".join(SENTENCES[:3])

    async def utterance(engine: object) -> tuple[np.ndarray, list[WordTiming]]:
        pipeline = SentencePipeline(engine, max_chars=250)  # type: ignore[arg-type]
        job = SynthesisJob(request_id="u", text=text, voice="heart", seed=11, word_timestamps=True)
        parts: list[np.ndarray] = []
        words: list[WordTiming] = []
        stream: AsyncIterator[AudioChunk] = pipeline.synthesize(job)
        async for chunk in stream:
            at = sum(len(p) for p in parts) / SAMPLE_RATE
            words += [word.shifted(at) for word in chunk.words]
            parts.append(chunk.samples)
        return np.concatenate(parts), words

    audio, aligned = runner.run(utterance(ForcedAlignedEngine(hibari, aligner)))
    same_audio, truth = runner.run(utterance(hibari))  # the engine itself still times its words when asked
    assert np.array_equal(audio, same_audio)
    check_timeline(aligned, len(audio) / SAMPLE_RATE)
    median = statistics.median(start_differences(aligned, truth))
    print(f"\nthrough the sentence pipeline: median |start difference| {median * 1000:.0f} ms")
    assert median < 0.1


def test_concurrent_alignments_share_the_model_and_agree_with_one_at_a_time(
    runner: asyncio.Runner, aligner: WhisperAligner, spoken: list[Spoken]
) -> None:
    alone = [runner.run(aligner.align(s.samples, SAMPLE_RATE, s.text)) for s in spoken]

    async def together() -> list[list[WordTiming]]:
        return await asyncio.gather(*(aligner.align(s.samples, SAMPLE_RATE, s.text) for s in spoken * 2))

    assert runner.run(together()) == alone * 2
