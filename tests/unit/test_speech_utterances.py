"""Text that streams in, spoken as it is made (`app.speech.utterances`), with no transport: the text cut into sentences
as their end becomes certain, their synthesis scheduled with one sentence of look-ahead, what the client is told (a
recording sink) and each utterance's accounting (its log line, its metrics), over a stand-in engine whose every job
is a short tone."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from app import metrics
from app.admission import AdmissionGate
from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    EngineError,
    EngineHealth,
    SynthesisJob,
    TaskType,
    UnsupportedParameter,
    VoiceInfo,
)
from app.lifecycle import SESSION_GRACE_S, Lifecycle
from app.settings import Settings
from app.speech.errors import Failed, Refused, ShuttingDown, SpeechError
from app.speech.options import SpeechOptions
from app.speech.run import SpeechService
from app.speech.utterances import Sentence, StreamedSpeech, UtteranceEnd
from app.text.words import WordTiming
from app.voice_store import VoiceStore
from app.voices import VoiceCatalog
from tests.support.waiting import until

RATE = 24_000
SENTENCE_IDLE_S = 0.5
IDLE_TIMEOUT_S = 30.0


class ToneEngine:
    """Every job is 0.1 s of tone in two chunks; a text with FAIL in it fails before its first audio, one with
    REFUSED is refused then (as a field the engine cannot honour), one with BREAK fails after it, one with LATE takes
    a minute over its first chunk and one with SLOW over its second. `steps` lists the jobs' texts as their synthesis
    began (+) and ended (-)."""

    name = "tone"
    model_id = "tone-1"

    def __init__(self) -> None:
        self.steps: list[str] = []

    async def start(self) -> None:
        return None

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        self.steps.append(f"+{job.text}")
        await asyncio.sleep(0.01)
        if "LATE" in job.text:
            await asyncio.sleep(60)
        if "FAIL" in job.text:
            raise EngineError("the tone generator broke")
        if "REFUSED" in job.text:
            raise UnsupportedParameter("input", "The tone generator cannot read that.")
        for _ in range(2):
            yield AudioChunk(np.full(RATE // 20, 0.3, np.float32), RATE)
            await asyncio.sleep(0.005)
            if "BREAK" in job.text:
                raise RuntimeError("the tone generator broke mid-sentence")
            if "SLOW" in job.text:
                await asyncio.sleep(60)
        self.steps.append(f"-{job.text}")

    async def abort(self, request_id: str) -> None:
        return None

    def voices(self) -> list[VoiceInfo]:
        return [VoiceInfo("heart", "Heart", ("English",))]

    def languages(self) -> list[str]:
        return ["English"]

    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(
            task_types=frozenset({TaskType.CUSTOM_VOICE}),
            voice_cloning=False,
            instructions=False,
            languages=("English",),
            max_input_chars=4096,
            seed=False,
            max_new_tokens=False,
            sample_rate=RATE,
        )

    def health(self) -> EngineHealth:
        return EngineHealth(ready=True)

    async def close(self) -> None:
        return None


class RecordingSink:
    """What a transport would tell its client, as tuples in order; `hold` (when given) keeps each piece of audio
    waiting until it is set, as a client that reads slowly would."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.hold: asyncio.Event | None = None
        self.done = asyncio.Event()

    def error_code(self, error: SpeechError) -> str:
        return type(error).__name__

    async def sentence_started(self, sentence: Sentence) -> None:
        self.events.append(("started", sentence.utterance, sentence.index, sentence.text))

    async def audio(self, sentence: Sentence, data: bytes, start_s: float, end_s: float) -> None:
        if self.hold is not None:
            await self.hold.wait()
        self.events.append(("audio", sentence.index, len(data), round(start_s, 3), round(end_s, 3)))

    async def sentence_spoken(
        self, sentence: Sentence, words: list[WordTiming], duration_s: float, offset_s: float
    ) -> None:
        self.events.append(("spoken", sentence.index, round(duration_s, 3), round(offset_s, 3)))

    async def sentence_ended(self, sentence: Sentence, audio_bytes: int, error: bool) -> None:
        self.events.append(("ended", sentence.index, audio_bytes, error))

    async def error(self, error: SpeechError) -> None:
        self.events.append(("error", type(error).__name__))

    async def utterance_done(self, utterance: int, sentences: int, words: list[WordTiming]) -> None:
        self.events.append(("utterance_done", utterance, sentences, *([[w.as_dict() for w in words]] if words else [])))
        self.done.set()

    def kinds(self) -> list[str]:
        return [event[0] for event in self.events]


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(engine: ToneEngine, tmp_path: Path) -> Iterator[SpeechService]:
    settings = Settings(ws_sentence_idle_s=SENTENCE_IDLE_S, ws_idle_timeout_s=IDLE_TIMEOUT_S, sentence_max_chars=200)
    gate = AdmissionGate(2, 4, 5.0)
    catalog = VoiceCatalog(tuple(engine.voices()), {})
    yield SpeechService(engine, settings, catalog, VoiceStore(tmp_path), gate, Lifecycle(5.0, gate))  # type: ignore[arg-type]


async def configured(
    service: SpeechService,
    granularity: Any = "sentence",
    cut_off: Callable[[], str | None] | None = None,
    **options: Any,
) -> StreamedSpeech:
    speech = StreamedSpeech(service, "req-1", cut_off) if cut_off else StreamedSpeech(service, "req-1")
    await speech.configure(SpeechOptions(voice="heart", response_format="pcm", **options), granularity)
    return speech


def queued(speech: StreamedSpeech) -> list[str | int]:
    """The sentences queued so far (their texts), and an utterance's end as its sentence count."""
    items: list[Sentence | UtteranceEnd] = []
    while not speech.queue.empty():
        items.append(speech.queue.get_nowait())
    return [item.text if isinstance(item, Sentence) else item.sentences for item in items]


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def utterances(outcome: str) -> float:
    """How many WebSocket utterances ended so, as `speech_ws_utterances_total` counts them."""
    return sample("speech_ws_utterances_total", {"outcome": outcome})


