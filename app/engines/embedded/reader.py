"""hibari's text reader, reading all of what it is given, each word as the one the caller wrote.

- Words its lexicon lacks go to a small network that reads at most its first `maxlen` (24) letters and drops the rest
  without a word: "supercalifragilisticexpialidocious" lost its ending, a long hashtag or German compound its last
  syllables. `WholeWordReader` reads such a word in pieces of at most that many letters, each piece's phonemes after
  the other's, so that nothing accepted goes unspoken.
- Its number words stop at decillions (36 digits), but past a quadrillion (15 digits) a run is a code, a card or an
  account number: it is read digit by digit, the text timed against left as written, so that a word's timestamp
  names the number as written, not each digit.
- It reads ASCII digits only: digits of other scripts ("١٢٣", "１２３") are read as theirs, one for one, the text
  as written kept for the timestamps.
- It reads what it knows of Latin letters, digits and punctuation: their compatibility forms (full-width `ＦＵＬＬ`,
  `²`, `½`, `①`, `Ⅻ`) are read as what Unicode's compatibility decomposition makes them (`FULL`, `2`, `1/2`, `1`,
  `XII`), the text as written kept for the timestamps.
- It passes over signs it has no rule for: the minus sign (U+2212: "−5" was "five") is read as the hyphen-minus it
  reads as "minus"; `$`, `£` and `€` after their amount ("5$", "5 €": "five") as before it ("five dollars"), while
  `¢`, which it reads after its amount ("50¢": "fifty cents"), stays there; a currency sign it has no word for
  (`₿`, `₽`) by its Unicode name, after its amount ("five bitcoin").
- Its part-of-speech tagger takes a negative number for punctuation now and then ("Value -50 now"), which it then
  reads as punctuation (silent): a number is always read as one.
- It spells a scale written short after an amount ("$2.5bn": "two five B N", its point and its sign lost): `mn`,
  `bn` and `tn` are read as the words it reads with an amount ("two point five billion dollars").
- It reads every `#` as "hashtag", the marks of a Markdown heading an LLM writes too ("# Heading": "hashtag
  heading"): the `#`s that head a line before a space are markup, not read; so are a quote's `>`s ("greater than"),
  a footnote's "[^1]" ("to the power of one"), a strike's `~~` ("about about") and an address's angle brackets.
- It reads Greek letters as nothing or stray letters: one standing as a symbol ("π", "Δt", "β-blockers", the two of
  "ΔΔCt") is read by its name, Greek mu before a unit ("5 μg") as "micro". Micro before a unit it has no micro for
  ("5 µs": "five micro s", "10 μL") is read in words ("five microseconds").
- It reads "!=" as "equals" (the opposite), ">=" as "greater than equals", "->" as "greater than", and "≠", "≥",
  "≤", "≈", "∞", "⇒", "√", "∈", "∉" as nothing: each is read as its words ("not equal to", "infinity"...).
- It reads "$9.99/month" without its "per", and "Tue, Dec 2" as "two, December 2nd": both are read as said.
- It drops a decimal's last zeros ("Python 3.10": "three point one", "OAuth 2.0": "two"): they are read.
- It spells "JSON", "YAML" and a constant's name ("MAX_RETRIES": "max R E T R I E S"), reads "C#" "C hashtag", a
  range of times without its "to" ("9am-5pm") and an IP address without its dots: each is read as people say it.
- It reads a `#` on its own, a phone's key ("Press # to continue"), as "hashtag": it is read "pound", or "hash"
  where the voice is British.
- It reads "24/7" as a number over another ("twenty-four slash seven"): it is read as said, "twenty-four seven".
  A rating ("Rated 5/5", "4.5/5 stars") it read as a date ("May fifth") or as numbers run together: it is read "out
  of" its scale.
- It reads a time written with a point ("10.30pm", "at 10.30 tomorrow") as a decimal ("ten point three"), an ISO
  8601 time ("2024-12-02T10:30:00Z") with its T, its zero seconds and its Z, and keys pressed together ("Ctrl+C")
  with their plus signs, "Ctrl" and "Cmd" spelled or misread: each is read as said ("ten thirty", "December 2nd,
  2024 at ten thirty UTC", "control C").
- It reads a version of three dotted numbers as three numbers, its points lost ("3.11.2": "three eleven two"): it
  is read with them, "three point eleven point two".
- It reads the area code of a phone number written "(555) 123-4567" as an amount ("five hundred fifty-five"), one
  written "555-123-4567" right before a full stop as amounts, "555.123.4567" without its groups' pauses, and
  "1-800-555-0199" as amounts that lose a zero: each is read digit by digit in its groups, as hibari reads
  "555-123-4567" inside a sentence.
- It reads a web or e-mail address without its dots ("example.com/docs": "example com docs", "jane.doe@example.com":
  "jane doe at example com"), so that a listener cannot type it back: its dots, slashes, hyphens and underscores are
  read as said ("example dot com slash docs"), "http(s)://" left unsaid as people leave it, "www" and a two-letter
  country domain spelled ("W W W", "UK").
- It reads a file's path with some of its marks lost and "/etc" as "etcetera" ("/etc/hosts": "etcetera hosts",
  "~/.bashrc": "about slash bashrc"): its marks are read as words, as an address's are, and "etc" spelled.
- It looks up every stretch of a run of pieces written together ("a-b-c", "a/b", "camelCase") as a compound it may
  know, in time that grows with the cube of the run's length: 2 000 characters of "a-a-a-..." took hours. A run is
  read in stretches of at most `MAX_JOINED_PIECES` pieces, cut after a joiner (`joined_runs_cut`).
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections.abc import Callable, Container
from typing import Any

from app.text.normalize import ascii_form, greek_symbol

MAX_NUMBER_DIGITS = 15
# hibari looks up every stretch of pieces written together ("well-known", "a/b", "a+b") as a compound it may know: its
# time grows with the cube of the run's length. Its lexicon's compounds are a few pieces long ("state-of-the-art": 7).
MAX_JOINED_PIECES = 24
_WRITTEN_TOGETHER = re.compile(rf"\S{{{MAX_JOINED_PIECES},}}")  # no fewer characters than pieces
_DIGIT_RUN = re.compile(r"[0-9][0-9,]*")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2796": "-"})  # MINUS SIGN, HEAVY MINUS SIGN
_AMOUNT = r"\d(?:[\d,]*\d)?(?:\.\d+)?"
# a mark right after an amount, unless it begins the next one ("2 $20 bills": the $ is the twenty's) or the amount
# may be the end of a longer one ("1 000 €")
_AMOUNT_THEN_MARK = re.compile(rf"(?<![\w.])(?<!\d )({_AMOUNT}) ?([^\w\s])(?! ?\d)")
_MARK_THEN_AMOUNT = re.compile(rf"([^\w\s]) ?({_AMOUNT})")
# Markdown's marks that are no words: a heading's (one to six `#`s at a line's start, then a space: "## Next steps"), a
# quote's (`>`s at a line's start before a word: "> Note", not "> 5 items"), a footnote's ("work[^1]"), a strike's
# ("~~$50~~") and an address's brackets ("<https://example.com>")
_HEADING_MARKS = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(?=\S)", re.MULTILINE)
_QUOTE_MARKS = re.compile(r"^[ \t]{0,3}(?:>[ \t]+)+(?=[^\d\s>=<$€£+-])", re.MULTILINE)  # not ">= 18", ">$100"
_FOOTNOTE_MARK = re.compile(r"(?<=\S)\[\^\w{1,20}\]")  # after its word: not a character class ("[^0-9]")
_STRUCK = re.compile(r"~~(?=\S)([^\n]{1,200}?)(?<=\S)~~")
_AUTOLINK = re.compile(r"<((?i:https?://|mailto:)[^\s<>]+)>")
# signs of comparison and mathematics: hibari read "!=" as "! equals" (heard "x equals y"), ">=" as "greater than
# equals", "==" as "equals equals", " -> " as "greater than", and "≠", "≥", "≤", "≈", "∞", "⇒", "√", "∈", "∉" not at all
_SIGN_WORDS = {
    "->": "to",
    "∞": "infinity",
    "⇒": "implies",
    "√": "square root of",
    "∈": "in",
    "∉": "not in",
    "!=": "not equal to",
    "≠": "not equal to",
    ">=": "greater than or equal to",
    "≥": "greater than or equal to",
    "<=": "less than or equal to",
    "≤": "less than or equal to",
    "==": "equals",
    "≈": "approximately",
}
_SIGN = re.compile(r"(?<![=!<>-])(?:!==?|===?|>=|<=)(?![=>])|(?<=\s)->(?=\s)|[≠≥≤≈∞⇒√∈∉]")  # not "ptr->next"
# a rate after an amount ("$9.99/month", "$99/yr"): hibari read it without its "per" ("nine ninety-nine month")
_PERIODS = {"month": "month", "mo": "month", "year": "year", "yr": "year", "week": "week", "wk": "week",
            "day": "day", "hour": "hour", "hr": "hour", "user": "user", "seat": "seat", "person": "person"}  # fmt: skip
_RATE = re.compile(rf"(?<=\d)/({'|'.join(_PERIODS)})\b")
# a day's name cut short before a date ("Tue, Dec 2", "Fri 5 Jan"): hibari read "Tue" as "two", "Fri" as "fry"
_DAYS = {"Mon": "Monday", "Tue": "Tuesday", "Tues": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday",
         "Thur": "Thursday", "Thurs": "Thursday", "Fri": "Friday", "Sat": "Saturday", "Sun": "Sunday"}  # fmt: skip
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sept?(?:ember)?|Oct(?:ober)?"
    r"|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DAY_BEFORE_DATE = re.compile(
    rf"\b({'|'.join(_DAYS)})\.?(?=,? (?:{_MONTH} \d|\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}(?!\w)))"
)
# a decimal ending in a zero after a name ("Python 3.10", "OAuth 2.0", "Version 2.0"): hibari dropped its last zeros
# ("three point one"). A price, a time or a score ("19.90", "at 10.30", "5.00 pm", "USD 5.00", "5.00 dollars") is
# left as hibari reads it: its zeros are no digits to say
_DECIMAL_WITH_ZEROS = re.compile(r"(?<![\w.,])([A-Z][\w+#-]{0,30}) (\d+)\.(\d*0)(?!\w|[.,]\d|%| ?[ap]\.?m\b)")
_NO_NAME = re.compile(r"[A-Z]{3}|At|By|From|Until|Till|Before|After|Around|About|Only|Just")  # a currency, or a time
_MONEY_AFTER = re.compile(r" ?(?:[A-Z]{3}\b|(?i:dollars?|euros?|pounds?|cents?|yen|bucks)\b)")
# terms hibari spells or names wrong: "JSON" ("J S O N"), "C#" ("C hashtag"), ".NET" ("net"), a constant's name
# ("MAX_RETRIES": "max R E T R I E S")
_TERM_WORDS = {"JSON": "Jason", "YAML": "yamel"}
_TERM = re.compile(r"\b(?:JSON|YAML)\b")
_SHARP = re.compile(r"(?<![\w#])([A-G])#(?![\w#])")
_DOT_NET = re.compile(r"(?<![\w.])\.NET\b")
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
# a range of times ("9:00–17:00", "9am-5pm"): hibari read it without its "to", as it reads one of plain numbers
_CLOCK = r"\d{1,2}(?::\d\d)?\s?[aApP]\.?[mM]\.?|\d{1,2}:\d\d"
_TIME_RANGE = re.compile(rf"(?<![\w:])({_CLOCK})\s?[-–—]\s?({_CLOCK})(?![\w:])")
# Greek mu before a unit ("5 μg"): the micro sign, which hibari reads "micro" ("micrograms")
_MU_BEFORE_UNIT = re.compile(r"(?<=\d)( ?)\u03bc(?=[gm]\b)")  # after an amount: hibari says "micrograms", "micrometres"
# micro (the sign or Greek mu) before a unit hibari has no micro for, after an amount: it read "5 µs" as "five micro
# s", "5 μL" as "five mu L"
_MICRO_UNITS = {"s": ("second", "seconds"), "L": ("liter", "liters"), "l": ("liter", "liters"), "A": ("amp", "amps"),
                "V": ("volt", "volts"), "W": ("watt", "watts"), "mol": ("mole", "moles"), "M": ("molar", "molar"),
                "F": ("farad", "farads"), "Hz": ("hertz", "hertz"), "J": ("joule", "joules")}  # fmt: skip
# (an amount starts after no comma either: "1,1,1,..." is tried once, not from each of its digits)
_MICRO_UNIT = re.compile(rf"(?<![\w.,])({_AMOUNT})( ?)[\u00b5\u03bc]({'|'.join(_MICRO_UNITS)})\b")
_GREEK = re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]")
# an IP address ("127.0.0.1"): hibari read it as digits without its dots
_IP_ADDRESS = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?!\w|\.\d)")
# what numbers a section or a release by dotted parts: "section 1.2.3.4" is no address. Not words that also come
# before addresses ("firewall rules 10.0.0.1", "table 10.0.0.1": a routing table's)
_NUMBERED_BY = re.compile(
    r"(?:\b(?i:(?:sub)?sections?|clauses?|chapters?|articles?|paragraphs?|appendix|versions?|releases?)|§):?\s*$"
)
# a `#` on its own ("Press # to continue", "then #."): a phone's key. Not a hashtag's ("#news"), a number's ("#1",
# which hibari reads "number 1"), "C#"'s, or one before a number after a space ("# 1"), which is no key either
_KEY_HASH = re.compile(r"(?<![^\s(\[\"'“‘])#(?![^\s.,;:!?)\]\"'”’]| \d)")
_ROUND_THE_CLOCK = re.compile(r"(?<![\w./])24/7(?![\w/]|\.\d)")
# a time written with a point ("10.30pm", "at 10.30 tomorrow"): hibari read it as a decimal ("ten point three"). Only
# before am/pm, or after "at" and before a word that tells a time of day: "about 3.14", "by 1.15", "traded at 1.08"
# and "at 21.30°C" are numbers
_TIME_OF_DAY_AFTER = r"(?:today|tomorrow|tonight|sharp|on|in the (?:morning|afternoon|evening)|(?:GMT|BST|UTC|CET)\b)"
_DOTTED_TIME = re.compile(
    r"(?<![\w.])([1-9]|1\d|2[0-3])\.([0-5]\d)(?= ?[ap]\.?m\b)"
    rf"|(?<=\b[Aa]t )(0?[1-9]|1\d|2[0-3])\.([0-5]\d)(?= {_TIME_OF_DAY_AFTER})"
)
# an ISO 8601 date and time ("2024-12-02T10:30:00Z"): hibari read its T, its zero seconds and its Z as written
_ISO_DATETIME = re.compile(
    r"(?<![\w-])(\d{4}-[01]\d-[0-3]\d)[T ]([0-2]\d:[0-5]\d)(:[0-5]\d(?:\.\d+)?)?(Z|[+-][0-2]\d:?[0-5]\d)?(?![\w:])"
)
# keys pressed together ("Ctrl+C", "Cmd+Shift+P") and the keys hibari spells ("Ctrl": "sintrrol", "Cmd": "C M D"):
# "Opt", "Esc" and "Del" are named only in a combination ("Opt out", "Lana Del Rey" are words)
_KEY_NAMES = {"Ctrl": "control", "Cmd": "command", "Opt": "option", "Esc": "escape", "Del": "delete"}
_KEYS = r"Ctrl|Cmd|Alt|Shift|Option|Opt|Win|Fn|Super|Meta|Esc|Tab|Enter|Del"
_KEY_COMBO = re.compile(rf"\b(?:(?:{_KEYS})\+)+\w+\b")
_KEY_NAME = re.compile(rf"\b(?:{'|'.join(_KEY_NAMES)})\b")
_KEY_WORD = re.compile(r"\b(?:Ctrl|Cmd)\b")  # no other reading: named anywhere
# a rating or a score ("Rated 5/5", "I give it 8/10", "4.5/5 stars"): hibari read it as a date ("May fifth"), numbers
# ("eight ten") or a decimal run into the next ("four point five five"). Only right after a word that rates, or
# right before stars or points: "On 5/10" stays a date, "1/2 cup" a fraction
_SCORE = r"(\d{1,3}(?:\.\d)?)/(5|10|100)(?![\w/]|\.\d)"
_RATING = re.compile(
    rf"(?i:\b(?:rated|rating|rate|score[ds]?|scored|grade[ds]?|(?:give|gave|gives|giving) it)\b:?) {_SCORE}"
    rf"|(?<![\w./]){_SCORE}(?= (?i:stars?|points?)\b)"
)
# three dotted numbers, the last of at most three digits ("3.11.2", "v1.0.0"): not a date ("12.05.2024", "12.05.24"),
# a phone number ("555.123.4567") or an IP address ("192.168.1.1", four numbers)
_VERSION = re.compile(r"(?<![\w.])([vV]?)(\d{1,4})\.(\d{1,3})\.(\d{1,3})(?!\w|\.\d)")
_DAY_MONTH_YEAR = re.compile(r"\d\d\.\d\d\.\d\d")
# a phone number with its area code in brackets: "(555) 123-4567", "(555)123-4567", "(212) 555 0199"
_PHONE = re.compile(r"(?<![\w)])\((\d{3})\) ?(\d{3})[-. ](\d{4})(?!\w|[-.]\d)")
# a web or e-mail address: one after "http(s)://" or "www.", one with an @ before a dotted domain, or a dotted name
# ending in a top-level domain of this list, its path after it. The list is matched in lower case only, as addresses
# are written, so that a sentence run on after its full stop ("home.Then", "it.is") or a file name ("main.py",
# "Node.js") is no address; a few endings are words too ("logger.info", "Safari.app" are read with their "dot").
_TOP_LEVEL_DOMAINS = (
    "com|org|net|edu|gov|mil|int|info|biz|xyz|app|dev|tech|online|site|cloud"
    "|io|ai|co|uk|de|fr|ca|au|nz|ie|eu|nl|es|ch|se|jp|cn|tv|fm|gg|ly"
)
_ADDRESS = re.compile(
    r"(?<![\w.@/:+-])"
    r"(?:(?i:https?://|www\.)\S+"
    r"|(?P<mail>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    rf"|(?:[\w-]+\.)+(?:{_TOP_LEVEL_DOMAINS})(?![\w-]|\.\w)(?::\d+)?(?:/\S*)?)"
)
# what ends a sentence or a clause after an address ("Visit example.com.", "(see example.com/faq/)"): not its own, and
# neither is a last slash, which nobody says
_AFTER_ADDRESS = ".,;:!?'\"”’)]}>*/"
_ADDRESS_MARKS = {".": "dot", "/": "slash", "@": "at", ":": "colon", "-": "dash", "_": "underscore"}
_ADDRESS_MARK = re.compile("[" + re.escape("".join(_ADDRESS_MARKS)) + "]")
# a file's path ("/etc/hosts", "~/.bashrc", "./run.sh"): hibari read the first as "etcetera hosts", "~" as "about",
# and lost slashes and dots. One from the root has two parts or more ("/s" or "/r" alone may be no path)
_PATH = re.compile(r"(?<![\w.:/~\\-])(?:(?:~|\.{1,2})/[\w.-]*\w(?:/[\w.-]*\w)*|/[\w.-]*\w(?:/[\w.-]*\w)+)/?")
_PATH_MARKS = {**_ADDRESS_MARKS, "~": "tilde"}
_PATH_MARK = re.compile(r"([./~_-])")  # kept by a split
# a phone number in groups of three, three and four digits, dashed ("555-123-4567") or dotted ("555.123.4567"): hibari
# reads a dashed one in its groups but right before a full stop ("Call 555-123-4567.": "five hundred fifty-five, one
# twenty-three..."), a dotted one digit by digit without its groups' pauses. Seven digits ("123-4567") may be a range.
# A country code of 1 may come first ("1-800-555-0199": its 1-800 was read as an amount, a zero of the rest lost).
_GROUPED_PHONE = re.compile(r"(?<![\w.-])(?:(1)[- ])?(\d{3})([-.])(\d{3})\3(\d{4})(?!\w|[-.]\d)")
_SCALES = {"mn": "million", "bn": "billion", "tn": "trillion"}
_AMOUNT_THEN_SCALE = re.compile(rf"(?<![\w.])({_AMOUNT}) ?(mn|bn|tn)\b")
# the signs hibari reads where they are written, after their amount ("50¢": "fifty cents"); moved before it, "¢50"
# was read "cents fifty"
_READ_AFTER_AMOUNT = frozenset("\u00a2")  # CENT SIGN


class WholeWordReader:
    """An unknown-word reader (word -> phonemes, or None) that reads past its `maxlen` letters, in near-equal pieces."""

    def __init__(self, reader: Callable[[str], str | None], maxlen: int) -> None:
        self._reader = reader
        self.maxlen = maxlen

    def __call__(self, word: str) -> str | None:
        if len(word) <= self.maxlen:
            return self._reader(word)
        count = math.ceil(len(word) / self.maxlen)
        size = math.ceil(len(word) / count)  # near-equal pieces: no last piece of a letter or two read on its own
        read = [self._reader(word[start : start + size]) for start in range(0, len(word), size)]
        return "".join(phonemes for phonemes in read if phonemes) or None


def text_reader(voice: str) -> Any:
    """hibari's G2P for `voice` (its British rules and reader where the voice is British), long words read whole."""
    from hibari.g2p import G2P
    from hibari.g2p.oov import ASSETS, OOV
    from hibari.tts import VOICES

    british = bool(VOICES[voice]["british"])
    oov = OOV(os.path.join(ASSETS, "oov_gb.onnx" if british else "oov.onnx"))
    return G2P(oov=WholeWordReader(oov, oov.maxlen), british=british)


