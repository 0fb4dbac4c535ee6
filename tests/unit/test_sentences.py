"""split_sentences and is_speakable: where text is cut before synthesis, and that nothing is ever lost."""

from __future__ import annotations

import itertools
import random
import time
import unicodedata
from typing import Any

import pytest

from app.speech.sentences import complete_units, final_units
from app.text.sentences import is_speakable, split_sentences


def words(text: str) -> list[str]:
    return text.split()


# -- abbreviations: a period after them does not end the sentence ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith went home. He slept.", ["Dr. Smith went home.", "He slept."]),
        ("Mr. and Mrs. Jones arrived. They sat.", ["Mr. and Mrs. Jones arrived.", "They sat."]),
        ("It was Jan. 5th. Then it rained.", ["It was Jan. 5th.", "Then it rained."]),
        ("See No. 7 for details. Thanks.", ["See No. 7 for details.", "Thanks."]),
        ("Use tools, e.g. hammers. Also nails.", ["Use tools, e.g. hammers.", "Also nails."]),
        ("Some fruit, i.e. Apples, remain. Fine.", ["Some fruit, i.e. Apples, remain.", "Fine."]),
        ("The U.S. Army arrived. It left.", ["The U.S. Army arrived.", "It left."]),
        ("Ask Lt.Col. Smith now. He knows.", ["Ask Lt.Col. Smith now.", "He knows."]),
        ("J. K. Rowling wrote it. Yes.", ["J. K. Rowling wrote it.", "Yes."]),
        ("Prof. Plum and Capt. Kirk met. Done.", ["Prof. Plum and Capt. Kirk met.", "Done."]),
        ("It weighs approx. 5 kg. Done.", ["It weighs approx. 5 kg.", "Done."]),
        ("Look at Fig. 3. It shows the trend.", ["Look at Fig. 3.", "It shows the trend."]),
        ("(Dr. Who) is here. Hi.", ["(Dr. Who) is here.", "Hi."]),
        ("DR. SMITH IS IN. OK.", ["DR. SMITH IS IN.", "OK."]),
    ],
)
def test_abbreviations_do_not_end_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Words that end a sentence only before a capital.
        ("He works at Acme Inc. The board met.", ["He works at Acme Inc.", "The board met."]),
        ("Bring pens, paper etc. Then sit.", ["Bring pens, paper etc.", "Then sit."]),
        ("The answer is No. The end.", ["The answer is No.", "The end."]),
        ("We met in Jan. Everyone came.", ["We met in Jan.", "Everyone came."]),
    ],
)
def test_conditional_abbreviations_end_before_a_capital(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_abbreviation_at_the_very_end_ends_the_text() -> None:
    assert split_sentences("I called the Dr.") == ["I called the Dr."]


# -- numbers: decimal points, thousands separators and clock times are never cut -----------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It costs 3.50 dollars. Cheap.", ["It costs 3.50 dollars.", "Cheap."]),
        ("There were 1,000 people. Wow.", ["There were 1,000 people.", "Wow."]),
        ("Version 2.0 is out. Upgrade now.", ["Version 2.0 is out.", "Upgrade now."]),
        ("Meet at 9:30. Be on time.", ["Meet at 9:30.", "Be on time."]),
        ("Pi is 3.14159 or so. Right.", ["Pi is 3.14159 or so.", "Right."]),
        ("I am 5. You are 6.", ["I am 5.", "You are 6."]),
    ],
)
def test_numbers_are_not_cut(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


# -- other terminators, quotes and brackets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Wow! Really? Yes… Fine.", ["Wow!", "Really?", "Yes…", "Fine."]),
        ("Stop!! What?! Go.", ["Stop!!", "What?!", "Go."]),
        ("Hello... World.", ["Hello...", "World."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("She asked 'why?' And left.", ["She asked 'why?'", "And left."]),
        ("He said “yes.” Then slept.", ["He said “yes.”", "Then slept."]),
        ("(It was late.) We left.", ["(It was late.)", "We left."]),
        ("Das ist gut. «Ja.» Fertig.", ["Das ist gut.", "«Ja.»", "Fertig."]),
    ],
)
def test_terminators_and_closing_quotes(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "wait... what is that",  # an ellipsis before a lowercase word goes on
        "and so on. and then more",  # a lowercase continuation is never cut
        "Is it? maybe not",
        "Hello.World is one token",  # no space after the period
        "He lives in the U.S. He likes it.",  # an acronym before a capital: doubtful, left joined
    ],
)
def test_doubtful_cases_stay_joined(text: str) -> None:
    assert split_sentences(text) == [text]


