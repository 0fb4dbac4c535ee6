"""Sentence splitting for streaming synthesis.

Speech starts sooner when the first sentence is synthesized on its own, so text is cut into sentences. A wrong cut
in the middle of a sentence ("Dr. | Smith", "Jan. | 5th", "3. | 50") ruins its prosody, while a missed cut only
delays audio a little, so every doubtful case is left joined. Sentences longer than `max_chars` are cut again at
clause punctuation (then at spaces), so no single piece keeps the listener waiting or overruns an engine's limit.
Every word of the input lands in exactly one piece: nothing is dropped.

A word is never cut: one longer than `max_chars` is a piece of its own, whatever its script (a German compound, a
Greek word, a URL), and the transports bound it as they bound any text (a request's `input`, a WebSocket's text that
waits). Only text of the scripts written without spaces between words (Chinese, Japanese, Thai...) has no word end
to wait for: a run of it is cut at the limit, beside one of its characters.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

from app.text.words import is_abbreviation, written_words

# A period after these never ends a sentence ("Dr. Smith", "approx. 5", "Fig. 3").
_NEVER_FINAL = frozenset(
    """mr mrs ms mx dr prof sr jr st mt rev fr gen col capt cpt lt sgt maj gov sen rep hon pres supt insp
    vs approx ca cf al viz est e.g i.e a.k.a""".split()
)
# These end a sentence only when a capitalised word follows ("Jan. 5" and "No. 7" go on, "Inc. The board" ends).
_FINAL_BEFORE_CAPITAL = frozenset(
    """no nos fig figs vol vols ch chap art sec pp p para eq ed eds op v
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun
    etc inc ltd co corp bros llc plc dept univ assn ave blvd rd hwy""".split()
)

# Western terminators need a space (or the end) after them; CJK ones are written without spaces. A terminator begins
# where its run of stops does, and its runs are taken whole: a run with no space after it ("x....x") is tried once,
# where trying it again from each of its stops took time that grew with the square of its length
_TERMINATOR = re.compile(r"(?<![.!?…])[.!?…]++[\"'”’)\]»]*+(?=\s|$)|[。！？]+[”’」』）]*")
_CLAUSE_BREAK = re.compile(r"(?<=[,;:—–])\s+|(?<=[，、；：])")
_SPACE = re.compile(r"\s+")
# where the next word begins: looked for from a terminator on, never by copying the text after it (a message of
# 128 KiB holds tens of thousands of terminators, and a copy of the rest at each took time that grew with its square)
_NEXT_WORD = re.compile(r"\S")
# Symbols that Unicode files under punctuation but a voice reads aloud ("&" is "and", "%" "percent"), as it does
# inside a sentence ("Tom & Jerry"): standing alone they go with a neighbour, never dropped as punctuation is
_READ_SYMBOLS = frozenset("#%&/@§¶‰‱")
# The scripts written without spaces between words, as `_script` names them ("CJK" unified ideographs; "IDEOGRAPHIC"
# marks, 々 and 〇; the prolonged sound mark ー, "KATAKANA-HIRAGANA"): a run of their text may be cut between any two
# of its characters, where a word of any other script is kept whole
_UNSPACED_SCRIPTS = frozenset(
    """CJK IDEOGRAPHIC HIRAGANA KATAKANA KATAKANA-HIRAGANA BOPOMOFO YI THAI LAO KHMER MYANMAR TIBETAN JAVANESE
    BALINESE""".split()
)
_VIRAMA = 9  # the canonical combining class of a virama (Khmer's coeng, Myanmar's): it ties its letter to the next
# Unicode's Logical_Order_Exception: vowels of Thai, Lao, New Tai Lue and Tai Viet written before the consonant they
# follow in speech (เ in เมือง), so they go with the letter after them, not the one before
_WRITTEN_BEFORE = frozenset(
    map(chr, [*range(0x0E40, 0x0E45), *range(0x0EC0, 0x0EC5), *range(0x19B5, 0x19B8), 0x19BA, *range(0xAAB5, 0xAAB7)])
) | frozenset(map(chr, [0xAAB9, 0xAABB, 0xAABC]))


def is_speakable(text: str) -> bool:
    """True when the text holds something a voice can say: a letter, a digit or a currency sign."""
    return any(unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Sc" for ch in text)


# What opens a word before its letters: quotes, brackets, Spanish's inverted marks, and Markdown's emphasis, code and
# strike marks ("**Dr. Smith**", "_Dr. Who_"), which word timestamps strip too (`app.text.words.written_words`)
_OPENING = "\"'“‘([«¿¡*_~`"


def _word_before(text: str, end: int) -> str:
    """The word that ends at `end`, as written, without what opens it (`_OPENING`: "**Dr" is "Dr"). After whitespace
    of any kind: a word at a line's start ("\nDr.") is "Dr", not "\nDr"."""
    start = next((i + 1 for i in range(end - 1, -1, -1) if text[i].isspace()), 0)
    return text[start:end].lstrip(_OPENING)


