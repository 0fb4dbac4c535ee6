"""Hygiene for the short text fields of a request (names, ids, instructions): text that is not valid Unicode or that
carries control characters is refused, naming the field, before it can reach a log line, a header or an engine.

`input` is different: it is the text to speak, and `app.text.normalize` makes it speakable instead.
"""

from __future__ import annotations

import unicodedata

# Line breaks and tabs are ordinary in free text (instructions, a transcript); never in a name or an id.
_FREE_TEXT_WHITESPACE = frozenset("\t\n\r")


def text_problem(value: str, *, multiline: bool = False) -> str | None:
    """Why `value` is not acceptable as a text field, or None. The reason names the offending code point by number
    only, so that it can be echoed safely."""
    for index, ch in enumerate(value):
        category = unicodedata.category(ch)
        if category == "Cs":
            return f"it is not valid Unicode (a lone surrogate, U+{ord(ch):04X}, at position {index})"
        if category == "Cc" and not (multiline and ch in _FREE_TEXT_WHITESPACE):
            return f"it contains a control character (U+{ord(ch):04X}) at position {index}"
        if category in ("Zl", "Zp") and not multiline:
            return f"it contains a line separator (U+{ord(ch):04X}) at position {index}"
        if ch in _BIDI_CONTROLS:
            return f"it contains a text-direction control (U+{ord(ch):04X}) at position {index}"
    return None


def check_single_line(value: str) -> str:
    """A pydantic after-validator for names and ids."""
    if (problem := text_problem(value)) is not None:
        raise ValueError(problem)
    return value


def check_multiline(value: str) -> str:
    """A pydantic after-validator for free text (instructions, a transcript, base64 that may be wrapped)."""
    if (problem := text_problem(value, multiline=True)) is not None:
        raise ValueError(problem)
    return value


# Embedding and override controls that make a logged or displayed value read differently from what it is.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