def test_whole_text_without_terminator_is_one_piece() -> None:
    assert split_sentences("no punctuation at all here") == ["no punctuation at all here"]


# -- paragraphs, newlines and whitespace ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("First para.\n\nSecond para.", ["First para.", "Second para."]),
        ("line one\nline two", ["line one", "line two"]),  # a newline ends a piece even without punctuation
        ("Windows\r\nline endings\r\n", ["Windows", "line endings"]),
        ("Blank\n   \n\nlines", ["Blank", "lines"]),
        ("  lots   of\tspace  \t here.  ", ["lots of space here."]),
        ("Dr.\nSmith", ["Dr.", "Smith"]),  # a line break is a hard boundary, even after an abbreviation
    ],
)
def test_paragraphs_and_whitespace(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "\n\n\n", "... !!! ???", "\x00\x01\x02", "— – -"])
def test_nothing_speakable_gives_no_pieces(text: str) -> None:
    assert split_sentences(text) == []


def test_unspeakable_fragments_are_dropped_but_words_are_kept() -> None:
    assert split_sentences("Hello. ... World") == ["Hello.", "World"]
    assert split_sentences("Hello.\n\n***\n\nWorld.") == ["Hello.", "World."]


def test_a_sentence_of_words_with_nothing_to_say_goes_with_a_neighbour_so_its_words_are_still_timed() -> None:
    """ "😀." is a word of the input that the voice says nothing for: on its own it would be no sentence and its word
    would vanish from the word timestamps, which list every word of the input (as "I love 😀 pizza." lists it)."""
    assert split_sentences("Hello. 😀. World.") == ["Hello.", "😀. World."]
    assert split_sentences("Hello. 😀.") == ["Hello. 😀."]  # the last: with the one before it
    assert split_sentences("😀! 🙂? Fine.") == ["😀! 🙂? Fine."]
    assert split_sentences("Hi. 😀. Wonderful.", max_chars=10) == ["Hi. 😀.", "Wonderful."]  # where it fits
    assert split_sentences("Wonderful. 😀. Marvellous.", max_chars=10) == ["Wonderful.", "😀. Marvellous."]  # else over


@pytest.mark.parametrize("symbol", ["&", "%", "#", "@", "/", "§"])
def test_a_symbol_a_voice_reads_is_kept_where_it_stands_alone(symbol: str) -> None:
    """Unicode files "&" under punctuation, but a voice reads it ("and"), as it does inside a sentence ("Tom & Jerry"):
    alone between sentences or after the last it was dropped, never spoken and missing from the word timestamps."""
    assert split_sentences(f"Hello. {symbol}") == [f"Hello. {symbol}"]
    assert split_sentences(f"Hello.\n{symbol}\nWorld.") == ["Hello.", f"{symbol} World."]


