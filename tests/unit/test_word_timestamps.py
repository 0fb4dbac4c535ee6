"""Word timestamps: written words, matching the reader's spoken words back to them, hibari's phoneme clock, and the
sentence pipeline's shifts (trimmed silence, joined sentences)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import numpy as np
import pytest

from app.engine_protocol import AudioChunk, SynthesisJob
from app.engines.embedded import alignment as hibari_alignment
from app.speech.sentences import LEAD_S, SentencePipeline
from app.text.sentences import split_sentences
from app.text.words import SpokenWord, WordTiming, align_words, written_words
from tests.unit.test_speech_sentences import RATE, utterance


def spoken(*words: str) -> list[SpokenWord]:
    return [SpokenWord(word, float(i), i + 0.5) for i, word in enumerate(words)]


def test_written_words_keep_numbers_and_abbreviations_as_written() -> None:
    text = 'Dr. Smith paid $9.99, e.g. at 7:30 pm — in the U.S. "Really?" ... yes & no. 50%. (Done)'
    assert written_words(text) == [
        "Dr", "Smith", "paid", "$9.99", "e.g.", "at", "7:30", "pm", "in", "the", "U.S.", "Really", "yes", "&", "no",
        "50%", "Done",
    ]  # fmt: skip


def test_a_sentences_full_stop_after_an_address_or_a_file_name_is_no_part_of_it() -> None:
    """A full stop inside a word keeps the one at its end only in an abbreviation of short parts ("e.g.", "Ph.D."):
    an address or a file name that ends a sentence ("example.com.", "main.py.") was captioned with the sentence's
    full stop, as "done" never is."""
    text = (
        "Visit example.com. Mail john.doe@example.com. Edit config.yaml. Run main.py. Use Node.js. Go to www.x.co.uk."
    )
    assert written_words(text) == [
        "Visit", "example.com", "Mail", "john.doe@example.com", "Edit", "config.yaml", "Run", "main.py", "Use",
        "Node.js", "Go", "to", "www.x.co.uk",
    ]  # fmt: skip
    assert written_words("See e.g. U.S.A. or a Ph.D. and B.Sc. at 3 p.m. a.k.a. done.") == [
        "See", "e.g.", "U.S.A.", "or", "a", "Ph.D.", "and", "B.Sc.", "at", "3", "p.m.", "a.k.a.", "done",
    ]  # fmt: skip


def test_an_abbreviations_last_full_stop_is_its_own_and_an_addresss_is_the_sentences() -> None:
    """ "x.ai." kept the sentence's full stop (two letters after the dot were read as an abbreviation's part, as in
    "Ph.D."), and "Lt.Col." lost its own (three letters were read as an address's). An abbreviation's parts are single
    letters or short capitalised words; an address's or a file name's last part is neither."""
    text = "Visit x.ai. Ask Lt.Col. Smith, a Ph.D. Open main.c. Read т.е. and README.md. See Maj.Gen."
    assert written_words(text) == [
        "Visit", "x.ai", "Ask", "Lt.Col.", "Smith", "a", "Ph.D.", "Open", "main.c", "Read", "т.е.", "and",
        "README.md", "See", "Maj.Gen.",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "word",
    [
        "e.g",
        "U.S",
        "Ph.D",
        "Lt.Col",
        "B.Sc",
        "a.k.a",
        "т.е",
        "x.ai",
        "example.com",
        "main.py",
        "Node.js",
        "v1.2",
        "3.11",
    ],
)
def test_a_sentence_ends_after_a_word_exactly_where_the_full_stop_is_not_the_words(word: str) -> None:
    """Where a sentence ends and which words keep a full stop is one rule: a word that keeps its last full stop
    (an abbreviation) does not end its sentence at it ("Lt.Col. Smith" was cut in two), and one whose full stop is
    the sentence's ("x.ai.") does."""
    text = f"We saw {word}. Then we left."
    keeps_its_stop = f"{word}." in written_words(text)
    assert split_sentences(text) == ([text] if keeps_its_stop else [f"We saw {word}.", "Then we left."])


def test_markdowns_marks_are_no_part_of_a_word() -> None:
    """What an LLM writes: captions show "Install", not "**Install"; "pip", not "`pip"."""
    text = "**Note:** **Install** the `pip` package from `requirements.txt`. See *this*, 2 * 3 and x_1."
    assert written_words(text) == [
        "Note", "Install", "the", "pip", "package", "from", "requirements.txt", "See", "this", "2", "*", "3", "and",
        "x_1",
    ]  # fmt: skip
    assert written_words("Run (`pip`) with `-v`, `./run.sh` and **+5%** or a**2.") == [
        "Run", "pip", "with", "v", "./run.sh", "and", "+5%", "or", "a**2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "Install it. *** Then run it.",
        "Install it.\n***\nThen run it.",
        "Install it. ***. Then run it.",
        "Install it. ** ``` Then run it.",
        "Install it.\n```\nThen run it.",
        "Install it. ___ Then run it.",
        "Install it.\n~~~\nThen run it.",
    ],
)
def test_a_run_of_markdowns_marks_alone_is_no_word_wherever_it_stands(text: str) -> None:
    """A rule ("***") or a fence ("```") is punctuation, not a word, wherever it stands: "***" was timed as a word
    inside a sentence ("Install it. *** Then") and dropped as one of its own (on its line), and "```" on its line went
    with the next sentence as a word, though the voice says nothing for either."""
    words = [word for piece in split_sentences(text) for word in written_words(piece)]
    assert words == ["Install", "it", "Then", "run", "it"]