async def test_words_with_nothing_to_say_that_end_an_utterance_go_with_its_last_sentence(
    service: SpeechService,
) -> None:
    """ "😊" after the last sentence was cut (its next word began) has no sentence of its own to go with: it is timed
    at the end of the last one (`Sentence.trailing`); punctuation alone is no word."""
    speech = await configured(service)
    speech.text("Have a great day! ")
    speech.text("😊 ...")
    last = speech.last_sentence
    assert last is not None and last.text == "Have a great day!"
    speech.done()
    assert queued(speech) == ["Have a great day!", 1] and last.trailing == ["😊"]


async def test_a_markdown_rule_that_ends_an_utterance_is_no_trailing_word(service: SpeechService) -> None:
    """ "***" after the last sentence is punctuation, as it is where a request ends with it: no word to time (it was
    timed as one, over the WebSocket only)."""
    speech = await configured(service)
    speech.text("Have a great day! ")
    speech.text("***")
    last = speech.last_sentence
    speech.done()
    assert queued(speech) == ["Have a great day!", 1] and last is not None and last.trailing == []


async def test_sentences_are_queued_as_their_end_becomes_certain(service: SpeechService) -> None:
    speech = await configured(service)
    speech.text("Hello there. How are")
    assert queued(speech) == ["Hello there."]
    assert speech.mid_utterance and not speech.idle
    speech.text(" you? Fine")
    assert queued(speech) == ["How are you?"]
    speech.done()  # the rest is spoken, then the utterance ends with its sentence count
    assert queued(speech) == ["Fine", 3]
    assert not speech.mid_utterance and speech.open_utterances  # open until its end has been spoken
    speech.text("Next one.")
    speech.done()
    assert [s for s in queued(speech) if isinstance(s, str)] == ["Next one."]
    assert speech.utterance == 2 and speech.sentence_index == 0


async def test_a_sentence_of_a_letter_of_another_script_is_queued_alone_not_with_the_next(
    service: SpeechService,
) -> None:
    """ "ﷺ." (a letter no English voice reads) was taken for an initial ("J. Smith") and queued with the sentence after
    it, which its refusal then took with it: it is a sentence of its own, refused alone."""
    speech = await configured(service)
    for piece in ("Hello. ", "ﷺ. ", "World is here."):
        speech.text(piece)
    speech.done()
    assert queued(speech) == ["Hello.", "ﷺ.", "World is here.", 3]


async def test_a_sentence_of_a_phrase_in_one_character_is_queued_alone_before_a_number(
    service: SpeechService,
) -> None:
    """ "ﷺ." is one character written for a whole phrase: no initial even where a number follows ("5 apples"), which
    was queued with it and refused with it, never spoken."""
    speech = await configured(service)
    for piece in ("Hello. ", "ﷺ. ", "5 apples are here."):
        speech.text(piece)
    speech.done()
    assert queued(speech) == ["Hello.", "ﷺ.", "5 apples are here.", 3]


async def test_a_letter_of_another_script_before_a_number_is_queued_alone(service: SpeechService) -> None:
    """ "Ж." before "5 apples" was taken for an abbreviation ("c. 1900") and queued with the sentence after it, which
    its refusal took with it: "5 apples are here." was never spoken. It is a sentence of its own, refused alone."""
    speech = await configured(service)
    for piece in ("Hello. ", "Ж. ", "5 apples are here."):
        speech.text(piece)
    speech.done()
    assert queued(speech) == ["Hello.", "Ж.", "5 apples are here.", 3]


async def test_a_letter_of_another_script_before_a_last_number_is_queued_alone(service: SpeechService) -> None:
    """ "Ж." before "5." with no letter after it was still taken for an abbreviation ("c. 1900") and queued with "5.",
    which its refusal took with it; "Born c. 1900." is still one sentence."""
    speech = await configured(service)
    for piece in ("Hello. ", "Ж. ", "5. ", "Born ", "c. ", "1900."):
        speech.text(piece)
    speech.done()
    assert queued(speech) == ["Hello.", "Ж.", "5.", "Born c. 1900.", 4]


@pytest.mark.parametrize(
    ("granularity", "while_arriving", "at_done"),
    [
        ("clause", ["First part,", "second part."], ["Third", 3]),
        ("none", [], ["First part, second part. Third", 1]),  # vllm-omni's default: one request at input.done
    ],
)
async def test_split_granularity(
    service: SpeechService, granularity: str, while_arriving: list[str], at_done: list[str | int]
) -> None:
    speech = await configured(service, granularity)
    speech.text("First part, second part. Third")
    assert queued(speech) == while_arriving
    speech.done()
    assert queued(speech) == at_done


async def test_an_unsplit_utterance_takes_no_more_text_than_one_request_speaks(service: SpeechService) -> None:
    """`split_granularity: none` speaks the utterance as one text at input.done, which holds at most the engine's
    longest input: text past that is refused as it arrives (naming `text`), never buffered without end."""
    speech = await configured(service, "none")
    limit = service.engine.capabilities().max_input_chars
    speech.text("a" * (limit - 10))
    with pytest.raises(Refused) as refused:
        speech.text(" and eleven")
    assert refused.value.param == "text" and str(limit) in refused.value.message
    speech.text(" and ten.")  # what fits is still taken
    speech.done()
    assert queued(speech) == ["a" * (limit - 10) + " and ten.", 1]
    # split by sentence, the text waiting for a sentence end is bounded alike: a run with nowhere to cut it
    by_sentence = await configured(service)
    by_sentence.text("b" * (limit - 20))
    with pytest.raises(Refused, match="no sentence end or space"):
        by_sentence.text("b" * 30)
    by_sentence.text(". Then more.")  # an end arrives: what waited is queued, and no longer waits
    assert queued(by_sentence)[0] == "b" * (limit - 20) + "." and len(by_sentence.buffer) < 20


