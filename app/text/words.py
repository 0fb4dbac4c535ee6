"""Word timestamps in the caller's own words.

An engine times the words it actually speaks, after its text reader expanded "$9.99" to "nine dollars and ninety
nine cents" or "Dr." to "doctor". Callers want the words they wrote (captions, read-along), so the spoken words are
matched back to the written ones: identical words pair up, and each run of written words the reader rewrote takes the
time of the spoken words that replaced it. Every written word gets a timing, in order; punctuation is not a word.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

# Stripped from both ends of a written word: quotes, brackets, dashes and sentence punctuation. A trailing full stop
# stays on an abbreviation with a full stop inside ("e.g.", "U.S.": `is_abbreviation`): there it is part of the word
# as written.
_EDGE_PUNCTUATION = "\"'“”‘’«»()[]{}<>,;:!?¿¡…—–-−"
_SIGNS = ("-", "−")  # a hyphen-minus or minus sign right before a number is its sign ("-5°C", "-$5", "-.5"), not a dash
_SIGNED = re.compile(r"[^\w\s]?\d")  # a number: a digit first, or after one sign of its own ("$5", ".5")
_KEY_DROP = re.compile(r"[\W_]+")
# Markdown's marks around a word ("**Install**", "`pip`", "*this*,", "~~struck~~"), the last with the sentence's
# punctuation after it. A strike's tildes are two or more: one before a word is part of it ("~5" about five,
# "~/.bashrc" a home directory's file). The run of marks is taken whole, never tried again in parts ("~~~~" as "~~" and
# "~~"): a long run that matched no way would otherwise be tried in exponentially many
_MARKS = r"(?:[*`]|~~+)++"
_MARKS_BEFORE = re.compile(rf"^([^\w\s*`~]*){_MARKS}(?=[^\s*`~])")
_MARKS_AFTER = re.compile(rf"(?<=[^\s*`~]){_MARKS}[^\w*`~]*$")
# Markdown's marks alone are punctuation, which a piece of text holding nothing else is dropped as
# (`app.text.sentences.has_silent_words`), never words: two or more as one word ("***" or "___" a rule, "```" or "~~~"
# a fence, "****" empty emphasis); a rule written with blanks between its marks ("* * *", "_ _ _", "** * **": three or
# more of one mark, wherever it stands, as "***" is); a heading's underline, a line of "=" alone (a line of "-" is
# dashes, punctuation already). A single mark ("2 * 3") may be an operator and stays a word; so does "===" inside a
# line ("a === b"), which a voice reads as "equals"
_MARK_RUN = re.compile(r"[*`_~]{2,}")
_SPACED_RULE = re.compile(r"(?<!\S)([*_])(?:[^\S\n]*\1){2,}(?=[.!?…]*(?!\S))")
_UNDERLINE = re.compile(r"^[^\S\n]*=+[^\S\n]*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class WordTiming:
    """When one word of the input, as the caller wrote it ("$9.99", "Dr."), is spoken: seconds from the start of
    the audio it belongs to (a chunk's own samples inside an engine; the whole utterance in a response)."""

    word: str
    start_s: float
    end_s: float

    def shifted(self, offset_s: float) -> WordTiming:
        return WordTiming(self.word, self.start_s + offset_s, self.end_s + offset_s)

    def as_dict(self) -> dict[str, object]:
        return {"word": self.word, "start_ms": round(self.start_s * 1000), "end_ms": round(self.end_s * 1000)}


@dataclass(frozen=True, slots=True)
class SpokenWord:
    """A word as an engine's text reader spoke it ("nine", "dollars"), timed in seconds."""

    text: str
    start_s: float
    end_s: float


def written_words(text: str) -> list[str]:
    """The words of `text` as written: whitespace-separated, without the punctuation and Markdown marks around
    them; Markdown's marks alone are none (`_MARK_RUN`, `_SPACED_RULE`, `_UNDERLINE`)."""
    words: list[str] = []
    for written in _SPACED_RULE.sub(" ", _UNDERLINE.sub(" ", text)).split():
        # outside the marks, punctuation is the sentence's ("`main.py`." is "main.py"); a mark alone ("2 * 3") stays
        token = _MARKS_BEFORE.sub(r"\1", _MARKS_AFTER.sub("", written))
        word = token.strip(_EDGE_PUNCTUATION)
        lead = token[: len(token) - len(token.lstrip(_EDGE_PUNCTUATION))]
        if lead.endswith(_SIGNS) and _SIGNED.match(word):
            word = lead[-1] + word
        if word.endswith("."):
            bare = word.rstrip(".")
            word = f"{bare}." if is_abbreviation(bare) else bare
        word = word.rstrip(_EDGE_PUNCTUATION) if word.startswith(_SIGNS) else word.strip(_EDGE_PUNCTUATION)
        if word and not _MARK_RUN.fullmatch(word):
            words.append(word)
    return words


def is_abbreviation(word: str) -> bool:
    """Whether `word`, written before a full stop ("U.S" of "U.S."), is an abbreviation with a full stop inside, whose
    last full stop is its own: part of the word as written, and no sure end of its sentence ("the U.S. Army",
    "Lt.Col. Smith"). Each of its parts is a single letter ("e.g", "U.S.A", "т.е") or a word cut short, capitalised
    ("Ph.D", "B.Sc", "Lt.Col", "Maj.Gen": four letters at most). A word of other parts has no full stop after its
    last part, and one there is its sentence's: an address or a file name ("example.com", "x.ai", "main.py",
    "Node.js"), a version ("3.11"). Where both readings fit, a lowercase part of two letters or more makes it an
    address ("x.ai", and so "op.cit"): a domain or a file's extension is far more common in what is read out than a
    Latin abbreviation written without its space ("op. cit."); short capitalised parts make it an abbreviation, as
    titles and degrees are written, though an address in capitals ("X.AI") then reads as one too."""
    parts = word.split(".")
    return len(parts) > 1 and all(
        part.isalpha() and (len(part) == 1 or (len(part) <= 4 and part[0].isupper())) for part in parts
    )


def _key(word: str) -> str:
    """What two spellings of one word share: "Hello," and "hello" match; "$9.99" and "9.99" match."""
    key = _KEY_DROP.sub("", word.casefold())
    return key or word


def align_words(written: Sequence[str], spoken: Sequence[SpokenWord]) -> list[WordTiming]:
    """Time every written word from the spoken words: the same words pair up in order; a run of written words that
    the reader rewrote (numbers, abbreviations, symbols) shares the time of the spoken words in its place."""
    if not written:
        return []
    # Punctuation standing alone ("well - maybe", "A – B") is no written word; the forced aligner, given the text as
    # written, times it as a word of its own, over the pause it marks. Left in, it stretched the word before it over
    # that pause (a spoken word with no written one), or pulled the first word back to it: left out, as the pause of
    # the punctuation after a word is (`words_from_pieces`), its neighbours keep their own times.
    spoken = [word for word in spoken if written_words(word.text)]
    if not spoken:
        return [WordTiming(word, 0.0, 0.0) for word in written]
    timings: list[WordTiming] = []
    matcher = difflib.SequenceMatcher(a=[_key(w) for w in written], b=[_key(s.text) for s in spoken], autojunk=False)
    for tag, w0, w1, s0, s1 in matcher.get_opcodes():
        words = written[w0:w1]
        if tag == "equal":
            timings.extend(WordTiming(w, s.start_s, s.end_s) for w, s in zip(words, spoken[s0:s1], strict=True))
        elif tag == "insert":  # spoken with no written word of its own (a reader's addition): the word before it
            if timings:
                last = timings[-1]
                timings[-1] = WordTiming(last.word, last.start_s, max(last.end_s, spoken[s1 - 1].end_s))
        elif tag == "delete":  # written but not spoken (e.g. a symbol the reader skips): an instant, in place
            at = timings[-1].end_s if timings else spoken[0].start_s
            timings.extend(WordTiming(w, at, at) for w in words)
        elif len(words) == s1 - s0:
            timings.extend(WordTiming(w, s.start_s, s.end_s) for w, s in zip(words, spoken[s0:s1], strict=True))
        else:
            timings.extend(_share(words, spoken[s0].start_s, spoken[s1 - 1].end_s))
    if matcher.get_opcodes()[0][0] == "insert" and len(timings):  # spoken words before the first written one
        first = timings[0]
        timings[0] = WordTiming(first.word, min(first.start_s, spoken[0].start_s), first.end_s)
    return timings


def _share(words: Sequence[str], start_s: float, end_s: float) -> list[WordTiming]:
    """Written words that became a different number of spoken words: the span, split by the words' lengths."""
    total = sum(len(w) for w in words)
    timings: list[WordTiming] = []
    at = start_s
    for word in words:
        end = at + (end_s - start_s) * len(word) / total
        timings.append(WordTiming(word, at, end))
        at = end
    return timings