def ascii_digits(text: str) -> str:
    """`text` with the decimal digits of every script as ASCII ones, character for character."""
    return "".join(str(unicodedata.digit(ch)) if not ch.isascii() and ch.isdecimal() else ch for ch in text)


def ascii_forms(text: str) -> str:
    """`text` with each letter or number whose compatibility form is ASCII (`app.text.normalize.ascii_form`) as that
    form: a number as a word of its own (`m²` is m 2, `①②` one two, not twelve), a letter's form in its word."""
    return "".join(_read_as(ch) for ch in text)


def _read_as(ch: str) -> str:
    form = None if ch.isascii() else ascii_form(ch)
    if form is None:
        return ch
    return f" {form} " if unicodedata.category(ch)[0] == "N" else form


def read_tokens(g2p: Any, text: str) -> list[Any]:
    """hibari's tokens of `text`, each with its phonemes (as its G2P reads them, joined they are what it returns),
    with digits of any script and compatibility forms read, and a run of more than `MAX_NUMBER_DIGITS` digits read
    digit by digit (what it reads is rewritten here, never the text the caller's words are timed against: a word read
    as several is timed as the one written)."""
    from hibari.g2p.lexicon import CURRENCIES
    from hibari.g2p.normalize import normalize

    known = known_word(g2p)
    key = "hash" if getattr(g2p, "british", False) else "pound"
    rewrites: tuple[Callable[[str], str], ...] = (  # in this order: each reads what the ones before it wrote
        ascii_digits,
        ascii_forms,
        lambda readable: readable.translate(_MINUS_SIGNS),
        markup_unsaid,
        greek_letters_named,
        paths_read_out,
        addresses_read_out,
        lambda readable: terms_said(readable, known),
        signs_before_amounts,
        scales_in_words,
        signs_as_words,
        lambda readable: hash_keys_named(readable, key),
        round_the_clock,
        ip_addresses_with_dots,
        time_ranges_with_to,
        phone_numbers_in_digits,
        times_said,
        ratings_out_of,
        keys_said,
        rates_with_per,
        weekdays_in_full,
        versions_with_points,
        decimals_with_their_zeros,
    )
    readable = text
    for rewrite in rewrites:
        readable = rewrite(readable)
    normalized = normalize(_DIGIT_RUN.sub(_digit_by_digit, readable))  # words some currency signs itself ("rupees")
    return g2p.phonemize_tokens(numbers_as_numbers(g2p.tokenize(joined_runs_cut(signs_named(normalized, CURRENCIES)))))