def _ends_sentence(text: str, match: re.Match[str], begun: int, whole: bool) -> bool:
    """Whether the terminator `match` ends the sentence that began at `begun`. `whole`: False for text still arriving,
    where a decision that needs what comes next waits for it (no end yet): a cut is never undone."""
    following = _NEXT_WORD.search(text, match.end())
    if following is None:
        return True
    nxt = following.group()
    if nxt.islower():
        return False  # "... and so on. and then" / "wait... what"
    punct = match.group(0)
    if not punct.startswith(".") or punct.startswith(".."):
        return True  # "!", "?", "…", "..." followed by a non-lowercase word
    written = _word_before(text, match.start())
    word = written.lower()
    if word in _NEVER_FINAL:
        return False
    if word in _FINAL_BEFORE_CAPITAL:
        return nxt.isupper()
    if len(word) == 1 and word.isalpha():
        # An initial, of the name after it and in its script: "J. K. Rowling", "А. С. Пушкин". A letter of another
        # script than the next word's ends its sentence ("ﷺ. World"): this cut is no doubtful one, as a voice that
        # cannot read the letter refuses the sentence holding it, and joined, the next sentence would go with it.
        # So does one character written for a whole word or phrase (ﷺ, ﷲ: more than a digraph's two letters in its
        # compatibility form), which is never an initial, even before a number ("ﷺ. 5 apples").
        if len(unicodedata.normalize("NFKC", word)) > 2:
            return True
        # Before a number or a symbol a letter may abbreviate a word of its sentence ("born c. 1900", Russian
        # "см. с. 25"): left joined where its sentence's letters beside it are of its script, the first after it (up
        # to the next terminator: "Born c. 1900. Привет." is one English sentence), else the last before it in its
        # sentence (streamed, still there: text is cut off at a sentence's end only). One of another script ("Hello.
        # Ж. 5 apples", "Hello. Ж. 5.") abbreviates nothing there; joined, a voice that cannot read it would refuse
        # those words with it. A letter with none beside it in its sentence ("Ж. 5.", and so "С. 25." alone) is a
        # sentence of its own: cut there, a voice that reads it only pauses.
        near = _letter_after(text, match.end(), whole)
        if near == _UNDECIDED:
            return False  # streamed: the next letter or terminator may still come
        if near is None:
            near = _letter_before(text, begun, match.start() - 1)
        return near is None or _script(word) != _script(near)
    # An abbreviation's full stop is its own ("U.S. Army", "Lt.Col. Smith"), as its word timestamp has it: an end of its
    # sentence too only maybe ("in the U.S. The"), left joined. An address's ("x.ai.") is the sentence's.
    return not is_abbreviation(written)


_UNDECIDED = ""  # streamed text ended before a letter, a terminator or a line break: what decides is still to come


def _letter_after(text: str, start: int, whole: bool) -> str | None:
    """The first letter from `start` to its sentence's next terminator or its line's end, if any (None), or
    `_UNDECIDED` where streamed text (not `whole`) ends before either. The scan stops at the letter: the scans after a
    line's single letters read each stretch between two letters once, not the rest of the line each time."""
    at = start
    while at < len(text):
        if text[at].isalpha():
            return text[at]
        if text[at] == "\n":
            return None
        if (terminator := _TERMINATOR.match(text, at)) is not None:
            # streamed, "5." at the text's end may still become "5.5"
            return None if whole or terminator.end() < len(text) else _UNDECIDED
        at += 1
    return None if whole else _UNDECIDED