def streamed(pieces: list[str], granularity: Any = "sentence", max_chars: int = 250) -> list[str]:
    """What the WebSocket speaks of text that arrives in these pieces: `complete_units` as each comes, then
    `final_units` at input.done."""
    spoken: list[str] = []
    buffer = ""
    for piece in pieces:
        units, buffer = complete_units(buffer + piece, max_chars, granularity)
        spoken += units
    return spoken + final_units(buffer, max_chars, granularity)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a ligature that is a whole phrase (U+FDFA), a lone Cyrillic letter: a voice that reads English refuses
        # each; joined to the sentence after it, it took that sentence with it, its words never spoken
        ("Hello. ﷺ. World is here.", ["Hello.", "ﷺ.", "World is here."]),
        ("Hello. Ж. World is here.", ["Hello.", "Ж.", "World is here."]),
        ("Bye. J. Smith is here.", ["Bye.", "J. Smith is here."]),  # a letter of the next word's script: an initial
        ("А. С. Пушкин wrote it. Yes.", ["А. С. Пушкин wrote it.", "Yes."]),
        # one character written for a whole word or phrase (ﷺ, ﷲ) is no initial, whatever follows it: before a number
        # it went with the sentence after it, which its refusal took with it
        ("Hello. ﷺ. 5 apples are here.", ["Hello.", "ﷺ.", "5 apples are here."]),
        ("Hello. ﷲ. $5 is the price.", ["Hello.", "ﷲ.", "$5 is the price."]),
        # a single letter before a number may be an abbreviation ("c. 1900", Russian "с. 25", a page): left joined
        ("Born c. 1900 in Ohio. Yes.", ["Born c. 1900 in Ohio.", "Yes."]),
        ("См. с. 25 там. Yes.", ["См. с. 25 там.", "Yes."]),
        ("C. 1900 it was built. Yes.", ["C. 1900 it was built.", "Yes."]),
        # but not a letter of another script than the words after it: it abbreviates nothing there, and joined to the
        # sentence after it, it took that sentence with it where a voice refused the letter
        ("Hello. Ж. 5 apples are here.", ["Hello.", "Ж.", "5 apples are here."]),
        ("Ж. 5 apples are here.", ["Ж.", "5 apples are here."]),
        ("Привет. Ж. 5 apples are here.", ["Привет.", "Ж.", "5 apples are here."]),
        ("Hello ж. 5 apples are here.", ["Hello ж.", "5 apples are here."]),
        ("Hello. «Ж.» $5 is the price.", ["Hello.", "«Ж.»", "$5 is the price."]),
        # nor where no letter follows it in its sentence: the letter before it there tells, and with none it is a
        # sentence of its own, abbreviating nothing ("Ж. 5." went whole to a voice that refused it, "5." never spoken)
        ("Hello. Ж. 5.", ["Hello.", "Ж.", "5."]),
        ("Ж. 5.", ["Ж.", "5."]),
        ("Hello ж. 5.", ["Hello ж.", "5."]),
        ("Hello. Ж. 5.\nFine.", ["Hello.", "Ж.", "5.", "Fine."]),
        ("Hello. Ж. 5. Fine.", ["Hello.", "Ж.", "5.", "Fine."]),
        ("Born c. 1900.", ["Born c. 1900."]),
        ("Он родился с. 1900. Yes.", ["Он родился с. 1900.", "Yes."]),
        # the letters after it are looked for up to its sentence's next terminator: the next sentence's are no guide
        ("Born c. 1900. Привет.", ["Born c. 1900.", "Привет."]),
    ],
)
@pytest.mark.parametrize("granularity", ["sentence", "clause"])
def test_a_letter_of_another_script_than_the_next_words_is_no_initial(
    text: str, expected: list[str], granularity: str
) -> None:
    """ "J. K. Rowling" is one sentence: a single letter before a full stop is taken for an initial of the name after
    it. A letter of another script than the next word's ("ﷺ. World") is none: the sentence ends there, whole or
    streamed in, and a voice that cannot read it refuses it alone."""
    assert split_sentences(text) == expected
    assert streamed([text], granularity) == expected
    assert streamed([word + " " for word in text.split(" ")], granularity) == expected


@pytest.mark.parametrize(
    ("text", "complete", "waiting"),
    [
        ("Born c. 1900 ", [], "Born c. 1900"),
        ("См. с. 25 ", [], "См. с. 25"),
        ("Born c. 1900. ", [], "Born c. 1900."),
        ("Hello. Ж. 5 ", ["Hello."], "Ж. 5"),
        ("Hello. Ж. 5.", ["Hello."], "Ж. 5."),  # "5." may still be "5.5"
        ("Hello. Ж. 5. ", ["Hello.", "Ж."], "5."),
    ],
)
def test_a_letter_before_a_number_waits_for_what_decides_it(text: str, complete: list[str], waiting: str) -> None:
    """Streamed, a lone letter before a number ends no sentence until its sentence's next letter after it says whose
    script it is in ("c. 1900 in Ohio", "Ж. 5 apples"), or a terminator or a line break says none comes: cut before,
    it would never be joined again."""
    units, rest = complete_units(text, 250, "sentence")
    assert (units, rest.strip()) == (complete, waiting)