@pytest.mark.parametrize(
    "text",
    [
        "Install it\n===\nThen run it.",  # a heading's underline (setext)
        "Install it\n---\nThen run it.",
        "Install it. * * * Then run it.",  # a rule written with spaces
        "Install it.\n* * *\nThen run it.",
        "Install it.\n- - -\nThen run it.",
        "Install it.\n_ _ _\nThen run it.",
        "Install it. _ _ _. Then run it.",
        "Install it.\n** * **\nThen run it.",
    ],
)
def test_a_rule_or_a_headings_underline_is_no_word(text: str) -> None:
    """A line of "=" under a heading was timed as a word (and read aloud as "equals"), and a rule written with spaces
    ("* * *", "_ _ _") as three: Markdown's marks alone are no words, however they are spaced."""
    words = [word for piece in split_sentences(text) for word in written_words(piece)]
    assert words == written_words(text) == ["Install", "it", "Then", "run", "it"]


def test_a_strike_through_is_no_part_of_the_words_it_wraps() -> None:
    """ "~~strike~~" was captioned as written, tildes and all: the words struck through are the words, as the
    voice says them (its reader drops a strike's marks); a single tilde ("~5", "~/.bashrc") is no such mark."""
    assert written_words("A ~~strike~~ and ~~two words~~, (~~$50~~) **~~both~~**.") == [
        "A", "strike", "and", "two", "words", "$50", "both",
    ]  # fmt: skip
    assert written_words("About ~5 minutes in ~/.bashrc, 2 * 3 and a === b.") == [
        "About", "~5", "minutes", "in", "~/.bashrc", "2", "*", "3", "and", "a", "===", "b",
    ]  # fmt: skip


def test_a_negative_number_keeps_its_sign_and_spanish_marks_are_punctuation() -> None:
    """ "-5°C" is minus five (its sign once dropped as a dash, so the label said the opposite); "¿Qué" and "¡Sí" lose
    their opening marks as "Qué?" and "Sí!" lose their closing ones; a dash between words is still no word."""
    assert written_words("It was -5°C, then −3.5 and -- nothing - at all, -$5 or -.5 and -x.") == [
        "It", "was", "-5°C", "then", "−3.5", "and", "nothing", "at", "all", "-$5", "or", "-.5", "and", "x"
    ]  # fmt: skip
    assert written_words("¿Qué pasa? ¡Sí! «Bien»") == ["Qué", "pasa", "Sí", "Bien"]


def test_same_words_pair_up_and_punctuation_does_not_matter() -> None:
    timings = align_words(["Hello", "there"], spoken("hello,", "There!"))
    assert timings == [WordTiming("Hello", 0.0, 0.5), WordTiming("there", 1.0, 1.5)]


def test_a_number_read_as_several_words_takes_their_whole_span() -> None:
    timings = align_words(["paid", "$9.99", "each"], spoken("paid", "nine", "dollars", "ninety", "nine", "each"))
    assert timings == [WordTiming("paid", 0, 0.5), WordTiming("$9.99", 1, 4.5), WordTiming("each", 5, 5.5)]