@pytest.mark.parametrize("granularity", ["sentence", "clause", "none"])
async def test_blanks_streamed_after_the_last_word_do_not_pile_up_in_the_text_that_waits(
    service: SpeechService, granularity: Any
) -> None:
    """The text waiting for its end is bounded (each message scans it again) by its words, not by the blanks after
    them: an LLM stuck writing spaces, or a client sending 128 KiB of them per message, grew it without end and made
    every message cost more (a second of the server's event loop each, at 40 MB). What waits keeps what the blanks
    say: that the last word ended, and where a line breaks."""
    speech = await configured(service, granularity)
    speech.text("Hello there")
    for blanks in (" ", "\t ", " " * 10_000) * 100:
        speech.text(blanks)
    assert len(speech.buffer) < 20
    speech.text("friend")  # a word of its own, not "therefriend"
    for blanks in ("  ", "\r\n", "\n", " " * 10_000):
        speech.text(blanks)
    assert len(speech.buffer) < 40
    speech.text("Bye.")
    speech.done()
    pieces = [piece for piece in queued(speech) if isinstance(piece, str)]
    assert " ".join(pieces).split() == ["Hello", "there", "friend", "Bye."]
    assert len(pieces) == (1 if granularity == "none" else 2)  # the line break still ends a sentence


class ShortInputToneEngine(ToneEngine):
    """The tone engine on a server whose SPEECH_MAX_INPUT_CHARS (100) is below SPEECH_SENTENCE_MAX_CHARS."""

    def capabilities(self) -> EngineCapabilities:
        return dataclasses.replace(super().capabilities(), max_input_chars=100)


def short_input_service(tmp_path: Path, sentence_max_chars: int) -> SpeechService:
    """A speech service on `ShortInputToneEngine`, its sentences cut at `sentence_max_chars`."""
    short = ShortInputToneEngine()
    settings = Settings(
        ws_sentence_idle_s=SENTENCE_IDLE_S, ws_idle_timeout_s=IDLE_TIMEOUT_S, sentence_max_chars=sentence_max_chars
    )
    gate = AdmissionGate(2, 4, 5.0)
    catalog = VoiceCatalog(tuple(short.voices()), {})
    return SpeechService(short, settings, catalog, VoiceStore(tmp_path), gate, Lifecycle(5.0, gate))  # type: ignore[arg-type]


@pytest.mark.parametrize("granularity", ["sentence", "clause"])
async def test_streamed_text_is_cut_into_pieces_no_longer_than_a_request_may_speak(
    tmp_path: Path, granularity: Any
) -> None:
    """Each piece is a request of its own, refused over the server's longest `input`: where that is shorter than
    SPEECH_SENTENCE_MAX_CHARS, a long sentence (or a run without one's end) is cut to it, never queued whole to be
    refused after its audio.start and lost."""
    service = short_input_service(tmp_path, 200)
    speech = await configured(service, granularity)
    long_sentence = (
        "This sentence has a great many words in it and goes on well past one hundred characters, as long ones do."
    )
    exactly_the_limit = (
        "A sentence of exactly one hundred characters waits with the spaces around it, and still fits in one."
    )
    text = f"Short one. {long_sentence} {exactly_the_limit} {'word ' * 50}"
    for start in range(0, len(text), 30):  # as an LLM writes it, in pieces
        speech.text(text[start : start + 30])
    speech.done()
    pieces = [piece for piece in queued(speech) if isinstance(piece, str)]
    assert all(len(piece) <= 100 for piece in pieces), [len(piece) for piece in pieces]
    assert " ".join(pieces).split() == text.split()  # nothing lost


# Aristophanes' dish, in Greek and in its Latin transliteration: one word, longer than a request may be below
LOPADO_GREEK = (
    "λοπαδοτεμαχοσελαχογαλεοκρανιολειψανοδριμυποτριμματοσιλφιοκαραβομελιτοκατακεχυμενοκιχλεπικοσσυφοφαττοπεριστερ"
    "αλεκτρυονοπτοκεφαλλιοκιγκλοπελειολαγῳοσιραιοβαφητραγανοπτερύγων"
)
LOPADO_LATIN = (
    "Lopadotemachoselachogaleokranioleipsanodrimhypotrimmatosilphiokarabomelitokatakechymenokichlepikossyphophatto"
    "peristeralektryonoptekephalliokigklopeleiolagoiosiraiobaphetraganopterygon"
)


@pytest.mark.parametrize(
    ("word", "too_long"),
    [
        pytest.param("Rindfleischetikettierungsueberwachungsaufgabenuebertragungsgesetz", LOPADO_LATIN, id="ascii"),
        pytest.param(
            "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft", LOPADO_GREEK, id="greek"
        ),
    ],
)
async def test_a_long_streamed_word_is_spoken_whole_or_refused_whatever_its_script(
    tmp_path: Path, word: str, too_long: str
) -> None:
    """A word longer than SPEECH_SENTENCE_MAX_CHARS waits for its end and is spoken whole; one longer than a request
    may be (SPEECH_MAX_INPUT_CHARS) is refused, naming `text`. A word with a letter outside ASCII (a German "ä", a
    Greek word) was spoken in pieces cut mid-word instead, never refused: an ASCII word of the same length was not."""
    service = short_input_service(tmp_path, 40)
    speech = await configured(service)
    assert 40 < len(word) <= 100 < len(too_long)
    text = f"Before it {word} after it. Then "
    for start in range(0, len(text), 7):  # as an LLM writes it, in pieces
        speech.text(text[start : start + 7])
    assert queued(speech) == ["Before it", word, "after it."]
    with pytest.raises(Refused, match="no sentence end or space") as refused:
        speech.text(too_long)
    assert refused.value.param == "text"
    speech.text("the end.")
    speech.done()
    assert queued(speech) == ["Then the end.", 4]