def joined_runs_cut(text: str) -> str:
    """`text` with each run written together cut, as if by a space, after a joiner (a piece with no letter or digit:
    a hyphen, a slash, a plus) once it holds `MAX_JOINED_PIECES` of hibari's pieces, or after any piece at twice that
    (camelCase's words are pieces too): hibari's search of the run for a compound it knows took hours over 2 000
    characters of "a-a-a-..." otherwise (and the work of a request cannot be stopped once begun). A joiner is read as
    it was."""
    from hibari.g2p import SUBTOKEN_RE

    def cut(run: re.Match[str]) -> str:
        written, out, start, count = run.group(), [], 0, 0
        for piece in SUBTOKEN_RE.finditer(written):
            count += 1
            joiner = not any(ch.isalnum() for ch in piece.group())
            if (count >= MAX_JOINED_PIECES and joiner) or count >= 2 * MAX_JOINED_PIECES:
                out.append(written[start : piece.end()])
                start, count = piece.end(), 0
        return " ".join([*out, written[start:]]) if out else written

    return _WRITTEN_TOGETHER.sub(cut, text)


def numbers_as_numbers(tokens: list[Any]) -> list[Any]:
    """`tokens` with each number that hibari's part-of-speech tagger took for punctuation tagged as a number (`CD`).
    It tags a negative number after a noun so now and then ("Value -50 now": `NFP`, "Balance -5 now": `-RRB-`), and
    hibari reads a token tagged so as the punctuation in it: "-50" was silent, "-5" a pause."""
    from hibari.g2p import PUNCT_TAGS

    for token in tokens:
        if token.tag in PUNCT_TAGS and token.tag != "$" and any(ch.isdigit() for ch in token.text):
            token.tag = "CD"
    return tokens