def test_an_abbreviation_read_as_another_word_takes_its_time() -> None:
    timings = align_words(["Dr", "Smith"], spoken("Doctor", "Smith"))
    assert timings == [WordTiming("Dr", 0, 0.5), WordTiming("Smith", 1, 1.5)]


def test_several_rewritten_words_share_the_span_in_order_by_length() -> None:
    timings = align_words(["at", "7:30", "pm", "x"], spoken("at", "seven", "thirty", "P.M.", "why"))
    assert [t.word for t in timings] == ["at", "7:30", "pm", "x"]
    starts = [t.start_s for t in timings]
    assert starts == sorted(starts) and timings[-1].end_s == 4.5
    assert all(a.end_s <= b.start_s for a, b in itertools.pairwise(timings))


def test_unspoken_words_are_instants_and_extra_spoken_words_extend_the_previous_word() -> None:
    timings = align_words(["a", "§", "b"], spoken("a", "b", "uh"))
    assert timings == [WordTiming("a", 0, 0.5), WordTiming("§", 0.5, 0.5), WordTiming("b", 1, 2.5)]
    assert align_words(["a"], []) == [WordTiming("a", 0, 0)]


def test_a_dash_standing_alone_is_no_word_and_lends_its_pause_to_no_word_beside_it() -> None:
    """The forced aligner is given the text as written and times a dash between spaces as a word of its own, over the
    pause it marks (on hibari's "Well - maybe", Whisper put "-" at 0.58-0.84 s). It is punctuation, no written word,
    as a comma is: it stretched the word before it over the pause ("Well" to 0.84 s, hibari's own ends at 0.60 s), or
    pulled a first word back to it, where a comma's pause is left out of its word."""
    written = written_words("Well - maybe, A – B.")
    assert written == ["Well", "maybe", "A", "B"]
    aligned = [
        SpokenWord("Well", 0.3, 0.6), SpokenWord("-", 0.6, 0.85), SpokenWord("maybe,", 0.85, 1.1),
        SpokenWord("A", 1.1, 1.3), SpokenWord("–", 1.3, 1.5), SpokenWord("B.", 1.5, 1.7),
    ]  # fmt: skip
    assert align_words(written, aligned) == [
        WordTiming("Well", 0.3, 0.6), WordTiming("maybe", 0.85, 1.1), WordTiming("A", 1.1, 1.3),
        WordTiming("B", 1.5, 1.7),
    ]  # fmt: skip
    leading = [SpokenWord("—", 0.3, 0.5), SpokenWord("Maybe", 0.5, 0.6), SpokenWord("so.", 0.6, 0.9)]
    assert align_words(written_words("— Maybe so."), leading) == [
        WordTiming("Maybe", 0.5, 0.6), WordTiming("so", 0.6, 0.9)
    ]  # fmt: skip
    # a symbol that is a word as written ("&", "§") is still matched, and a reader's extra word still extends its own
    assert align_words(["a", "&", "b"], spoken("a", "&", "b", "uh")) == [
        WordTiming("a", 0, 0.5), WordTiming("&", 1, 1.5), WordTiming("b", 2, 3.5)
    ]  # fmt: skip


def test_durations_output_is_an_appended_protobuf_field() -> None:
    patched = hibari_alignment.with_durations_output(b"MODEL")
    name = hibari_alignment.DURATIONS_OUTPUT.encode()
    assert patched.startswith(b"MODEL") and name in patched
    assert patched[5] == 7 << 3 | 2  # ModelProto.graph, length-delimited


def test_phoneme_clock_times_words_from_durations_through_pieces_and_stretch() -> None:
    vocab = {c: i for i, c in enumerate("abcdxyz", start=1)}
    phonemes = "ab, cd xyz"
    words = [hibari_alignment.PhonemeWord("AB", 0, 2), hibari_alignment.PhonemeWord("CD", 4, 6)]
    words.append(hibari_alignment.PhonemeWord("XYZ", 7, 10))
    clock = hibari_alignment.PhonemeClock(phonemes, vocab)
    # piece 1 "ab, cd": ids pad a b c d pad (',' and ' ' are not in this vocab), 2 samples per duration unit
    clock.add("ab, cd", np.array([5, 1, 1, 2, 2, 3]), samples=28)
    clock.add("xyz", np.array([1, 1, 1, 1, 1]), samples=10)
    timed = clock.words(words, sample_rate=2, stretch=0.5)
    # AB: samples 10..14, CD: 14..22, XYZ: 28 + 2 .. 28 + 8; seconds at 2 Hz, halved by the stretch
    assert timed == [SpokenWord("AB", 2.5, 3.5), SpokenWord("CD", 3.5, 5.5), SpokenWord("XYZ", 7.5, 9.0)]