# single letters, numbers and abbreviations beside words of two scripts, where a sentence's end is decided by what
# stands around a full stop
_LETTERS_AND_NUMBERS = [
    "c.", "Ж.", "ж.", "J.", "K.", "ﷺ.", "«Ж.»", "5", "5.", "5.5", "$5", "1900", "1900.", "Hello.", "hello", "Smith",
    "apples", "Yes!", "Привет.", "там.", "яблоки", "Dr.", "U.S.", "e.g.", "Ph.D.", "Lt.Col.", "x.ai.", "\n",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_streamed_text_is_cut_where_the_whole_text_is(seed: int) -> None:
    """Text that arrives in pieces is cut where the same text sent whole is: a lone letter's sentence was decided on
    the letters after it on its line, which streamed text cut at a sentence's end did not have ("K. 1900 5. Ж." was
    cut after "K." whole, not streamed)."""
    rng = random.Random(seed)
    for _ in range(200):
        text = " ".join(rng.choices(_LETTERS_AND_NUMBERS, k=rng.randint(1, 10))).replace(" \n ", "\n")
        whole = split_sentences(text)
        for chunks in ([text], [word + " " for word in text.split(" ")], list(text)):
            assert [unit.strip() for unit in streamed(chunks)] == whole, (text, chunks)


@pytest.mark.parametrize("chunks", [["Hello.", " 😀.", " World."], list("Hello. 😀. World. 🙂! Fine.")])
def test_streamed_text_keeps_a_sentence_with_nothing_to_say_for_the_next(chunks: list[str]) -> None:
    """As the WebSocket cuts text that arrives (`complete_units`, then `final_units` at input.done): "😀." is
    complete as soon as the next word begins, and would go alone, as nothing, where it did not wait."""
    words = [word for unit in streamed(chunks) for word in unit.split()]
    assert words == "".join(chunks).split()


def test_streamed_clauses_begin_with_their_words() -> None:
    """A clause cut from text after a sentence's end began with the space after it (" Here's the plan:"), told so in
    `sentence_text`; sentences never did."""
    tokens = ["Sure", "!", " Here", "'s", " the", " plan", ":", " first", ",", " we", " go", ".", " Then", ",", " we"]
    assert streamed([*tokens, " rest", "."], "clause") == [
        "Sure!",
        "Here's the plan:",
        "first,",
        "we go.",
        "Then,",
        "we rest.",
    ]


@pytest.mark.parametrize("whole", [True, False])
def test_an_abbreviation_after_a_line_break_does_not_end_a_streamed_sentence(whole: bool) -> None:
    """As a request cuts it: "Dr." at a line's start was taken for the end of a sentence over the WebSocket (the word
    before the full stop was looked for after a space only), "Dr." and "Smith..." spoken apart; "\tMr." alike."""
    text = "Your appointment is confirmed.\n\nDr. Smith will see you at 3 pm.\n\tMr. Jones also joins."
    tokens = [text] if whole else [piece for piece in text.replace(" ", " \0").replace(".", "\0.").split("\0")]
    expected = ["Your appointment is confirmed.", "Dr. Smith will see you at 3 pm.", "Mr. Jones also joins."]
    assert [unit.strip() for unit in streamed(tokens)] == expected == split_sentences(text)


@pytest.mark.parametrize(
    "steps",
    [
        [("Hello there. 😀.", True), (" Bye now.", False)],  # the writer paused after the silent sentence
        [("Hello. ", False), ("😀 ", True), ("🙂", True), (" Fine.", False)],
        [("😀 " * 130, False), ("Hello there.", False)],  # silent words past the longest sentence, then words
        [("😀 " * 130, True), ("Hello there.", True)],
        [("Hello. ", False), ("😀!", False), ("\nBye now.", False)],  # a line break between: no word to go with
        [("Hello. ", False), ("😀! ... ", False), ("Bye now.", False)],
    ],
)
def test_silent_words_wait_for_the_next_words_through_a_pause_and_past_the_longest_sentence(
    steps: list[tuple[str, bool]],
) -> None:
    """A pause of the writer (`final`: the WebSocket's idle cut) or a tail longer than a sentence gives up what has
    nothing to say only with words to say: alone it would go as nothing, and its words vanish from the timestamps."""
    spoken: list[str] = []
    buffer = ""
    for chunk, paused in steps:
        units, buffer = complete_units(buffer + chunk, 250, "sentence")
        spoken += units
        if paused:
            units, buffer = complete_units(buffer, 250, "sentence", final=True)
            spoken += units
    spoken += final_units(buffer, 250, "sentence")
    assert all(is_speakable(unit) for unit in spoken), spoken

    def words(text: str) -> list[str]:  # punctuation alone ("...") is no word
        return [word for word in text.split() if not all(unicodedata.category(ch)[0] == "P" for ch in word)]

    assert [word for unit in spoken for word in words(unit)] == words("".join(chunk for chunk, _ in steps))


def test_punctuation_alone_is_given_up_when_the_writer_pauses() -> None:
    """It is no word to keep for the next ones: left waiting, it would be text to speak at the idle timeout."""
    assert complete_units("... ", 250, "sentence", final=True) == ([], "")
    assert complete_units("😀 ", 250, "sentence", final=True) == ([], "😀 ")  # a word: it waits


@pytest.mark.parametrize(
    "text", ["Well, — I think so.", "Nice, 😀, right.", "One, two; —, 😀, three.", "😀, 🙂, fine."]
)
@pytest.mark.parametrize("whole", [True, False])
def test_clauses_with_nothing_to_say_go_with_a_neighbour(text: str, whole: bool) -> None:
    """`split_granularity: clause`: a clause of punctuation ("—") or of silent words ("😀,") is no request of its
    own, which its engine would refuse mid-utterance; its words go with the next clause, as a sentence's do."""
    spoken: list[str] = []
    buffer = ""
    for chunk in [text] if whole else list(text):
        units, buffer = complete_units(buffer + chunk, 250, "clause")
        spoken += units
    spoken += final_units(buffer, 250, "clause")
    assert spoken and all(is_speakable(unit) for unit in spoken)
    kept = [word for word in text.split() if any(ch.isalnum() or ord(ch) > 0x2FFF for ch in word)]
    assert [word for unit in spoken for word in unit.split() if word in kept] == kept


@pytest.mark.parametrize("text", ["😀", "...", " — "])
def test_an_utterance_with_nothing_to_say_is_no_unit_when_spoken_whole(text: str) -> None:
    """`split_granularity: none`: the whole text is one request only where it can be spoken; otherwise none, and
    the utterance is refused as one with nothing to speak (docs/websocket.md), not spoken into an engine's error."""
    assert final_units(text, 250, "none") == []
    assert final_units("Fine 😀", 250, "none") == ["Fine 😀"]


# -- long sentences: cut at clause punctuation, then at spaces --------------------------------------------------


def test_long_sentence_is_cut_after_commas() -> None:
    clause = "the quick brown fox jumps over the lazy dog"
    text = ", ".join([clause] * 12) + "."
    pieces = split_sentences(text, max_chars=100)
    assert len(pieces) > 1
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.endswith(",") for p in pieces[:-1])  # every cut is right after a comma
    assert pieces[-1].endswith("dog.")
    assert words(" ".join(pieces)) == words(text)