async def test_a_word_too_long_for_a_request_is_refused_with_the_message_that_ends_it(tmp_path: Path) -> None:
    """A word past the longest `input` whose end came in the same message (or completed one that waited) was queued as
    a sentence, to be refused only after its audio.start. The message is refused as it comes, naming `text`, the limit
    and the length, and not added, as the same word waiting for its end is; what waited before it is kept."""
    service = short_input_service(tmp_path, 40)
    speech = await configured(service)
    with pytest.raises(Refused) as refused:
        speech.text(f"Before it {LOPADO_LATIN} after it. ")
    assert (refused.value.param, refused.value.code) == ("text", "string_too_long")
    message = refused.value.message
    assert "at most 100 characters" in message and f"one of {len(LOPADO_LATIN)}," in message, message
    assert queued(speech) == [] and speech.buffer == ""
    speech.text(f"Before it {LOPADO_LATIN[:90]}")  # a word of 90 waits for its end
    with pytest.raises(Refused, match="never cut"):
        speech.text(f"{LOPADO_LATIN[90:]} after it.")
    speech.text(" after it.")
    speech.done()
    assert queued(speech) == ["Before it", LOPADO_LATIN[:90], "after it.", 3]


@pytest.mark.parametrize("end", [" ", "\n", " and more"])
async def test_a_word_too_long_ended_by_a_blank_is_refused_as_too_long_not_as_text_waiting(
    tmp_path: Path, end: str
) -> None:
    """A space ends a word as a sentence's end does: the word past the longest `input` is named (string_too_long),
    where a trailing blank got the refusal of text waiting with "no space to cut at" (invalid_value)."""
    speech = await configured(short_input_service(tmp_path, 40))
    with pytest.raises(Refused) as refused:
        speech.text(f"{LOPADO_LATIN}{end}")
    assert (refused.value.param, refused.value.code) == ("text", "string_too_long"), refused.value.message
    assert "never cut" in refused.value.message and speech.buffer == ""


async def test_a_zero_width_space_between_words_parts_them_as_a_space_does(tmp_path: Path) -> None:
    """A zero-width space marks a word break, and the voice is given a space there (`normalize_text`): two words
    joined by one are two words here too, each cut and bounded as a word. Taken as one word, they were refused as a
    word past the longest `input` (100 characters), though a request speaks the same text."""
    speech = await configured(short_input_service(tmp_path, 40))
    first, second = LOPADO_LATIN[:60], LOPADO_LATIN[60:120]
    speech.text(f"Before it {first}\u200b{second} after it. ")
    speech.done()
    assert queued(speech) == ["Before it", first, second, "after it.", 4]


async def test_a_long_run_of_a_script_written_without_spaces_is_streamed_in_pieces(tmp_path: Path) -> None:
    """Chinese has no space to wait for: streamed past the longest request, it is cut at the limit and spoken."""
    service = short_input_service(tmp_path, 40)
    speech = await configured(service)
    text = "中华人民共和国国家标准化管理委员会" * 10
    speech.text(text)
    speech.done()
    pieces = [piece for piece in queued(speech) if isinstance(piece, str)]
    assert "".join(pieces) == text and all(len(piece) <= 40 for piece in pieces)


async def test_two_sessions_under_one_request_id_are_tracked_apart(service: SpeechService) -> None:
    """Two WebSocket sessions may carry the same X-Request-Id: the end of one's utterance leaves the other's tracked,
    so that a drain still waits for it."""
    first, second = await configured(service), await configured(service)
    first.text("Hello.")
    second.text("Hello.")
    first.lifecycle.untrack(first.utterance_key(0))  # as the end of first's utterance 0 untracks it
    assert not service.lifecycle.idle


async def test_a_sentence_left_waiting_is_spoken_when_the_writer_pauses(service: SpeechService) -> None:
    speech = await configured(service)
    speech.text("Is that all?")  # its end is not certain yet: more text could follow
    assert queued(speech) == [] and 0 < speech.wait_s() <= SENTENCE_IDLE_S
    assert speech.look() is False and queued(speech) == []  # too early
    speech.buffered_at -= SENTENCE_IDLE_S  # the writer paused
    assert speech.wait_s() == 0 and speech.look() is False
    (sentence,) = [speech.queue.get_nowait()]
    assert isinstance(sentence, Sentence) and sentence.text == "Is that all?"
    assert sentence.arrived == speech.buffered_at  # its TTFA counts from the arrival of its text, not from the look


async def test_the_stream_is_idle_only_with_nothing_to_speak(service: SpeechService) -> None:
    speech = await configured(service)
    speech.text("no end in sight")
    speech.buffered_at -= SENTENCE_IDLE_S
    assert speech.look() is False and queued(speech) == []  # not even a sentence once the writer paused
    speech.quiet_since -= IDLE_TIMEOUT_S
    speech.unspoken = 1  # still speaking: silence from the client is expected
    assert speech.wait_s() == IDLE_TIMEOUT_S and speech.look() is False
    speech.unspoken = 0
    assert speech.wait_s() == 0
    assert speech.look() is False  # text left after a whole idle period is spoken as input.done would, never dropped
    assert queued(speech) == ["no end in sight", 1]
    speech.unspoken = 0  # (spoken: no speaker runs here)
    assert speech.look() is True  # nothing left: idle for too long


async def test_punctuation_left_after_a_whole_idle_period_is_idle(service: SpeechService) -> None:
    """Punctuation alone left waiting is no text to speak: the stream is idle (and closed), not given an utterance's
    end the client never asked for, then another whole idle period."""
    speech = await configured(service)
    speech.text("Hello there. ...")
    speech.buffered_at -= SENTENCE_IDLE_S
    assert speech.look() is False and queued(speech) == ["Hello there."]
    speech.unspoken = 0  # (spoken: no speaker runs here)
    speech.quiet_since -= IDLE_TIMEOUT_S
    assert speech.look() is True and queued(speech) == []


async def test_an_empty_text_message_opens_no_utterance_a_config_would_change(service: SpeechService) -> None:
    """LLM streams send empty deltas: a session.config after them is between utterances still, and a drain has
    nothing of the session's to wait for (it had waited its whole timeout, then told the client it was cut off)."""
    speech = await configured(service)
    speech.text("")
    speech.text("   ")
    assert not speech.mid_utterance
    assert speech.idle and service.lifecycle.idle
    speech.text("Hello")
    assert speech.mid_utterance


