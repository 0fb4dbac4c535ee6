"""app.text.normalize: what counts as another script for a voice that reads English, and the ASCII forms read."""

from __future__ import annotations

import pytest

from app.text.normalize import ReadingRules, UnreadableText, ascii_form, first_non_latin, normalize_text

ENGLISH = ReadingRules(latin_only=True)


@pytest.mark.parametrize(
    ("ch", "form"),
    [("½", "1/2"), ("²", "2"), ("①", "1"), ("Ⅻ", "XII"), ("Ｆ", "F"), ("𝐀", "A"), ("™", None), ("௰", None), ("a", "a")],
)
def test_the_ascii_form_of_a_letter_or_number(ch: str, form: str | None) -> None:
    assert ascii_form(ch) == form


@pytest.mark.parametrize(
    "text",
    ["Add ½ cup", "20 m²", "Step ①", "Henry Ⅻ", "ＦＵＬＬ", "𝐀pple", "coŀlegi", "Order ١٢٣", "Take 5 µg; 10 µm wide"],
)
def test_english_in_any_form_of_its_letters_and_numbers_is_read(text: str) -> None:
    """Compatibility forms (and `ŀ`, a Latin letter whose decomposition adds a middle dot) are no other script; nor is
    the micro sign `µ` (its compatibility form is Greek `μ`), which the engine reads as "micro"."""
    assert first_non_latin(text) is None
    assert normalize_text(text, ENGLISH) == text


@pytest.mark.parametrize(("text", "named"), [("Chapter ௰ begins", "Tamil"), ("Year 〇 now", "Ideographic")])
def test_a_number_of_another_script_with_no_ascii_form_is_refused_not_skipped(text: str, named: str) -> None:
    """Read as nothing by the engine, it would have been skipped in silence."""
    with pytest.raises(UnreadableText, match=named):
        normalize_text(text, ENGLISH)


def test_letters_of_another_script_are_refused() -> None:
    foreign = first_non_latin("Hello Привет")
    assert foreign is not None and foreign.fragment == "Привет" and "Cyrillic" in foreign.describe()
    greek = first_non_latin("Say καλημέρα now")  # a Greek word: Greek letters side by side
    assert greek is not None and greek.fragment == "καλημέρα" and "Greek" in greek.describe()
    for word in ("Xκαλημέρα", "καλημέραX", "αβγδT"):  # a Latin letter beside a Greek word makes no symbols of it
        assert first_non_latin(f"Say {word} now") is not None, word


@pytest.mark.parametrize(
    "text",
    ["The value of π is 3.14.", "Take β-blockers.", "Set α = 0.05.", "If Δt is small.", "Take 5 μg.", "2πr", "ΔΔCt"],
)
def test_a_greek_letter_standing_as_a_symbol_is_read(text: str) -> None:
    """π, α, Δ in English text are symbols, which the engine reads by name ("pi", "alpha", "delta"; Greek mu before
    a unit as "micro"): no other language to refuse. Refused, the whole request failed."""
    assert first_non_latin(text) is None
    assert normalize_text(text, ENGLISH) == text


@pytest.mark.parametrize(
    "text",
    [
        "<speak>Hello there.</speak>",
        '  \n<SPEAK version="1.1" xml:lang="en-US">Hello <break time="500ms"/> world.</SPEAK>',
        "<speak/>",
        "\ufeff<speak>Hello.</speak>",  # invisible characters first, which the reader drops
        "\u200b\u2060\u00ad <speak>Hello.</speak>",
        "\ue000\u0301\ufe0f<speak>Hello.</speak>",  # a private-use character, a stray mark, a variation selector
        '<?xml version="1.0"?><speak>Hello.</speak>',  # its prolog first
        '<?xml version="1.0"?>\n<!DOCTYPE speak SYSTEM "synthesis.dtd">\n<speak>Hi.</speak>',
        "<!-- a greeting --> <speak>Hi.</speak>",
        '<?xml version="1.0"?>\u200b<speak>Hi.</speak>',  # what the reader drops, between the prolog and the root
        "<!-- a -->\ufeff\u2060<!-- b -->\u00ad<speak>Hi.</speak>",
        '<!DOCTYPE speak [ <!ENTITY who "world"> ]>\n<speak>Hello &who;.</speak>',  # an internal subset, its own >s
        "\u200b" * 1100 + "<!-- a -->\u200b<speak>Hi.</speak>",  # the bound counts from the text's first mark
    ],
)
def test_ssml_is_refused_not_read_out(text: str) -> None:
    """A document of SSML markup (its root, `<speak>`, first) would be read out tag by tag, or its breaks and
    prosody dropped in silence: this API speaks plain text, and says so."""
    with pytest.raises(UnreadableText, match=r"'input' is SSML markup .*plain text"):
        normalize_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "<speaker> notes follow.",
        "The <speak> tag is SSML's root.",
        "a < b, speak up.",
        "<!DOCTYPE speak [ an unclosed subset <speak>Hi.</speak>",  # a document type that never ends is no prolog
    ],
)
def test_text_that_only_mentions_markup_is_read(text: str) -> None:
    assert normalize_text(text) == text