def _letter_before(text: str, begun: int, end: int) -> str | None:
    """The last letter before `end` in its sentence (from `begun`) and on its line, if any."""
    for at in range(end - 1, begun - 1, -1):
        if text[at].isalpha():
            return text[at]
        if text[at] == "\n":
            return None
    return None


def _script(letter: str) -> str:
    """The script a letter is written in, as the first word of its name ("LATIN", "CYRILLIC", "ARABIC"), read in its
    compatibility form: full-width "Ｊ" and mathematical "𝐉" are Latin."""
    return unicodedata.name(unicodedata.normalize("NFKC", letter)[:1] or letter, "").split(" ")[0]


def split_sentences(text: str, max_chars: int = 250) -> list[str]:
    """Cut text into speakable pieces of at most `max_chars` characters (a single word longer than that excepted,
    in a script written with spaces: it is a piece of its own, never cut)."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n|\r?\n", text):
        paragraph = _SPACE.sub(" ", paragraph).strip()
        cut = 0
        for end in _sentence_ends(paragraph):
            pieces.extend(_split_long(paragraph[cut:end].strip(), max_chars))
            cut = end
        pieces.extend(_split_long(paragraph[cut:].strip(), max_chars))
    return with_silent_words_attached(pieces, max_chars)


def _sentence_ends(text: str, start: int = 0, end: int | None = None, *, whole: bool = True) -> Iterator[int]:
    """Where the sentences of `text[start:end]` end, each decided on all of `text`. `whole`: False for text still
    arriving, whose end may be no sentence's yet: a terminator's is one once the next word has begun (its first
    character tells "Dr. Smith" from "Done. Then")."""
    begun = start
    for match in _TERMINATOR.finditer(text, start, len(text) if end is None else end):
        if (whole or _NEXT_WORD.search(text, match.end())) and _ends_sentence(text, match, begun, whole):
            begun = match.end()
            yield begun


def with_silent_words_attached(pieces: list[str], max_chars: int) -> list[str]:
    """The speakable pieces. One with nothing to speak but a word as written ("😀.") joins the next speakable piece,
    or the one before it where only that fits in `max_chars` (the last: the one before it), over the limit rather
    than dropped, so that its word is still timed; punctuation alone ("...", "***") is dropped."""
    kept: list[str] = []
    waiting = ""  # silent words for the next speakable piece
    for piece in pieces:
        if is_speakable(piece):
            joined = f"{waiting} {piece}" if waiting else piece
            after_before = f"{kept[-1]} {waiting}" if waiting and kept else ""
            if len(joined) > max_chars and after_before and len(after_before) <= max_chars:
                kept[-1], joined = after_before, piece
            kept.append(joined)
            waiting = ""
        elif has_silent_words(piece):
            waiting = f"{waiting} {piece}" if waiting else piece
    if waiting and kept:
        kept[-1] = f"{kept[-1]} {waiting}"
    return kept


def has_silent_words(piece: str) -> bool:
    """Words as written that are no sentence to speak on their own ("😀.", "&"): words of the input all the same,
    unlike punctuation and marks ("...", "***")."""
    if is_speakable(piece):
        return False
    return any(
        ch in _READ_SYMBOLS or not unicodedata.category(ch).startswith("P")
        for word in written_words(piece)
        for ch in word
    )


def _split_long(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence] if sentence else []
    out: list[str] = []
    for clause in _pack(_CLAUSE_BREAK.split(sentence), max_chars):
        for piece in _pack(clause.split(" "), max_chars) if len(clause) > max_chars else [clause]:
            out.extend(_cut_run(piece, max_chars) if len(piece) > max_chars and " " not in piece else [piece])
    return out


def _cut_run(run: str, max_chars: int) -> list[str]:
    """A run without spaces longer than `max_chars`, cut at the last place within the limit where `_may_cut_before`
    allows, else at the first after it: a word of a spaced script, however long, stays whole (the Latin word in a
    Chinese sentence too), and a run of an unspaced script is cut at the limit."""
    # each character told once, not at each place: a WebSocket message may hold 128 KiB of one word
    unspaced = frozenset(ch for ch in set(run) if _script(ch) in _UNSPACED_SCRIPTS)
    if not unspaced:  # a word, however long
        return [run]
    pieces: list[str] = []
    start = 0
    while len(run) - start > max_chars:
        within = range(start + max_chars, start, -1)
        end = next((i for i in within if _may_cut_before(run, i, unspaced)), None)
        if end is None:
            after = range(start + max_chars + 1, len(run))
            end = next((i for i in after if _may_cut_before(run, i, unspaced)), len(run))
        pieces.append(run[start:end])
        start = end
    return [*pieces, run[start:]] if start < len(run) else pieces


def _may_cut_before(run: str, i: int, unspaced: frozenset[str]) -> bool:
    """Whether a run without spaces may be cut before `run[i]`: beside a character of an unspaced script (those of
    the run: `unspaced`), never inside a word of another, nor between a letter and what goes with it (a combining
    mark, as a Thai or Khmer vowel sign; the letter after a virama, which stacks under it; the letter after a vowel
    written before it, as Thai's เ)."""
    before, after = run[i - 1], run[i]
    if before not in unspaced and after not in unspaced:
        return False
    return (
        unicodedata.category(after)[0] != "M"
        and unicodedata.combining(before) != _VIRAMA
        and before not in _WRITTEN_BEFORE
    )


def _pack(parts: list[str], max_chars: int) -> list[str]:
    """Greedily join consecutive parts while the result fits in max_chars (with a space, unless a CJK clause mark
    ends the previous part)."""
    packed: list[str] = []
    current = ""
    for part in parts:
        joiner = "" if current.endswith(("，", "、", "；", "：")) else " "
        if current and len(current) + len(joiner) + len(part) > max_chars:
            packed.append(current)
            current = part
        else:
            current = f"{current}{joiner}{part}" if current else part
    if current:
        packed.append(current)
    return packed


def _before_silent_sentences(text: str, cut: int) -> int:
    """`cut` moved back over the sentences before it that have nothing to say."""
    starts = {0} | {i + 1 for i, ch in enumerate(text[:cut]) if ch == "\n"}
    starts |= set(_sentence_ends(text, 0, cut, whole=False))
    bounds = sorted(b for b in starts if b < cut)
    while bounds and not is_speakable(text[bounds[-1] : cut]):  # a line break or "..." between is no word either
        cut = bounds.pop()
    return cut


def complete_sentences(text: str, max_chars: int = 250, final: bool = False) -> tuple[list[str], str]:
    """For text that is still arriving: the pieces whose end is already certain, and the rest to keep waiting on.

    A sentence end is certain at a line break, or at a terminator once the next word has begun (its first character
    tells "Dr. Smith" from "Done. Then"). A tail longer than `max_chars` gives up every piece but its last, as
    `split_sentences` would cut it there anyway. `final` (the text paused long enough) also gives up a tail that ends
    like a sentence, unless it ends on a word that never ends one ("Dr.")."""
    cut = text.rfind("\n") + 1
    for end in _sentence_ends(text, cut, whole=False):
        cut = end
    tail = text[cut:].strip()
    if final and tail:
        ending = next((m for m in _TERMINATOR.finditer(tail) if m.end() == len(tail)), None)
        if ending is not None and _word_before(tail, ending.start()).lower() not in _NEVER_FINAL:
            cut = len(text)
    if not final:  # a last sentence with words but nothing to say waits to go with the next (split_sentences)
        cut = _before_silent_sentences(text, cut)
    elif not is_speakable(text[:cut]) and has_silent_words(text[:cut]):  # given up alone, such words would go as
        cut = 0  # nothing: they wait for the next (punctuation alone is given up, as no word)
    done, rest = split_sentences(text[:cut], max_chars), text[cut:]
    if len(rest.strip()) > max_chars and (pieces := split_sentences(rest, max_chars)):  # none: nothing to say yet
        # the last piece may still grow with the next words: it waits, as normalised text
        return done + pieces[:-1], pieces[-1] + (" " if rest[-1:].isspace() else "")
    return done, rest