def signs_before_amounts(text: str) -> str:
    """Each currency sign written after its amount ("5$", "5 €", "5₹") moved before it, where hibari reads the signs
    it knows: as words ("₹5": "5 rupees") or as the amount's unit ("$5": "five dollars")."""

    def moved(match: re.Match[str]) -> str:
        amount, sign = match.group(1), match.group(2)
        if unicodedata.category(sign) != "Sc" or sign in _READ_AFTER_AMOUNT:
            return match.group(0)
        return f"{sign}{amount}"

    return _AMOUNT_THEN_MARK.sub(moved, text)


def markup_unsaid(text: str) -> str:
    """`text` without the Markdown marks an LLM writes that are no words: a heading's `#`s ("# Heading" was read
    "hashtag heading"; a `#` anywhere else, "#hashtags", "Press # now", "#5", is left as it is), a quote's `>`s
    ("greater than"), a footnote's mark ("work[^1]": "work to the power of one"), a strike's `~~` ("about about") and
    the brackets of an address ("<https://...>": "less than ... greater than")."""
    text = _QUOTE_MARKS.sub("", _HEADING_MARKS.sub("", text))
    return _AUTOLINK.sub(r"\1", _STRUCK.sub(r"\1", _FOOTNOTE_MARK.sub("", text)))