@pytest.mark.parametrize("sep", [";", ":", " —", " –"])
def test_long_sentence_is_cut_after_other_clause_marks(sep: str) -> None:
    clause = "every clause here is about forty chars"
    text = f"{sep} ".join([clause] * 10) + "."
    pieces = split_sentences(text, max_chars=90)
    assert len(pieces) > 1
    assert all(len(p) <= 90 for p in pieces)
    assert all(p.endswith(sep.strip()) for p in pieces[:-1])
    assert words(" ".join(pieces)) == words(text)


def test_clause_packing_is_greedy() -> None:
    text = ", ".join(f"clause number {i}" for i in range(40)) + "."
    pieces = split_sentences(text, max_chars=60)
    assert all(len(p) <= 60 for p in pieces)
    for piece, following in itertools.pairwise(pieces):
        next_clause = following.split(", ")[0] + ("," if ", " in following else "")
        assert len(piece) + 1 + len(next_clause) > 60  # the next clause would not have fitted


def test_long_sentence_without_commas_is_cut_at_spaces() -> None:
    rng = random.Random(7)
    vocab = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    text = " ".join(rng.choice(vocab) for _ in range(150)) + "."
    pieces = split_sentences(text, max_chars=80)
    assert len(pieces) > 1
    assert all(len(p) <= 80 for p in pieces)
    for piece, following in itertools.pairwise(pieces):
        assert len(piece) + 1 + len(following.split(" ")[0]) > 80  # greedy: the next word would not have fitted
    assert words(" ".join(pieces)) == words(text)