async def test_an_utterance_is_told_in_order_and_accounted_once(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    ttfa = {"response_format": "pcm", "stream": "websocket"}
    ttfa_before = sample("speech_ttfa_seconds_count", ttfa)
    uninterrupted_before = sample("speech_uninterrupted_seconds_count", ttfa)
    completed_before = sample("speech_ws_utterances_total", {"outcome": "completed"})
    sentences_before = sentences_counted()
    speaker = speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        speech.text("One sentence here. Another")
        speech.text(" one there.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.kinds() == [*["started", "audio", "audio", "spoken", "ended"] * 2, "utterance_done"]
    ends = [event for event in sink.events if event[0] == "ended"]
    assert all(not error and audio_bytes > 0 for _, _, audio_bytes, error in ends)
    spoken = [event for event in sink.events if event[0] == "spoken"]
    assert spoken[0][3] == 0.0 and spoken[1][3] == spoken[0][2]  # the second starts where the first ended
    assert sink.events[-1] == ("utterance_done", 0, 2)
    (line,) = [record for record in caplog.records if record.getMessage() == "speech utterance"]
    assert line.request_id == "req-1" and line.transport == "websocket" and line.utterance == 0  # type: ignore[attr-defined]
    assert line.chars == len("One sentence here. Another one there.") and line.sentences == 2  # type: ignore[attr-defined]
    assert line.audio_bytes == sum(end[2] for end in ends) and line.errors == []  # type: ignore[attr-defined]
    assert line.outcome == "completed" and line.ttfa_s is not None  # type: ignore[attr-defined]
    # one TTFA and one time to uninterrupted audio per utterance, not per sentence
    assert sample("speech_ttfa_seconds_count", ttfa) == ttfa_before + 1
    assert sample("speech_uninterrupted_seconds_count", ttfa) == uninterrupted_before + 1
    assert sample("speech_ws_utterances_total", {"outcome": "completed"}) == completed_before + 1
    # each sentence delivered whole: its E2E and RTF, and its audio (0.1 s of tone each), none aborted
    assert sentences_counted_since(sentences_before) == {"e2e": 2, "rtf": 2, "audio_s": 0.2}
    assert speech.idle and not speaker.done()
    await speech.close("stopped")


async def test_a_failed_sentence_is_told_and_the_utterance_goes_on(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    labels = {"response_format": "pcm", "stream": "websocket"}
    uninterrupted_before = sample("speech_uninterrupted_seconds_count", labels)
    counted_before = {outcome: utterances(outcome) for outcome in ("error", "refused", "completed")}
    speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        speech.text("This will FAIL now. This one works.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events[:3] == [("started", 0, 0, "This will FAIL now."), ("error", "Failed"), ("ended", 0, 0, True)]
    assert sink.kinds()[3:] == ["started", "audio", "audio", "spoken", "ended", "utterance_done"]
    (line,) = [record for record in caplog.records if record.getMessage() == "speech utterance"]
    assert line.errors == ["Failed"] and line.outcome == "error"  # type: ignore[attr-defined]
    # an utterance with an error is never observed as uninterrupted
    assert sample("speech_uninterrupted_seconds_count", labels) == uninterrupted_before
    # counted once, as the server's error: what the error alert counts beside the HTTP requests' 5xx
    assert {outcome: utterances(outcome) - before for outcome, before in counted_before.items()} == {
        "error": 1,
        "refused": 0,
        "completed": 0,
    }
    await speech.close("stopped")


async def test_an_utterance_whose_only_errors_are_the_requests_is_refused_not_the_servers_error(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    """A sentence refused for what the request asks (over HTTP a 4xx) is told, and the utterance goes on; it ends
    `refused`, which the error alert leaves out, as it leaves out 4xx answers."""
    speech = await configured(service)
    sink = RecordingSink()
    counted_before = {outcome: utterances(outcome) for outcome in ("error", "refused", "completed")}
    speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        speech.text("This is REFUSED here. This one works.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events[:2] == [("started", 0, 0, "This is REFUSED here."), ("error", "Refused")]
    assert sink.kinds()[-1] == "utterance_done" and "spoken" in sink.kinds()
    (line,) = [record for record in caplog.records if record.getMessage() == "speech utterance"]
    assert line.errors == ["Refused"] and line.outcome == "refused"  # type: ignore[attr-defined]
    assert {outcome: utterances(outcome) - before for outcome, before in counted_before.items()} == {
        "error": 0,
        "refused": 1,
        "completed": 0,
    }
    await speech.close("stopped")


def counted() -> dict[str, float]:
    return {outcome: utterances(outcome) for outcome in metrics.UTTERANCE_OUTCOMES}


def counted_since(before: dict[str, float]) -> dict[str, float]:
    """The utterances counted since `before`, by outcome (only those that moved)."""
    return {outcome: n - before[outcome] for outcome, n in counted().items() if n != before[outcome]}


async def test_a_server_error_counts_as_one_also_where_the_client_then_leaves(service: SpeechService) -> None:
    """Leaving after an `error` is what a client does: the failure is the server's all the same, counted once."""
    speech = await configured(service)
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    speech.text("This will FAIL now. And then")
    await until(lambda: ("error", "Failed") in sink.events)
    await speech.close("client_gone")
    await speech.close("client_gone")  # a second close counts nothing more
    assert counted_since(before) == {"error": 1}


async def test_an_utterance_that_nothing_failed_is_counted_as_its_stream_ended(service: SpeechService) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    speech.text("This is REFUSED here. And then")
    await until(lambda: ("error", "Refused") in sink.events)
    await speech.close("client_stalled")
    assert counted_since(before) == {"client_stalled": 1}


async def test_text_with_nothing_to_speak_is_refused_however_its_utterance_ends(service: SpeechService) -> None:
    """Emoji alone, ended by input.done or by a whole idle period: refused as a request of the same text is, told
    before the utterance's end (which has no sentence), and counted refused, never completed. An input.done with no
    text at all is not an utterance served: not counted."""
    speech = await configured(service)
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    speech.text("\U0001f600 \U0001f389 ")
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events == [("error", "Refused"), ("utterance_done", 0, 0)]
    sink.done.clear()
    speech.text("\U0001f600 ")  # then the writer goes quiet
    speech.buffered_at -= SENTENCE_IDLE_S
    assert speech.look() is False
    speech.quiet_since -= IDLE_TIMEOUT_S
    assert speech.look() is False  # ended as input.done would have
    await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events[2:] == [("error", "Refused"), ("utterance_done", 1, 0)]
    sink.done.clear()
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events[4:] == [("utterance_done", 2, 0)]
    sink.done.clear()
    speech.text("   ")  # blanks alone are no text either
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events[5:] == [("utterance_done", 3, 0)]
    assert counted_since(before) == {"refused": 2}
    await speech.close("stopped")


async def test_an_utterance_that_begins_as_ssml_is_refused_as_it_comes_and_none_of_it_is_spoken(
    service: SpeechService,
) -> None:
    """SSML's root first, even cut across two messages, is refused at the message that shows it, naming `text`, as a
    request of it is over HTTP: not a first sentence refused and the rest read out with its closing tag. The rest of
    that utterance is refused as it comes; nothing of it is spoken and it is counted refused. The next utterance is
    spoken, a tag inside it read as the text it is, also where a later sentence begins with it."""
    speech = await configured(service)
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    speech.text("  <spe")  # not SSML yet: a tag's start and nothing more
    with pytest.raises(Refused) as first:
        speech.text("ak>Hello there. How")
    assert first.value.param == "text" and "SSML" in str(first.value) and "plain text" in str(first.value)
    with pytest.raises(Refused) as later:
        speech.text(" are you?</speak>")
    assert later.value.param == "text" and "SSML" in str(later.value)
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.events == [("utterance_done", 0, 0)]
    sink.done.clear()
    speech.text("Hello. <speak> opens SSML, as a request of this text says too.")  # its second sentence is no SSML
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert [event for event in sink.events if event[0] in ("started", "error")] == [
        ("started", 1, 0, "Hello."),
        ("started", 1, 1, "<speak> opens SSML, as a request of this text says too."),
    ]
    assert counted_since(before) == {"refused": 1, "completed": 1}
    await speech.close("stopped")


async def test_one_sentence_at_most_is_synthesized_ahead_of_the_one_delivered(
    service: SpeechService, engine: ToneEngine
) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    sink.hold = asyncio.Event()  # the client is slow: the first sentence's delivery does not end
    speech.start(sink)
    speech.text("First one. Second one. Third one. Fourth")
    await until(lambda: "-Second one." in engine.steps)
    await asyncio.sleep(0.1)  # time enough for a third sentence to start, were it allowed to
    # the second sentence's synthesis started once the first one's had finished, while the first is still delivered;
    # the third waits for the first's delivery to end
    assert engine.steps == ["+First one.", "-First one.", "+Second one.", "-Second one."]
    sink.hold.set()
    speech.done()
    await asyncio.wait_for(sink.done.wait(), 5)
    assert [step for step in engine.steps if step[0] == "+"] == [
        "+First one.",
        "+Second one.",
        "+Third one.",
        "+Fourth",
    ]
    await speech.close("stopped")


async def test_a_drain_refuses_a_new_utterance_and_ends_the_stream_after_the_open_one(
    service: SpeechService,
) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    speaker = speech.start(sink)
    speech.text("Started before the drain.")
    service.lifecycle.draining = True
    speech.text(" More of the same utterance.")  # the open utterance is finished
    speech.done()
    await asyncio.wait_for(speaker, 5)  # its end ends the speaking: a drain may close the stream now
    assert sink.events[-1] == ("utterance_done", 0, 2) and speech.idle
    with pytest.raises(ShuttingDown):
        speech.text("A new utterance.")


async def test_a_session_may_begin_one_more_utterance_in_the_drains_first_moment(service: SpeechService) -> None:
    """Text its client sent before it heard of the drain (within SESSION_GRACE_S of its start) is spoken, and the
    drain waits for it; later text is refused."""
    speech = await configured(service)
    sink = RecordingSink()
    speaker = speech.start(sink)
    service.lifecycle.begin_drain()
    speech.text("Sent just before the drain reached this session.")
    speech.done()
    await asyncio.wait_for(speaker, 5)
    assert ("utterance_done", 0, 1) in sink.events
    await asyncio.sleep(SESSION_GRACE_S)
    with pytest.raises(ShuttingDown):
        speech.text("Too late.")


async def test_an_utterance_cut_short_is_logged_and_no_longer_tracked(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    speech = await configured(service)
    sink = RecordingSink()
    sink.hold = asyncio.Event()
    speech.start(sink)
    speech.text("Spoken in part. And then")
    assert speech.utterance_key(0) in service.lifecycle._streams
    await asyncio.sleep(0.1)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        await speech.close("client_gone")
    (line,) = [record for record in caplog.records if record.getMessage() == "speech utterance"]
    assert line.outcome == "client_gone" and line.sentences == 1  # type: ignore[attr-defined]
    assert sink.events == [("started", 0, 0, "Spoken in part."), ("ended", 0, 0, True)]  # its end told, as an error
    assert service.lifecycle.idle


async def test_a_drain_out_of_time_logs_the_streams_it_stops_by_their_requests_ids(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    """The drain's lines name the id the session's own lines carry (its X-Request-Id), and its sentence's the id its
    job is logged under; never the lifecycle's key (made unique with a suffix of its own), which nothing else logs."""
    speech = await configured(service)
    sink = RecordingSink()
    speech.start(sink)
    speech.text("SLOW to finish. And then")
    await until(lambda: "audio" in sink.kinds())  # the utterance and its sentence, a minute from its end, are tracked
    service.lifecycle.drain_timeout_s = 0
    with caplog.at_level(logging.INFO, logger="app.lifecycle"):
        service.lifecycle.begin_drain()
        await asyncio.wait_for(speech.stopped.wait(), 5)
    stopped = [
        getattr(r, "request_id", None) for r in caplog.records if r.getMessage() == "drain timeout: stopping a stream"
    ]
    assert sorted(stopped) == ["req-1", "req-1-u0s0"], caplog.text
    await speech.close("stopped")


@pytest.mark.parametrize("text", ["SLOW to finish. And then", "LATE to start. And then"])
@pytest.mark.parametrize("outcome", ["client_stalled", "client_gone"])
async def test_a_sentence_cut_mid_synthesis_is_counted_for_why_the_stream_ended(
    service: SpeechService, engine: ToneEngine, outcome: str, text: str
) -> None:
    """A stream that ends while a sentence is still being synthesized (its client stopped reading, or left) stops
    that synthesis, counted in speech_aborted_total under the stream's own reason: a stalled client is not counted
    as one that left. So whether the sentence's first audio is out (SLOW: its second chunk is a minute away) or the
    engine has not made it yet (LATE: still waiting for the first chunk)."""
    # the transport's cut, as a WebSocket session tells it: a client that stopped reading; one that left, none
    speech = await configured(service, cut_off=lambda: "client_stalled" if outcome == "client_stalled" else None)
    sink = RecordingSink()
    speech.start(sink)
    speech.text(text)
    sentence = text.split(" And")[0]
    if text.startswith("SLOW"):
        await until(lambda: "audio" in sink.kinds())  # its first chunk is out; the second is a minute away
    else:
        await until(lambda: f"+{sentence}" in engine.steps)  # synthesis started; its first chunk is a minute away
        await asyncio.sleep(0.05)
    before = {
        reason: sample("speech_aborted_total", {"reason": reason}) for reason in ("client_stalled", "client_gone")
    }
    await speech.close(outcome)
    after = {reason: sample("speech_aborted_total", {"reason": reason}) for reason in before}
    assert {reason: after[reason] - before[reason] for reason in before} == {
        reason: 1.0 if reason == outcome else 0.0 for reason in before
    }
    assert f"-{sentence}" not in engine.steps  # stopped, not finished
    assert service.lifecycle.idle


async def test_a_sentence_cut_off_before_the_stream_closes_is_counted_for_why_the_transport_cut_it(
    service: SpeechService, engine: ToneEngine
) -> None:
    """A client that stops reading usually fails the speaker's own send first: the speaker then ends, and cancels the
    sentences it was synthesizing, before the stream is closed with its outcome. Those are counted under the reason
    the transport already knows (the connection was aborted for a stalled client), not as a client that left."""
    stalled = False
    speech = await configured(service, cut_off=lambda: "client_stalled" if stalled else None)
    sink = RecordingSink()
    speaker = speech.start(sink)
    speech.text("LATE to start. And then")
    await until(lambda: "+LATE to start." in engine.steps)
    await asyncio.sleep(0.05)
    before = {
        reason: sample("speech_aborted_total", {"reason": reason}) for reason in ("client_stalled", "client_gone")
    }
    stalled = True  # the transport aborted the connection; the speaker fails and ends before close() is called
    speaker.cancel()
    await asyncio.gather(speaker, return_exceptions=True)
    after = {reason: sample("speech_aborted_total", {"reason": reason}) for reason in before}
    assert {reason: after[reason] - before[reason] for reason in before} == {"client_stalled": 1.0, "client_gone": 0.0}
    await speech.close("client_stalled")
    assert service.lifecycle.idle


def sentences_counted() -> dict[str, float]:
    """What the metrics count of WebSocket sentences as they end: their E2E and RTF observations, the audio delivered,
    and the syntheses aborted, by reason."""
    return {
        "e2e": sample("speech_e2e_seconds_count", {"stream": "websocket"}),
        "rtf": sample("speech_rtf_count", {}),
        "audio_s": sample("speech_audio_seconds_total", {}),
        **{f"aborted {reason}": sample("speech_aborted_total", {"reason": reason}) for reason in metrics.ABORT_REASONS},
    }


def sentences_counted_since(before: dict[str, float]) -> dict[str, float]:
    """What `sentences_counted` moved by since `before` (only what moved)."""
    return {name: round(n - before[name], 3) for name, n in sentences_counted().items() if n != before[name]}


@pytest.mark.parametrize(("how", "outcome"), [("client_gone",) * 2, ("client_stalled",) * 2, ("drain", "stopped")])
async def test_a_sentence_synthesized_ahead_of_a_session_cut_off_is_never_counted_as_completed(
    service: SpeechService, engine: ToneEngine, caplog: pytest.LogCaptureFixture, how: str, outcome: str
) -> None:
    """The session is cut off while its first sentence is being delivered (its client has read none of its audio)
    and the second has been synthesized ahead of it, never sent: its client left, or stopped reading, or a drain ran
    out of time. Neither sentence completed for its client: each is counted in speech_aborted_total for why the
    session ended, as its utterance's line says it, and neither in speech_rtf; speech_e2e_seconds observes the one
    whose delivery began, up to the cut (one per sentence of the line's `sentences`), not the one never sent. Before,
    both counted as completed once synthesized: two E2E and two RTF observations, no abort."""
    speech = await configured(service, cut_off=lambda: "client_stalled" if how == "client_stalled" else None)
    sink = RecordingSink()
    sink.hold = asyncio.Event()  # the client reads none of the first sentence's audio
    before = sentences_counted()
    speech.start(sink)
    speech.text("First one. Second one. And")
    # both synthesized, their slots given back: the second ahead of the first's delivery, which waits on its client
    await until(lambda: "-Second one." in engine.steps and service.gate.idle, 30)
    assert sink.events == [("started", 0, 0, "First one.")]
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        if how == "drain":
            service.lifecycle.drain_timeout_s = 0
            service.lifecycle.begin_drain()
            await asyncio.wait_for(speech.stopped.wait(), 30)
        await speech.close(outcome)
    (line,) = utterance_lines(caplog)
    assert (line.outcome, line.sentences, line.audio_s) == (outcome, 1, 0.0)  # type: ignore[attr-defined]
    assert sentences_counted_since(before) == {"e2e": line.sentences, f"aborted {how}": 2}  # type: ignore[attr-defined]
    assert service.lifecycle.idle


async def test_a_failure_of_the_engine_mid_sentence_is_the_streams_failure(
    service: SpeechService, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the engine raises after the first audio is logged and told as `Failed`, naming the stream."""
    speech = await configured(service)
    sink = RecordingSink()
    errors: list[SpeechError] = []

    async def error(exc: SpeechError) -> None:
        errors.append(exc)
        sink.events.append(("error", type(exc).__name__))

    sink.error = error  # type: ignore[method-assign]
    speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        speech.text("BREAK here.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert sink.kinds() == ["started", "audio", "error", "ended", "utterance_done"]
    assert len(errors) == 1 and isinstance(errors[0], Failed) and errors[0].request_id == "req-1"
    assert sink.events[3][3] is True  # its audio.done says error
    assert "sentence synthesis failed" in [record.getMessage() for record in caplog.records]
    await speech.close("stopped")


async def test_a_close_right_after_the_end_of_an_utterance_waits_for_its_end_to_be_told(
    service: SpeechService,
) -> None:
    """input.done then session.close at once: the stream may close only after the utterance's end (session.done) has
    reached the client, however long telling it takes."""
    speech = await configured(service)
    telling = asyncio.Event()
    told: list[str] = []

    class SlowToTellSink(RecordingSink):
        async def utterance_done(self, utterance: int, sentences: int, words: list[WordTiming]) -> None:
            telling.set()
            await asyncio.sleep(0.1)  # a client that reads slowly: the end is still on its way
            told.append("session.done")
            await super().utterance_done(utterance, sentences, words)

    speaker = speech.start(SlowToTellSink())
    speech.text("Only one sentence.")
    speech.done()
    await asyncio.wait_for(telling.wait(), 5)
    speech.done(close=True)  # session.close arrives while the end is being told
    await asyncio.wait_for(speech.finish(), 5)
    assert told == ["session.done"]  # finished: the client has it
    assert not speech.open_utterances and not speaker.done()
    await speech.close("stopped")


async def test_waiting_for_the_rest_to_be_spoken_ends_when_a_drain_stops_the_stream(service: SpeechService) -> None:
    """session.close waits for what was sent to be spoken, but not past a drain that ran out of time: the stream's
    stop ends the wait, so that the transport can tell the client and close."""
    speech = await configured(service)
    sink = RecordingSink()
    sink.hold = asyncio.Event()  # a client that does not read: the sentence is never all delivered
    speech.start(sink)
    speech.text("A sentence that is never all heard.")
    speech.done()
    await until(lambda: "started" in sink.kinds())
    finishing = asyncio.ensure_future(speech.finish())
    await asyncio.sleep(0.05)
    assert not finishing.done()  # still speaking
    speech.stop("drain")
    await asyncio.wait_for(finishing, 5)
    assert speech.open_utterances  # stopped, not spoken
    await speech.close("stopped")


def utterance_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "speech utterance"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        pytest.param(f"{LOPADO_LATIN} after it. ", "string_too_long", id="word-ended"),
        pytest.param(LOPADO_LATIN, "invalid_value", id="text-waiting"),
    ],
)
async def test_text_too_long_refused_before_its_utterance_opened_counts_that_utterance_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, code: str
) -> None:
    """The first input.text of an utterance is refused as too long (a word past the longest `input`, or text waiting
    past it), naming `text`; the client sends its text again without it and the utterance is spoken. The client was
    told of an error of its request's, as when an utterance's SSML or a sentence the voice cannot read is refused:
    the refusal counts as an utterance refused (`speech_ws_utterances_total`) with the code in its log line's errors,
    at once and without opening one: the text sent again is an utterance of its own, which completes. The refusal was
    counted nowhere, as if it had never been told."""
    speech = await configured(short_input_service(tmp_path, 40))
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        with pytest.raises(Refused) as refused:
            speech.text(text)
        assert (refused.value.param, refused.value.code) == ("text", code)
        assert not speech.mid_utterance  # none of it was taken: a new session.config is still between utterances
        assert speech.idle  # and a drain has nothing to wait for
        speech.text("Spoken after all.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert [event for event in sink.events if event[0] in ("started", "error")] == [
        ("started", 0, 0, "Spoken after all.")
    ]
    lines = [(line.utterance, line.errors, line.outcome, line.sentences) for line in utterance_lines(caplog)]  # type: ignore[attr-defined]
    assert lines == [(None, [code], "refused", 0), (0, [], "completed", 1)]
    assert counted_since(before) == {"refused": 1, "completed": 1}
    await speech.close("stopped")


async def test_an_utterance_whose_only_text_was_refused_as_too_long_counts_refused_and_is_told_nothing_more(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """input.done right after the refused message: an utterance with no text ends, its end told without a second
    error (nothing was taken that could be "nothing to speak"), and the refusal counts once, as refused. A refusal
    within an utterance already open counts that utterance refused."""
    speech = await configured(short_input_service(tmp_path, 40))
    sink = RecordingSink()
    before = counted()
    speech.start(sink)
    with caplog.at_level(logging.INFO, logger="app.speech.utterances"):
        with pytest.raises(Refused, match="never cut"):
            speech.text(f"{LOPADO_LATIN}. ")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
        assert sink.events == [("utterance_done", 0, 0)]
        sink.done.clear()
        speech.text("Before it ")
        with pytest.raises(Refused, match="never cut"):
            speech.text(f"{LOPADO_LATIN} after it.")
        speech.text("after it.")
        speech.done()
        await asyncio.wait_for(sink.done.wait(), 5)
    assert [event for event in sink.events if event[0] in ("started", "error")] == [
        ("started", 1, 0, "Before it after it.")
    ]
    lines = utterance_lines(caplog)
    assert [(line.errors, line.outcome) for line in lines] == [  # type: ignore[attr-defined]
        (["string_too_long"], "refused"),
        ([], "completed"),  # the input.done's utterance, with no text: not counted
        (["string_too_long"], "refused"),
    ]
    assert counted_since(before) == {"refused": 2}
    await speech.close("stopped")