def greek_letters_named(text: str) -> str:
    """`text` with each Greek letter standing as a symbol (`app.text.normalize.greek_symbol`: the voice's text check
    lets only those through) as its name ("π": "pi", "Δt": "delta t", "2πr": "2 pi r"), and Greek mu before a unit
    as the micro sign ("5 μg": "micrograms"), micro before a unit hibari has no micro for in words ("5 µs":
    "5 microseconds"); hibari read them as nothing or as stray letters."""
    text = _MU_BEFORE_UNIT.sub("\\1\u00b5", _MICRO_UNIT.sub(_micro_unit_said, text))

    def named(match: re.Match[str]) -> str:
        at, written = match.start(), match.string
        if not greek_symbol(written, at):
            return match.group(0)
        letter = unicodedata.normalize("NFKC", match.group(0))  # a symbol form ("ϕ", "ϵ") as its letter
        name = unicodedata.name(letter).split("LETTER ", 1)[-1].split(" WITH ")[0].lower()
        before = " " if at and written[at - 1].isalnum() else ""
        after = " " if written[at + 1 : at + 2].isalnum() else ""
        return f"{before}{name.removeprefix('final ')}{after}"

    return _GREEK.sub(named, text)


def _micro_unit_said(match: re.Match[str]) -> str:
    amount, space, unit = match.groups()
    one, many = _MICRO_UNITS[unit]
    return f"{amount}{space}micro{one if amount == '1' else many}"