def test_overlong_clause_is_cut_at_spaces_but_short_clauses_stay_whole() -> None:
    long_clause = " ".join(["word"] * 60)  # 299 characters, no comma
    text = f"Short start, {long_clause}, short end."
    pieces = split_sentences(text, max_chars=100)
    assert all(len(p) <= 100 for p in pieces)
    assert pieces[0].startswith("Short start,")
    assert pieces[-1].endswith("short end.")
    assert words(" ".join(pieces)) == words(text)


def test_comma_inside_a_number_is_not_a_clause_break() -> None:
    text = " ".join(["we counted 1,000 sheep"] * 20) + "."
    pieces = split_sentences(text, max_chars=50)
    assert all(len(p) <= 50 for p in pieces)
    assert not any(p.endswith("1,") or p.startswith("000") for p in pieces)


def test_single_word_longer_than_max_chars_is_kept_whole() -> None:
    giant = "x" * 300
    pieces = split_sentences(f"Before it {giant} after it.", max_chars=50)
    assert giant in pieces
    assert all(len(p) <= 50 for p in pieces if p != giant)
    assert words(" ".join(pieces)) == ["Before", "it", giant, "after", "it."]


def test_sentence_of_exactly_max_chars_is_not_cut() -> None:
    text = ("a" * 49 + " ") * 4 + "b" * 49 + "."  # 250 characters
    assert len(text) == 250
    assert split_sentences(text, max_chars=250) == [text]
    assert len(split_sentences(text, max_chars=249)) == 2


# -- invariant: every word lands in exactly one piece, in order; pieces respect max_chars ---------------------------

_VOCAB = [
    "the", "a", "cat", "sat", "on", "mat", "Hello", "world", "quickly", "however",
    "Dr.", "Mr.", "Mrs.", "Jan.", "No.", "Fig.", "e.g.", "i.e.", "U.S.", "J.", "K.", "etc.", "Inc.", "approx.",
    "3.50", "1,000", "2.0", "9:30", "42", "$5", "100%",
    "end.", "what?", "wow!", "so…", "well...", "stop!?", '"quoted."', "'single.'", "(aside)", "(aside.)",
    "clause,", "semi;", "colon:", "dash—", "Élan", "naïve", "Привет.", "日本語", "ok,", "fine.",
]  # fmt: skip
_SEPARATORS = [" "] * 12 + ["  ", "\t", "\n", "\n\n", "\r\n", " \n \n "]


def _random_text(rng: random.Random) -> str:
    n = rng.randint(1, 120)
    parts: list[str] = []
    for _ in range(n):
        word = rng.choice(_VOCAB)
        if rng.random() < 0.02:
            # a word longer than some max_chars, in a script written with spaces: never cut, whatever its letters
            word = rng.choice(["y", "é", "ж", "λ"]) * rng.randint(40, 320)
        parts.append(word)
        parts.append(rng.choice(_SEPARATORS))
    return rng.choice(["", " ", "\n"]) + "".join(parts)


@pytest.mark.parametrize("seed", range(8))
def test_no_word_is_ever_dropped_and_pieces_fit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        text = _random_text(rng)
        max_chars = rng.choice([40, 60, 100, 250, rng.randint(40, 400)])
        pieces = split_sentences(text, max_chars=max_chars)
        assert words(" ".join(pieces)) == words(text), (text, max_chars)
        for piece in pieces:
            assert piece == piece.strip() and piece
            assert "\n" not in piece and "\t" not in piece and "  " not in piece
            assert is_speakable(piece)
            assert len(piece) <= max_chars or len(piece.split()) == 1, (piece, max_chars)


def test_a_long_run_of_stops_that_ends_no_sentence_is_read_once() -> None:
    """A run of full stops with no space after it ("x....x") was tried as a sentence's end again from each of its
    stops, in time that grew with the square of its length: a WebSocket message of thirty runs of 4000 (each one word,
    within the longest input) held the server's event loop for 12 s, and every other session's audio with it."""
    text = ("x" + "." * 4000 + "x ") * 30
    started = time.process_time()  # this process's CPU time: another process busy on the machine adds none
    assert split_sentences(text) == text.split()  # each word longer than a piece may be: a piece of its own
    units, rest = complete_units(text, 250, "sentence")
    assert [*units, rest.strip()] == text.split()
    assert time.process_time() - started < 3.0  # seconds of CPU: 18 before, milliseconds now


