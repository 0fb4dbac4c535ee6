"""Text normalisation before the engine: any `input` either becomes text the engine can read, or is refused up front
(a 400 on `input` naming what cannot be read), before any audio is produced. A request never fails half-way through
its audio because of a later sentence.

SSML is refused: a document whose first tag is `<speak>` would otherwise be read out tag by tag (or, with its tags
stripped, lose its breaks and prosody without a word); the API speaks plain text.

What every engine gets: valid Unicode only; control characters become spaces; invisible format characters
(zero-width joiners, direction marks, byte-order marks) and private-use or unassigned code points are dropped, as
emoji and other pictographs are left for the engine to skip. What depends on the voice is in `ReadingRules`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from app.text.sentences import is_speakable

_KEPT_CONTROLS = frozenset("\t\n\r")
# what the reader drops before a text's first word: spaces, controls, invisible format characters, private-use and
# unassigned code points, and marks with no letter to sit on
_UNREAD_LEADING = frozenset(("Cf", "Cc", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Mc", "Me"))
# how far into a text a prolog with invisible characters in it is looked through: a bound on the work, since a
# WebSocket utterance is looked at again as each message adds to it (a real prolog is a line or two)
_SSML_HEAD_CHARS = 1024
_NAMED_LATIN = ("LATIN ", "MODIFIER LETTER ")
# an SSML document: its root element first, after its prolog where it has one (an XML declaration, a document type
# with or without its internal subset, comments) and spaces; each part ends at its first close, so that no text makes
# the match backtrack
_SSML_ROOT = re.compile(
    r"(?:\s|<\?xml\b(?:[^?]|\?(?!>))*\?>|<!DOCTYPE\b(?:[^>\[]|\[[^\]]*\])*>|<!--(?:[^-]|-(?!->))*-->)*<speak[\s/>]",
    re.IGNORECASE,
)
# what a text refused as SSML is told, after what it names ("'input'", "This utterance's text")
IS_SSML = "is SSML markup (it begins with <speak>); this API speaks plain text"
ZERO_WIDTH_SPACE = "\u200b"  # a word break with no width: read as the space it marks
_MICRO_SIGN = "\u00b5"  # `µg`, `µm`: read as "micro"; its compatibility form is Greek `μ`, a letter (`greek_symbol`)


@dataclass(frozen=True, slots=True)
class ReadingRules:
    """What an engine's voice can read.

    `latin_only`: letters of any other script (Chinese, Cyrillic, Arabic...) are refused, never skipped in silence
    (digits of any script are no letters: the engine reads them)."""

    latin_only: bool = False


class UnreadableText(ValueError):
    """The text cannot be read; the message says what and where, safely quoted."""


def is_ssml(text: str) -> bool:
    """The text is an SSML document: its root element, `<speak>`, first (a tag inside the text is text)."""
    start = next((i for i, ch in enumerate(text) if unicodedata.category(ch) not in _UNREAD_LEADING), len(text))
    if not text.startswith("<", start):  # text, as almost every one is
        return False
    if _SSML_ROOT.match(text, start) is not None:
        return True
    # once more without what the reader drops (invisible format characters and the like) between the prolog's parts
    head = text[start : start + _SSML_HEAD_CHARS]
    read = "".join(ch for ch in head if ch.isspace() or unicodedata.category(ch) not in _UNREAD_LEADING)
    return _SSML_ROOT.match(read) is not None


def normalize_text(text: str, rules: ReadingRules | None = None, continues: bool = False) -> str:
    """`continues`: the text is a later piece of a longer one (a WebSocket utterance's next sentence), whose start
    alone says whether it is SSML."""
    rules = rules or ReadingRules()
    if not continues and is_ssml(text):
        raise UnreadableText(f"'input' {IS_SSML}: send the words without the markup.")
    out: list[str] = []
    for index, ch in enumerate(unicodedata.normalize("NFC", _valid_unicode(text))):
        category = unicodedata.category(ch)
        if category == "Cc":
            out.append(ch if ch in _KEPT_CONTROLS else " ")
        elif category in ("Zl", "Zp"):
            out.append("\n")
        elif ch == ZERO_WIDTH_SPACE:
            out.append(" ")
        elif category in ("Cf", "Co", "Cn"):
            continue
        elif rules.latin_only:
            out.append(_latin_reading(ch, category, text, index))
        else:
            out.append(ch)
    normalized = "".join(out)
    if rules.latin_only:
        _refuse_other_scripts(normalized)
    if not is_speakable(normalized):
        raise UnreadableText("'input' contains nothing that can be spoken.")
    return normalized


def _valid_unicode(text: str) -> str:
    for index, ch in enumerate(text):
        if unicodedata.category(ch) == "Cs":
            raise UnreadableText(f"'input' is not valid Unicode: a lone surrogate (U+{ord(ch):04X}) at {index}.")
    return text


def _latin_reading(ch: str, category: str, text: str, index: int) -> str:
    if category[0] == "M":
        return ""  # a combining mark left over after composition (stacked diacritics): not pronounceable in English
    return ch


@dataclass(frozen=True, slots=True)
class ForeignWord:
    """Text in a script other than Latin: the words around it (for a message) and its first such letter."""

    fragment: str
    letter: str

    def describe(self) -> str:
        return f"{self.fragment!r} (U+{ord(self.letter):04X}, {script_hint(self.letter)})"


def ascii_form(ch: str) -> str | None:
    """A letter's or number's compatibility form where it is ASCII letters and digits (full-width `Ｆ` F, `²` 2, `①`
    1, `Ⅻ` XII, `½` 1/2: the fraction slash as `/`); None for anything else."""
    if unicodedata.category(ch)[0] not in "LN":
        return None
    form = unicodedata.normalize("NFKC", ch).replace("\u2044", "/")
    return form if form.isascii() and form.replace("/", "").isalnum() else None


def is_latin_letter(ch: str) -> bool:
    """A letter of the Latin script (`ŀ` too, whose compatibility form adds a middle dot; the micro sign), or one of
    its compatibility forms (full-width `Ｆ`, mathematical `𝐀`) that Unicode's decomposition makes Latin letters."""
    if ch == _MICRO_SIGN or unicodedata.name(ch, "").startswith(_NAMED_LATIN):
        return True
    return all(unicodedata.name(c, "").startswith(_NAMED_LATIN) for c in unicodedata.normalize("NFKC", ch))


def _foreign(ch: str) -> bool:
    """A letter of another script, or a number the voice cannot read: of another script (`௰`, `〇`), with no ASCII
    form. Decimal digits of every script are read (the engine's reader makes them ASCII), and so are numbers whose
    compatibility form is ASCII (`²`, `½`, `①`, `Ⅻ`)."""
    category = unicodedata.category(ch)
    if category[0] == "L":
        return not is_latin_letter(ch)
    return category in ("Nl", "No") and ascii_form(ch) is None


def is_greek_letter(ch: str) -> bool:
    return unicodedata.name(ch, "").startswith("GREEK ") and unicodedata.category(ch)[0] == "L"


def greek_symbol(word: str, index: int) -> bool:
    """`word[index]` is a Greek letter standing as a symbol (π, Δt, μg, β in "β-blockers"): none beside it, as a
    Greek word would have; or one of two or three written into a Latin term ("ΔΔCt"), a Latin letter right beside
    them and no more Greek letters."""
    if not is_greek_letter(word[index]):
        return False
    start = index
    while start > max(0, index - 3) and is_greek_letter(word[start - 1]):
        start -= 1
    end = index + 1
    while end < min(len(word), index + 4) and is_greek_letter(word[end]):
        end += 1
    run, before, after = word[start:end], word[start - 1 : start], word[end : end + 1]
    if len(run) == 1:
        return True
    if len(run) > 3 or any(is_greek_letter(ch) for ch in before + after):  # a run past the look: a word
        return False
    return any(ch.isalpha() and is_latin_letter(ch) for ch in before + after)


def first_non_latin(text: str) -> ForeignWord | None:
    """The first word of `text` with a letter outside the Latin script, or a number of another script, if any;
    symbols do not count, nor does a Greek letter standing as one (`greek_symbol`: read by its name)."""
    for match in re.finditer(r"[^\W\d_]+", text):
        word = match.group(0)
        foreign = [ch for i, ch in enumerate(word) if _foreign(ch) and not greek_symbol(word, i)]
        if foreign:
            start = text.rfind(" ", 0, match.start()) + 1
            end = text.find(" ", match.end())
            return ForeignWord(text[start : end if end != -1 else len(text)].strip()[:40], foreign[0])
    return None


def _refuse_other_scripts(text: str) -> None:
    if (foreign := first_non_latin(text)) is not None:
        raise UnreadableText(
            f"This voice reads English (Latin script) only and cannot read {foreign.describe()}. "
            "Send that text to a model that speaks it."
        )


def script_hint(ch: str) -> str:
    name = unicodedata.name(ch, "")
    script = name.split(" ")[0] if name else "unknown"
    return script if len(script) <= 3 else script.capitalize()