def terms_said(text: str, known: Callable[[str], bool]) -> str:
    """`text` with terms hibari spells or names wrong said as people say them: a constant's name in capitals
    ("MAX_RETRIES") as its words where they are words (`known`: "max retries"; "UUID_V4"'s acronym left to be
    spelled), "JSON" as "Jason" (not "J S O N"), "YAML" as "yamel", "C#" as "C sharp" (not "C hashtag") and ".NET"
    as "dot net"."""

    def words(match: re.Match[str]) -> str:
        return " ".join(part.lower() if known(part.lower()) else part for part in match.group(0).split("_"))

    text = _TERM.sub(lambda match: _TERM_WORDS[match.group(0)], _CONSTANT.sub(words, text))
    return _DOT_NET.sub("dot net", _SHARP.sub(r"\1 sharp", text))


def known_word(g2p: Any) -> Callable[[str], bool]:
    """Whether hibari's lexicon knows `word` (lower case), or the word it is a plural of ("retries": "retry")."""

    def known(word: str) -> bool:
        stems = (word, word[:-3] + "y" if word.endswith("ies") else word[:-1] if word.endswith("s") else word)
        return any(g2p.lexicon.is_known(stem, "NN") for stem in stems if len(stem) > 2)

    return known


def signs_as_words(text: str) -> str:
    """`text` with each sign of `_SIGN_WORDS` as its words ("x != y": "x not equal to y", "x ≥ 0": "x greater than
    or equal to 0", "∞": "infinity"); hibari read "!=" as "equals", which says the opposite, and most of the
    others as nothing. A sign it reads well ("5 > 3") is read as before."""
    return _SIGN.sub(lambda match: f" {_SIGN_WORDS[match.group(0)[:2]]} ", text)