@pytest.mark.parametrize(
    "text",
    [
        "**Dr. Smith** is here.",
        "Ask *Dr. Smith* now.",
        "We met _Dr. Who_ there.",
        "The **U.S. Army** won.",
        "It was ~~Mr. Brown~~ Mr. Green.",
        "¿Ph.D. Smith?",
    ],
)
def test_a_word_that_ends_no_sentence_ends_none_inside_markdown_marks(text: str) -> None:
    """Markdown's marks before a title or an abbreviation ("**Dr.", "~~Mr.", what an LLM writes) hid it: its full stop
    was taken for its sentence's end and the sentence cut in two ("**Dr." | "Smith** is here."), its prosody ruined,
    where word timestamps, which strip the marks, read the same word as an abbreviation. Streamed, it is one too."""
    assert split_sentences(text) == [text]
    assert [unit.strip() for unit in streamed([word + " " for word in text.split(" ")])] == [text]


def test_text_of_many_terminators_is_split_in_time_that_grows_with_its_length() -> None:
    """Whether a terminator ends its sentence was told from a copy of all the text after it, taken again at each: a
    WebSocket message of 128 KiB of short sentences ("Dr. 5. ...", tens of thousands of terminators), split again as
    it came, held the event loop over a second, every other session's audio with it, and four times that (a larger
    SPEECH_WS_MAX_MESSAGE_BYTES) twenty. The next word is looked for where the terminator ends instead."""
    text = "Dr. 5. " * (512 * 1024 // len("Dr. 5. "))
    started = time.process_time()  # this process's CPU time: another process busy on the machine adds none
    units, rest = complete_units(text, 250, "sentence")
    assert len(units) == text.count("5.") - 1 and rest.strip() == "Dr. 5."  # the last waits for what comes next
    assert len(split_sentences(text)) == text.count("5.")
    assert time.process_time() - started < 8.0  # seconds of CPU: 20 or more before, under one now


def test_default_max_chars_is_250() -> None:
    text = " ".join(["word"] * 100)  # 499 characters
    pieces = split_sentences(text)
    assert all(len(p) <= 250 for p in pieces)
    assert len(pieces) == 2


def test_cjk_sentences_are_split() -> None:
    assert split_sentences("你好。世界真大！你是谁？") == ["你好。", "世界真大！", "你是谁？"]


def test_long_cjk_sentences_are_cut_to_max_chars_without_losing_text() -> None:
    with_commas = "你好，" * 100
    pieces = split_sentences(with_commas, max_chars=50)
    assert all(len(p) <= 50 for p in pieces) and "".join(pieces) == with_commas
    unbroken = "你好" * 100
    pieces = split_sentences(unbroken, max_chars=50)
    assert all(len(p) <= 50 for p in pieces) and "".join(pieces) == unbroken


# -- a word longer than max_chars: kept whole whatever its script; only scripts written without spaces are cut -------

# Real words past 40 characters, in spaced scripts: the same word with and without letters outside ASCII
_LONG_WORDS = [
    pytest.param("Rindfleischetikettierungsueberwachungsaufgabenuebertragungsgesetz", id="ascii"),
    pytest.param("Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft", id="german"),
    pytest.param("megszentségteleníthetetlenségeskedéseitekért", id="hungarian"),
    pytest.param("тетрагидропиранилциклопентилтетрагидропиридопиридиновые", id="russian"),
    pytest.param(
        "Λοπαδοτεμαχοσελαχογαλεοκρανιολειψανοδριμυποτριμματοσιλφιοκαραβομελιτοκατακεχυμενοκιχλεπικοσσυφοφαττοπεριστερ"
        "αλεκτρυονοπτοκεφαλλιοκιγκλοπελειολαγῳοσιραιοβαφητραγανοπτερύγων",
        id="greek",
    ),
    pytest.param("https://example.org/wiki/Café_de_Flore_(Saint-Germain-des-Prés)", id="url"),
]
# Text of scripts written without spaces between words, past 40 characters
_UNSPACED = [
    pytest.param("中华人民共和国国家标准化管理委员会" * 7, id="chinese"),
    pytest.param("東京特許許可局のカタカナとひらがなテキスト" * 6, id="japanese"),
    pytest.param("ภาษาไทยเขียนติดกันโดยไม่เว้นวรรคระหว่างคำ" * 4, id="thai"),
    pytest.param("ພາສາລາວຂຽນຕິດກັນໂດຍບໍ່ມີຍະຫວ່າງ" * 4, id="lao"),
    pytest.param("ភាសាខ្មែរសរសេរជាប់គ្នាដោយគ្មានដកឃ្លា" * 4, id="khmer"),
    pytest.param("မြန်မာဘာသာစကားကိုစကားလုံးများကြားနေရာမထားဘဲရေးသည်" * 3, id="myanmar"),
]


def in_messages_of_seven(text: str) -> list[str]:
    """`text` as a client streams it, a few characters per message."""
    return [text[start : start + 7] for start in range(0, len(text), 7)]


@pytest.mark.parametrize("word", _LONG_WORDS)
def test_a_word_longer_than_max_chars_is_kept_whole_whatever_its_script(word: str) -> None:
    """A long German compound, a Hungarian, Russian or Greek word, a URL with one "é": each was cut every
    `max_chars` characters, mid-word, for holding a letter outside ASCII, where the same length of ASCII is kept
    whole. Requested or streamed, it is one piece: spoken whole, as an ASCII word is."""
    assert len(word) > 40
    text = f"Before it {word} after it."
    for pieces in (split_sentences(text, max_chars=40), streamed(in_messages_of_seven(text), max_chars=40)):
        assert word in pieces, pieces
        assert all(len(p) <= 40 for p in pieces if p != word)
        assert words(" ".join(pieces)) == words(text)


# Unicode's Logical_Order_Exception: vowels of Thai, Lao, New Tai Lue and Tai Viet written before their consonant
WRITTEN_BEFORE = frozenset("เแโใไເແໂໃໄᦵᦶᦷᦺꪵꪶꪹꪻꪼ")


@pytest.mark.parametrize("text", _UNSPACED)
def test_text_of_a_script_written_without_spaces_is_cut_at_max_chars(text: str) -> None:
    """Chinese, Japanese, Thai, Lao, Khmer, Myanmar: no space to wait for, so cut at the limit, requested or
    streamed; never before a combining mark, which is its letter's (a Thai, Lao, Khmer or Myanmar vowel sign alone
    opened the next piece), nor after a virama, which stacks the next letter under its own, nor after a Thai or Lao
    vowel written before the consonant it follows in speech (เ in เมือง), which a cut there left alone."""
    assert len(text) > 100 and " " not in text
    for limit in range(40, 48):  # the cut falls on other letters at each
        for pieces in (split_sentences(text, limit), streamed(in_messages_of_seven(text), max_chars=limit)):
            assert "".join(pieces) == text
            assert all(len(p) <= limit for p in pieces), [len(p) for p in pieces]
            assert not any(unicodedata.category(p[0]).startswith("M") for p in pieces), pieces
            assert not any(unicodedata.combining(p[-1]) == 9 for p in pieces[:-1]), pieces  # 9: a virama's class
            assert not any(p[-1] in WRITTEN_BEFORE for p in pieces[:-1]), pieces


def test_a_spaced_word_inside_unspaced_text_is_kept_whole_and_the_rest_cut_around_it() -> None:
    """Chinese written with a Latin word inside, no space around it: cut at the limit beside a Chinese character,
    never inside the Latin word (which was cut where the run held a Chinese character, as pure ASCII is not)."""
    word = "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft"
    ascii_word = "x" * 60
    text = "他说" + word + "这个词很长" * 12 + ascii_word + "也是" * 10
    for pieces in (split_sentences(text, max_chars=40), streamed(in_messages_of_seven(text), max_chars=40)):
        assert "".join(pieces) == text
        assert sum(word in p for p in pieces) == 1 and sum(ascii_word in p for p in pieces) == 1, pieces
        assert all(len(p) <= 40 for p in pieces if word not in p and ascii_word not in p), pieces


# -- is_speakable --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", False),
        ("   \n\t", False),
        ("\x00\x01\x02", False),
        ("\x7f\u200b", False),  # DEL and a zero-width space
        ("...", False),
        ("!?,;:-—–()[]\"'", False),
        ("***  ###", False),
        ("$", True),
        ("€", True),
        ("¥100", True),
        ("7", True),
        ("½", True),  # a numeric character (category No)
        ("a", True),
        ("...ok", True),
        ("Привет", True),
        ("日本語", True),
        ("مرحبا", True),
        ("\x00a\x01", True),
    ],
)
def test_is_speakable(text: str, expected: bool) -> None:
    assert is_speakable(text) is expected