def test_phonemize_builds_hibaris_own_phoneme_string() -> None:
    from hibari.g2p import G2P

    g2p = G2P()
    for text in ["\"Quoted,\" she said. Don't stop; it's 50% done & A/B tested.", "At 7:30 pm, Dr. Smith paid $9.99."]:
        phonemes, words = hibari_alignment.phonemize(g2p, text)
        assert phonemes == g2p(text)
        assert all(not any(c in ",.;!?" for c in phonemes[w.start : w.end]) for w in words)
    _, words = hibari_alignment.phonemize(g2p, "At 7:30 pm, Dr. Smith paid $9.99.")
    assert [w.text for w in words] == ["At", "seven", "thirty", "P.M.,", "Dr", "Smith", "paid", "$9.99."]


class WordEngine:
    """Each sentence: 0.3 s of near-silence, 1 s of sound, 0.6 s of near-silence; one word in the middle of the sound,
    and one that runs on into the tail silence."""

    name = "fake"
    model_id = "fake"

    async def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]:
        words = (WordTiming("mid", 0.5, 0.8), WordTiming("end", 1.2, 1.9))
        yield AudioChunk(utterance(0.3, 1.0, 0.6), RATE, words=words)

    async def abort(self, request_id: str) -> None:
        return None


@pytest.mark.asyncio
async def test_pipeline_moves_words_with_the_trimmed_silence_and_clamps_them_to_the_sentence() -> None:
    pipeline = SentencePipeline(WordEngine(), max_chars=250)  # type: ignore[arg-type]
    job = SynthesisJob(request_id="r", text="One. Two.", voice="v", word_timestamps=True)
    offset, timed = 0, []
    async for chunk in pipeline.synthesize(job):
        timed.extend(word.shifted(offset / RATE) for word in chunk.words)
        offset += len(chunk.samples)
    total_s = offset / RATE
    first, second = timed[:2], timed[2:]
    assert first[0] == WordTiming("mid", 0.5, 0.8)  # the first sentence keeps its leading silence
    sentence_one_s = 0.3 + 1.0 + 0.25  # the tail cut to the pause after a full stop
    assert first[1].end_s == pytest.approx(sentence_one_s, abs=0.01)  # clamped to the sentence's audio
    # the second sentence's 0.3 s lead is cut to LEAD_S: its words move 0.3 - LEAD_S earlier
    assert second[0].start_s == pytest.approx(sentence_one_s + 0.5 - (0.3 - LEAD_S), abs=0.01)
    assert second[1].end_s == pytest.approx(total_s, abs=1e-6)


@pytest.mark.asyncio
async def test_a_job_that_continues_an_utterance_loses_its_lead_and_its_words_move_with_it() -> None:
    """A WebSocket utterance's second sentence is a job of its own: `continues` joins it as a later sentence, so its
    0.3 s lead is cut to LEAD_S from the start and its words stay on the sounds they name."""
    pipeline = SentencePipeline(WordEngine(), max_chars=250)  # type: ignore[arg-type]
    results = {}
    for continues in (False, True):
        job = SynthesisJob(request_id="r", text="Two.", voice="v", word_timestamps=True, continues=continues)
        chunks = [chunk async for chunk in pipeline.synthesize(job)]
        samples = np.concatenate([chunk.samples for chunk in chunks])
        offset = sum(len(chunk.samples) for chunk in chunks[:-1])
        words = [word.shifted(offset / RATE) for word in chunks[-1].words]
        results[continues] = (len(samples) / RATE, words)
    (alone_s, alone_words), (continued_s, continued_words) = results[False], results[True]
    assert alone_s == pytest.approx(0.3 + 1.0 + 0.25, abs=0.01)
    assert continued_s == pytest.approx(LEAD_S + 1.0 + 0.25, abs=0.01)
    assert alone_words[0] == WordTiming("mid", 0.5, 0.8)
    assert continued_words[0].start_s == pytest.approx(0.5 - (0.3 - LEAD_S), abs=0.01)
    assert continued_words[1].end_s == pytest.approx(continued_s, abs=1e-6)