def rates_with_per(text: str) -> str:
    """`text` with each rate after an amount said with its "per" ("$9.99/month": "$9.99 per month", "$99/yr":
    "$99 per year"); hibari read "nine dollars and ninety-nine cents month"."""
    return _RATE.sub(lambda match: f" per {_PERIODS[match.group(1)]}", text)


def weekdays_in_full(text: str) -> str:
    """`text` with a day's name cut short before a date in full ("Tue, Dec 2": "Tuesday, Dec 2", "Fri 5 Jan":
    "Friday 5 Jan"); hibari read "Tue" as "two", "Fri" as "fry". Not where no date follows ("Sun 5 times")."""
    return _DAY_BEFORE_DATE.sub(lambda match: _DAYS[match.group(1)], text)


def decimals_with_their_zeros(text: str) -> str:
    """`text` with each decimal that ends in a zero after a name read to its last digit ("Python 3.10": "Python 3
    point 1 0", "OAuth 2.0": "OAuth 2 point 0"); hibari dropped the zeros ("Python three point one", "OAuth two").
    Not an amount of money, a time, a percentage, nor a number with a third part ("3.10.1")."""

    def read(match: re.Match[str]) -> str:
        name, whole, fraction = match.groups()
        if _NO_NAME.fullmatch(name) or _MONEY_AFTER.match(match.string, match.end()):
            return match.group(0)
        return f"{name} {whole} point {' '.join(fraction)}"

    return _DECIMAL_WITH_ZEROS.sub(read, text)


def time_ranges_with_to(text: str) -> str:
    """`text` with each range of times said with its "to" ("9:00–17:00": "9:00 to 17:00", "9am-5pm": "9am to 5pm"),
    as hibari says a range of plain numbers ("5–10": "five to ten"); it read the times one after the other."""
    return _TIME_RANGE.sub(r"\1 to \2", text)


def ip_addresses_with_dots(text: str) -> str:
    """`text` with each IP address read as numbers between dots ("127.0.0.1": "127 dot 0 dot 0 dot 1"); hibari read
    "one two seven zero zero one". Four numbers of which one is over 255 are no address and are left as they are;
    after a word that numbers by parts ("section 1.2.3.4", "version 10.0.0.1") they are read with points, as a
    version of three is."""

    def said(match: re.Match[str]) -> str:
        numbers = match.groups()
        if _NUMBERED_BY.search(text, max(0, match.start() - 20), match.start()):
            return " point ".join(numbers)
        return " dot ".join(numbers) if all(int(n) <= 255 for n in numbers) else match.group(0)

    return _IP_ADDRESS.sub(said, text)


def hash_keys_named(text: str, key: str) -> str:
    """`text` with each `#` that stands on its own, a phone's key ("Press # to continue"), as `key`: what it is called
    ("pound" in American English, "hash" in British). hibari read it "hashtag". Run after `markup_unsaid`, whose
    `#`s are markup; a `#` in a word ("#hashtags", "#5", "C#") is read as before."""
    return _KEY_HASH.sub(key, text)


def round_the_clock(text: str) -> str:
    """`text` with "24/7" as it is said, "24 7" ("twenty-four seven"); hibari read it "twenty-four slash seven". Other
    numbers over numbers ("1/2", "12/25", "24/70") are read as before: a fraction or a date."""
    return _ROUND_THE_CLOCK.sub("24 7", text)


def times_said(text: str) -> str:
    """`text` with a time written with a point ("10.30pm", "at 10.30 tomorrow") as one with a colon, and an ISO 8601
    date and time as said: the date, "at" its time (its seconds where they are not zero), "UTC" and its offset ("plus
    1")."""
    return _ISO_DATETIME.sub(_iso_said, _DOTTED_TIME.sub(lambda m: ":".join(g for g in m.groups() if g), text))


def _iso_said(match: re.Match[str]) -> str:
    date, clock, seconds, zone = match.groups()
    if seconds and float(seconds[1:]) > 0:
        clock += seconds
    if not zone:
        return f"{date} at {clock}"
    if zone == "Z":
        return f"{date} at {clock} UTC"
    hours, minutes = int(zone[1:3]), zone[-2:]
    offset = f"{hours}:{minutes}" if minutes != "00" else str(hours)
    return f"{date} at {clock} UTC {'plus' if zone[0] == '+' else 'minus'} {offset}"


def keys_said(text: str) -> str:
    """`text` with keys pressed together said without their plus signs ("Ctrl+C": "control C"), and the keys hibari
    spells by their names."""
    named = _KEY_COMBO.sub(
        lambda m: _KEY_NAME.sub(lambda k: _KEY_NAMES[k.group(0)], m.group(0).replace("+", " ")), text
    )
    return _KEY_WORD.sub(lambda m: _KEY_NAMES[m.group(0)], named)


def ratings_out_of(text: str) -> str:
    """`text` with a rating or a score "out of" its scale ("Rated 5/5": "Rated 5 out of 5", "4.5/5 stars") where a
    word that rates comes right before it or stars or points right after it, and it is no more than its scale."""

    def said(match: re.Match[str]) -> str:
        score, scale = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        if float(score) > int(scale):
            return match.group(0)
        rated = match.group(0)[: match.start(1) - match.start()] if match.group(1) else ""
        return f"{rated}{score} out of {scale}"

    return _RATING.sub(said, text)


def versions_with_points(text: str) -> str:
    """`text` with each version of three dotted numbers read with its points ("3.11.2": "3 point 11 point 2", said
    "three point eleven point two"); hibari read it "three eleven two". Not one like a date ("12.05.24")."""

    def with_points(match: re.Match[str]) -> str:
        if _DAY_MONTH_YEAR.fullmatch(match.group(0)):
            return match.group(0)
        prefix = f"{match.group(1)} " if match.group(1) else ""
        return prefix + " point ".join(match.group(2, 3, 4))

    return _VERSION.sub(with_points, text)


def phone_numbers_in_digits(text: str) -> str:
    """`text` with each phone number written with its area code in brackets ("(555) 123-4567"), in dotted groups
    ("555.123.4567") or in dashed ones ("555-123-4567") as its digits in their groups ("5 5 5, 1 2 3, 4 5 6 7"), as
    hibari reads "555-123-4567" inside a sentence; it read the area code in brackets as an amount, the dotted groups
    without their pauses and the dashed ones before a full stop as amounts."""
    return _GROUPED_PHONE.sub(_in_digits, _PHONE.sub(_in_digits, text))


def _in_digits(match: re.Match[str]) -> str:
    return ", ".join(" ".join(group) for group in match.groups() if group and group.isdigit())  # no separator


def addresses_read_out(text: str) -> str:
    """`text` with each web or e-mail address as it is said, its marks as words ("example.com/docs": "example dot com
    slash docs", "jane.doe@example.com": "jane dot doe at example dot com"); hibari read its dots as nothing. A full
    stop or other punctuation after it stays there, a sentence's, as does every dot of text that is no address."""
    return _ADDRESS.sub(_address_said, text)


def _address_said(match: re.Match[str]) -> str:
    address = match.group(0).rstrip(_AFTER_ADDRESS)
    after = match.group(0)[len(address) :].replace("/", "")
    address = re.sub(r"^https?://", "", address, flags=re.IGNORECASE)  # unsaid: typed or not, the address is the same
    if match.group("mail"):
        user, at, host = address.rpartition("@")
        head, tail = user + at, ""
    else:
        cut = next((i for i, ch in enumerate(address) if ch in "/:"), len(address))  # the host ends at a path or port
        head, host, tail = "", address[:cut], address[cut:]
    labels = ["W W W" if label.lower() == "www" else label for label in host.split(".")]
    # a two-letter country domain is said letter by letter, as hibari reads it in capitals ("UK": "U K"; "de" was
    # "duh"); "co" ("example.co") is said as a word. Not "U K", whose "K." would take a sentence's full stop as its own
    if len(labels[-1]) == 2 and labels[-1].isalpha() and labels[-1].lower() != "co":
        labels[-1] = labels[-1].upper()
    said = _ADDRESS_MARK.sub(lambda mark: f" {_ADDRESS_MARKS[mark.group(0)]} ", head + ".".join(labels) + tail)
    return " ".join(said.split()) + after


def paths_read_out(text: str) -> str:
    """`text` with each file path as it is said, its marks as words ("~/.bashrc": "tilde slash dot bashrc"), and
    "etc" spelled ("/etc/hosts": "slash E T C slash hosts"), as `addresses_read_out` says an address."""

    def said(match: re.Match[str]) -> str:
        parts = _PATH_MARK.split(match.group(0).rstrip("/"))
        words = [_PATH_MARKS.get(part, "E T C" if part == "etc" else part) for part in parts]
        return " ".join(word for word in words if word)

    return _PATH.sub(said, text)


def scales_in_words(text: str) -> str:
    """Each amount followed by `bn`, `mn` or `tn` (as the press writes "$2.5bn") with that scale as a word ("$2.5
    billion"), which hibari reads with its amount and currency ("two point five billion dollars"); as written it read
    "two five B N", the decimal point and the currency sign lost."""
    return _AMOUNT_THEN_SCALE.sub(lambda match: f"{match.group(1)} {_SCALES[match.group(2)]}", text)


def signs_named(text: str, spoken_before: Container[str]) -> str:
    """Each currency sign still before an amount once hibari has worded those it knows, but those it reads there
    itself (`spoken_before`: its `$`, `£`, `€`), as its Unicode name after the amount ("₿5": "5 bitcoin")."""

    def named(match: re.Match[str]) -> str:
        sign, amount = match.group(1), match.group(2)
        if unicodedata.category(sign) != "Sc" or sign in spoken_before:
            return match.group(0)
        return f"{amount} {_sign_name(sign)}"

    return _MARK_THEN_AMOUNT.sub(named, text)


def _sign_name(sign: str) -> str:
    """ "BITCOIN SIGN" -> bitcoin, "THAI CURRENCY SYMBOL BAHT" -> baht."""
    name = unicodedata.name(sign, "currency").lower().removesuffix(" sign")
    return name.rpartition("currency symbol ")[2]


def _digit_by_digit(run: re.Match[str]) -> str:
    digits = run.group(0).replace(",", "")
    if len(digits) <= MAX_NUMBER_DIGITS:
        return run.group(0)
    return " ".join(digits) + ("," if run.group(0).endswith(",") else "")
