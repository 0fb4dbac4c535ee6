"""What the embedded engine's reader says for signs hibari's own reader passes over: a minus sign (U+2212, as word
processors and LLMs write it) and currency signs after their amount or unknown to it. Read through hibari's real
G2P; what is rewritten is what it reads, never the text the words are timed against."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from app.engines.embedded import reader as reading
from app.engines.embedded.reader import MAX_JOINED_PIECES, read_tokens, text_reader


@cache
def reader() -> object:
    return text_reader("heart")


def said(text: str) -> str:
    return " ".join(token.phonemes for token in read_tokens(reader(), text) if token.phonemes)


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("It was \u22125 degrees.", "It was -5 degrees."),
        ("It was \u22123.5 degrees.", "It was -3.5 degrees."),
        ("The fee is 5$ now.", "The fee is $5 now."),
        ("The fee is 5.50$ now.", "The fee is $5.50 now."),
        ("The fee is 5 € now.", "The fee is €5 now."),
        ("The fee is 1,000£ now.", "The fee is £1,000 now."),
    ],
)
def test_a_sign_hibari_passes_over_is_read_as_it_reads_its_usual_spelling(written: str, as_if: str) -> None:
    assert said(written) == said(as_if)


@pytest.mark.parametrize(
    ("written", "name"),
    [("It costs \u20bf5 now.", "bitcoin"), ("It costs 5\u20bd now.", "ruble"), ("It costs 5 \u0e3f now.", "baht")],
)
def test_a_currency_sign_it_has_no_word_for_is_read_by_its_name_after_the_amount(written: str, name: str) -> None:
    assert said(written) == said(f"It costs 5 {name} now.")


def test_signs_it_reads_already_are_left_as_they_are() -> None:
    assert said("It costs $5 now.") != said("It costs 5 now.")  # "five dollars"
    assert said("It costs \u20b95 now.") == said("It costs 5 rupees now.")  # hibari's own word for it


def test_a_sign_after_an_amount_as_before_it_whatever_the_sign() -> None:
    assert said("It costs 5\u20b9 now.") == said("It costs \u20b95 now.")  # hibari's word for it, both ways


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("Only 99\u00a2 today.", "Only 99 cents today."),
        ("It costs 1\u00a2.", "It costs 1 cent."),
        ("It costs 50 \u00a2 each.", "It costs 50 cents each."),
        ("It costs 0.5\u00a2.", "It costs 0.5 cents."),
    ],
)
def test_a_cent_sign_after_its_amount_is_read_after_it(written: str, as_if: str) -> None:
    """hibari reads "99¢" as "ninety-nine cents"; moved before its amount as the other signs are, it was read
    "cents ninety-nine"."""
    assert said(written) == said(as_if)


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("It costs \u20ac2.5bn now.", "It costs \u20ac2.5 billion now."),
        ("Revenue hit $12.5bn.", "Revenue hit $12.5 billion."),
        ("A \u00a33 bn loss.", "A \u00a33 billion loss."),
        ("It raised $5mn and then $1tn.", "It raised $5 million and then $1 trillion."),
        ("About 2.5bn people.", "About 2.5 billion people."),
    ],
)
def test_a_scale_written_short_is_read_as_its_word(written: str, as_if: str) -> None:
    """ "$2.5bn" was read "two five B N": the decimal point and the currency lost."""
    assert said(written) == said(as_if)


@pytest.mark.parametrize("text", ["Press the bn key.", "Model 5bnx is out.", "See section 2.bn now."])
def test_letters_that_are_no_scale_of_an_amount_are_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import scales_in_words

    assert scales_in_words(text) == text


@pytest.mark.parametrize(
    ("written", "number"),
    [
        ("Value -50 now.", "-50"),
        ("Balance -5 now.", "-5"),
        ("Value -3.5 then", "-3.5"),
        ("Value -1,000 then.", "-1,000"),
    ],
)
def test_a_number_the_tagger_takes_for_punctuation_is_read(written: str, number: str) -> None:
    """hibari's tagger tags these negative numbers as punctuation (NFP, -RRB-) and its reader then read "-50" as
    nothing and "-5" as a pause: the number was lost from the speech. Read as the same number elsewhere is."""
    tokens = read_tokens(reader(), written)
    read = next(token.phonemes for token in tokens if token.text == number)
    elsewhere = next(token.phonemes for token in read_tokens(reader(), f"It is {number}.") if token.text == number)
    assert read == elsewhere
    assert said(written) == said(written.replace(number, "minus " + number[1:]))


@pytest.mark.parametrize(
    "text",
    ["I have 2 $20 bills.", "Buy 3 \u00a35 tickets.", "Prices: 5 $6 $7 now.", "It is 1 000 \u20ac now."],
)
def test_a_sign_that_begins_the_next_amount_stays_with_it(text: str) -> None:
    """The sign of "2 $20" is the twenty's: "two twenty dollars", never "$220"."""
    from app.engines.embedded.reader import signs_before_amounts

    assert signs_before_amounts(text) == text


def timed_words(text: str) -> list[tuple[str, float, float]]:
    """The caller's words of `text` as the engine times them, each spoken word given one second in turn."""
    from app.engines.embedded.alignment import phonemize
    from app.text.words import SpokenWord, align_words, written_words

    _, spoken = phonemize(reader(), text)
    timed = align_words(written_words(text), [SpokenWord(w.text, i, i + 1.0) for i, w in enumerate(spoken)])
    return [(t.word, t.start_s, t.end_s) for t in timed]


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("# Getting started", "Getting started"),
        ("## Step two", "Step two"),
        ("###   Notes", "Notes"),
        ("Intro\n## Next steps", "Intro\nNext steps"),
    ],
)
def test_a_markdown_heading_mark_is_not_read(written: str, as_if: str) -> None:
    """ "# Heading" was read "hashtag heading": the `#` of a heading an LLM writes at a line's start is markup."""
    assert said(written) == said(as_if)
    assert timed_words(written)[0][0] == written.split()[0]  # the mark keeps its place in the words, spoken or not


@pytest.mark.parametrize("text", ["Use #hashtags here.", "Press # to continue.", "Item #5 is here.", "C# rocks."])
def test_a_hash_that_heads_no_line_is_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import markup_unsaid

    assert markup_unsaid(text) == text


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("We are open 24/7 for you.", "We are open 24 7 for you."),
        ("Support is 24/7.", "Support is 24 7."),
        ("A 24/7 line (24/7) now.", "A 24 7 line (24 7) now."),
    ],
)
def test_round_the_clock_is_read_as_said(written: str, as_if: str) -> None:
    """ "24/7" was read "twenty-four slash seven": it is "twenty-four seven", its timestamp still naming "24/7"."""
    assert said(written) == said(as_if)
    _, start, end = next(timed for timed in timed_words(written) if timed[0] == "24/7")
    assert end > start


@pytest.mark.parametrize(
    "text",
    ["Add 1/2 cup now.", "On 12/25 we rest.", "It is 24/70 now.", "Page 124/7 here.", "On 5/10 we met.",
     "Rated on 3/5 by them.", "Score 7/5 here.", "It has 4/5 parts.", "Due 2.5/5 days."],
)  # fmt: skip
def test_other_numbers_with_a_slash_are_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import ratings_out_of, round_the_clock

    assert round_the_clock(text) == text and ratings_out_of(text) == text


def test_slashes_of_no_path_are_read_as_before() -> None:
    from app.engines.embedded.reader import paths_read_out

    for text in ("Use and/or km/h w/o 1/2 24/7 here.", "See https://example.com/docs/a now.", "Then </div> /s ok."):
        assert paths_read_out(text) == text


@pytest.mark.parametrize(
    "text",
    ["It rose by 1.05% now.", "It grew by 1.25 times.", "Sold at 12.99 USD.", "At 24.30 it is no time.",
     "Pi is about 3.14159 here.", "It is 10.30 metres.", "Then 2024-12-02T10:30Z9 here.", "Press Ctrl now+C.",
     "Pi is about 3.14.", "The correlation was around 0.45 overall.", "The p-value was about 0.05",
     "Multiply the price by 1.15 to add tax.", "Python versions before 3.10 lack it.", "The euro traded at 1.08.",
     "It weighs about 2.45 kg.", "It ran about 10.15 km.", "It was at 21.30°C here.", "It is about 12.50 dollars.",
     "Opt out of tracking.", "Opt in now.", "Lana Del Rey sang.", "Benicio Del Toro acted.", "Press Tab to go."],
)  # fmt: skip
def test_numbers_with_a_point_that_are_no_times_and_no_keys_are_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import keys_said, times_said

    assert times_said(text) == text and keys_said(text) == text.replace("Ctrl", "control")


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("Install version 3.11.2 today.", "Install version 3 point 11 point 2 today."),
        ("Upgrade to 1.0.0.", "Upgrade to 1 point 0 point 0."),
        ("It runs on Ubuntu 22.04.3 now.", "It runs on Ubuntu 22 point 04 point 3 now."),
        ("Use v3.11.2 now.", "Use v 3 point 11 point 2 now."),
    ],
)
def test_a_dotted_version_is_read_with_its_points(written: str, as_if: str) -> None:
    """ "3.11.2" was read "three eleven two", its points lost: "three point eleven point two"."""
    assert said(written) == said(as_if)
    _, start, end = next(timed for timed in timed_words(written) if "." in timed[0])  # named as written
    assert end > start


@pytest.mark.parametrize(
    "text",
    ["It is 3.5 now.", "Host 192.168.1.1 is up.", "On 12.05.2024 we met.", "On 12.05.24 we met.", "Call 555.123.4567."],
)
def test_numbers_with_points_that_are_no_version_are_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import versions_with_points

    assert versions_with_points(text) == text


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("Call us at (555) 123-4567 today.", "Call us at 5 5 5, 1 2 3, 4 5 6 7 today."),
        ("Call (555)123-4567.", "Call 5 5 5, 1 2 3, 4 5 6 7."),
        ("Call (212) 555 0199 now.", "Call 2 1 2, 5 5 5, 0 1 9 9 now."),
    ],
)
def test_a_phone_number_with_its_area_code_in_brackets_is_read_digit_by_digit(written: str, as_if: str) -> None:
    """ "(555) 123-4567" was read "five hundred fifty-five, one two three, four five six seven": its area code an
    amount. It is read digit by digit in its groups, as hibari reads "555-123-4567"."""
    assert said(written) == said(as_if)
    words = [word for word, start, end in timed_words(written) if word[0].isdigit() and end > start]
    assert words == [word.strip("().") for word in written.split() if word.strip("(")[0].isdigit()]


@pytest.mark.parametrize("text", ["It was (555) then.", "See (1) 123-4567.", "Pay (555) 1234 now."])
def test_numbers_in_brackets_that_are_no_phone_number_are_read_as_before(text: str) -> None:
    from app.engines.embedded.reader import phone_numbers_in_digits

    assert phone_numbers_in_digits(text) == text


@pytest.mark.parametrize(
    ("written", "as_if", "address"),
    [
        ("Visit example.com/docs now.", "Visit example dot com slash docs now.", "example.com/docs"),
        ("Go to www.example.co.uk today.", "Go to W W W dot example dot co dot UK today.", "www.example.co.uk"),
        ("Mail jane.doe@example.com now.", "Mail jane dot doe at example dot com now.", "jane.doe@example.com"),
        ("See https://example.com/docs/api for more.", "See example dot com slash docs slash api for more.", None),
        ("Visit example.com.", "Visit example dot com.", None),
        ("Mail me at jane@example.co.uk.", "Mail me at jane at example dot co dot UK.", None),
        ("Is it on example.org/faq/?", "Is it on example dot org slash faq?", None),
        (
            "Write to jane_doe@my-site.io, please.",
            "Write to jane underscore doe at my dash site dot IO, please.",
            None,
        ),
        ("Open docs.python.org/3/library now.", "Open docs dot python dot org slash 3 slash library now.", None),
    ],
)
def test_a_web_or_email_address_is_read_with_its_dots_and_slashes(
    written: str, as_if: str, address: str | None
) -> None:
    """ "example.com/docs" was read "example com docs" and "jane.doe@example.com" "jane doe at example com": the
    dots lost, so a listener could not type the address back. Its dots, slashes and @ are read as said ("http(s)://"
    is not: a listener types the address without it), the address still timed as one word, as written."""
    assert said(written) == said(as_if)
    if address is not None:
        _, start, end = next(timed for timed in timed_words(written) if timed[0] == address)
        assert end > start


@pytest.mark.parametrize(
    "text",
    [
        "I went home. Then I slept.",
        "I went home.Then I slept.",
        "It is 3.5 now, e.g. today.",
        "The U.S. team won.",
        "See Node.js and main.py now.",
        "Ask @jane at 5.",
        "Host 192.168.1.1 is up.",
        "Install version 3.11.2 today.",
    ],
)
def test_dots_of_no_address_are_read_as_before(text: str) -> None:
    """A full stop ends its sentence, and a dot between numbers, in an abbreviation or in a file name is left to the
    reader's own rules: only an address with a known top-level domain (or "www.", "http(s)://", an @) says "dot"."""
    from app.engines.embedded.reader import addresses_read_out

    assert addresses_read_out(text) == text


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("Call 555.123.4567 now.", "Call 5 5 5, 1 2 3, 4 5 6 7 now."),
        ("Call 555.123.4567.", "Call 5 5 5, 1 2 3, 4 5 6 7."),
        ("Call 555-123-4567.", "Call 5 5 5, 1 2 3, 4 5 6 7."),
    ],
)
def test_a_phone_number_in_dotted_or_dashed_groups_is_read_digit_by_digit(written: str, as_if: str) -> None:
    """ "555.123.4567" was read digit by digit without a pause between its groups, and "555-123-4567" right before a
    full stop as amounts ("five hundred fifty-five, one twenty-three, forty-five sixty-seven"): both are read in their
    groups, digit by digit, as "(555) 123-4567" is."""
    assert said(written) == said(as_if)
    number = next(word for word in written.split() if word.strip("(")[0].isdigit()).strip("().")
    _, start, end = next(timed for timed in timed_words(written) if timed[0] == number)
    assert end > start


@pytest.mark.parametrize(
    "text",
    [
        "Call 555.123.45678 now.",
        "It is 1.555.123.4567 now.",
        "Call 555-123.4567 now.",
        "Pay 555.12 now.",
        "See 123-4567.",
    ],
)
def test_numbers_in_groups_that_are_no_phone_number_are_left_as_they_are(text: str) -> None:
    from app.engines.embedded.reader import phone_numbers_in_digits

    assert phone_numbers_in_digits(text) == text


@cache
def british_reader() -> object:
    return text_reader("emma")


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("Press # to continue.", "Press {} to continue."),
        ("Then press #.", "Then press {}."),
        ("Press the # key now.", "Press the {} key now."),
        ('Enter your PIN, then "#".', 'Enter your PIN, then "{}".'),
    ],
)
def test_a_hash_on_its_own_is_the_key_said_pound_or_hash(written: str, as_if: str) -> None:
    """A `#` on its own is a phone's key, not a hashtag: hibari read "Press # to continue" as "press hashtag to
    continue". It is "pound" in American English and "hash" in British."""
    assert said(written) == said(as_if.format("pound"))
    british = " ".join(t.phonemes for t in read_tokens(british_reader(), written) if t.phonemes)
    assert british == " ".join(t.phonemes for t in read_tokens(british_reader(), as_if.format("hash")) if t.phonemes)
    _, start, end = next(timed for timed in timed_words(written) if timed[0].strip('"') == "#")
    assert end > start


@pytest.mark.parametrize(
    ("text", "as_if"),
    [
        ("Use #hashtags here.", "Use hashtag hashtags here."),
        ("Item #1 is here.", "Item number 1 is here."),
        ("# Getting started", "Getting started"),
        ("Wow ## now.", "Wow hashtag hashtag now."),
    ],
)
def test_a_hash_that_is_no_key_is_read_as_before(text: str, as_if: str) -> None:
    assert said(text) == said(as_if)


def longest_joined_run(text: str) -> int:
    """The most of hibari's pieces its reader is given written together (no space between them) for `text`."""
    from hibari.g2p import SUBTOKEN_RE

    g2p: Any = reader()
    given: list[str] = []
    tokenize = g2p.tokenize
    g2p.tokenize = lambda readable: tokenize(given.append(readable) or readable)  # the text it reads
    try:
        read_tokens(g2p, text)
    finally:
        del g2p.tokenize
    return max(len(SUBTOKEN_RE.findall(run)) for readable in given for run in readable.split())


@pytest.mark.parametrize(
    "text", ["a-" * 100, "ab/" * 100, "a+" * 100, "x-" * 30 + "y" * 40 + "-z" * 30, "aB" * 100, ".-" * 100]
)
def test_a_long_run_of_joined_pieces_is_read_in_runs_of_bounded_length(text: str) -> None:
    """hibari looks up every stretch of a run of pieces written together (joined by hyphens, slashes, pluses) as a
    compound it may know, its time growing with the cube of the run's length ("a-a-a-...": 2 000 characters took
    hours, holding a worker and then the others): a long run is read as runs of a bounded number of pieces, cut after
    a joiner."""
    assert longest_joined_run(text) <= 2 * MAX_JOINED_PIECES


@pytest.mark.parametrize(
    "text",
    ["state-of-the-art", "mother-in-law", "2024-05-01", "a/b/c", "twenty-first-century", "a-b-c-d-e-f-g-h-i-j-k"],
)
def test_runs_within_the_bound_are_read_as_hibari_reads_them(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compounds and runs of fewer pieces than the bound are not cut: read as without the cut, whole (hibari's
    lexicon knows "mother-in-law")."""
    cut = said(f"It is {text} today.")
    monkeypatch.setattr(reading, "joined_runs_cut", lambda written: written)
    assert cut == said(f"It is {text} today.")


@pytest.mark.parametrize(
    ("written", "as_if"),
    [
        ("> Note that this is quoted.", "Note that this is quoted."),  # a quote's mark, not "greater than"
        ("> > Nested, too.", "Nested, too."),
        ("As shown in prior work[^1] here.", "As shown in prior work here."),  # a footnote's mark: not "to the power"
        ("Now ~~$50~~ $40 only.", "Now $50 $40 only."),  # struck through: not "about about"
        ("See <https://example.com/guide> now.", "See https://example.com/guide now."),  # not "less than"
        ("If x != y then stop.", "If x not equal to y then stop."),  # was "x equals y"
        ("If x ≠ y then stop.", "If x not equal to y then stop."),
        ("Keep x >= 0 here.", "Keep x greater than or equal to 0 here."),
        ("Keep x ≥ 0 here.", "Keep x greater than or equal to 0 here."),
        ("Keep x <= 9 here.", "Keep x less than or equal to 9 here."),
        ("Keep x ≤ 9 here.", "Keep x less than or equal to 9 here."),
        ("Check x == y here.", "Check x equals y here."),  # not "equals equals"
        ("So a ≈ b here.", "So a approximately b here."),  # was silent
        ("Use Python 3.10 or later.", "Use Python 3 point 1 0 or later."),  # its zero was dropped: "3.1"
        ("Use OAuth 2.0 here.", "Use OAuth 2 point 0 here."),  # was "two"
        ("Call 1-800-555-0199 now.", "Call 1, 8 0 0, 5 5 5, 0 1 9 9 now."),  # its first digits an amount, a 0 lost
        ("Learning C# and F# today.", "Learning C sharp and F sharp today."),  # not "C hashtag"
        ("Parse the JSON file.", "Parse the Jason file."),  # not spelled "J S O N"
        ("Set MAX_RETRIES to 3.", "Set max retries to 3."),  # not "max R E T R I E S"
        ("Send JSON_DATA now.", "Send Jason data now."),
        ("Then ϕ and ϵ here.", "Then phi and epsilon here."),  # symbol forms, by their letters' names
        ("Take 5 μg.", "Take 5 µg."),  # the sentence's full stop kept
        ("Test H0: μA = μB here.", "Test H0: mu A = mu B here."),  # after no amount: statistics' mu, no unit
        ("Age:\n>= 18 years old.", "Age:\ngreater than or equal to 18 years old."),  # no quote's mark
        ("Open 9:00–17:00 daily.", "Open 9:00 to 17:00 daily."),  # the range's "to" was lost
        ("Open 9am-5pm daily.", "Open 9am to 5pm daily."),
        ("Ping 127.0.0.1 now.", "Ping 127 dot 0 dot 0 dot 1 now."),  # was "one two seven zero zero one"
        ("See section 1.2.3.4 now.", "See section 1 point 2 point 3 point 4 now."),  # numbered: no address
        ("Under § 4.1.2.3 it holds.", "Under § 4 point 1 point 2 point 3 it holds."),
        ("Install version 10.0.0.1 today.", "Install version 10 point 0 point 0 point 1 today."),
        ("See subsection 2.1.3.4 now.", "See subsection 2 point 1 point 3 point 4 now."),
        ("Version: 10.0.0.1 is out.", "Version: 10 point 0 point 0 point 1 is out."),
        (
            "Firewall rules 10.0.0.1 and 10.0.0.2 hold.",
            "Firewall rules 10 dot 0 dot 0 dot 1 and 10 dot 0 dot 0 dot 2 hold.",
        ),
        ("Table 10.0.0.1 is full.", "Table 10 dot 0 dot 0 dot 1 is full."),  # a routing table's address
        ("The value of π is 3.14.", "The value of pi is 3.14."),  # Greek letters as symbols, by their names
        ("Take β-blockers and Σ now.", "Take beta-blockers and sigma now."),
        ("If Δt is small, 2πr grows.", "If delta t is small, 2 pi r grows."),
        ("Take 5 μg and 3 μm.", "Take 5 µg and 3 µm."),  # Greek mu before a unit: the micro sign, "micro"
        ("Rated 5/5 by users.", "Rated 5 out of 5 by users."),  # a rating: was "May fifth"
        ("I give it 8/10.", "I give it 8 out of 10."),  # was "eight ten"
        ("Score: 9/10 overall.", "Score: 9 out of 10 overall."),
        ("It has 4.5/5 stars.", "It has 4.5 out of 5 stars."),  # was "four point five five"
        ("It got 3/5 stars.", "It got 3 out of 5 stars."),
        ("Press Ctrl+C to stop.", "Press control C to stop."),  # was "sintrrol plus C"
        ("Press Cmd+Shift+P now.", "Press command shift P now."),  # was "C M D plus shift plus P"
        ("Hold the Ctrl key.", "Hold the control key."),
        ("Meet at 10.30 today.", "Meet at 10:30 today."),  # a time: was "ten point three"
        ("Open from 9.15pm on.", "Open from 9:15pm on."),
        ("The call is at 14.30 tomorrow.", "The call is at 14:30 tomorrow."),
        ("Press Ctrl+Del then Opt+Esc.", "Press control delete then option escape."),
        ("It failed at 2024-12-02T10:30:00Z here.", "It failed at 2024-12-02 at 10:30 UTC here."),  # ISO 8601
        ("Since 2024-12-02 14:05:09+01:00 now.", "Since 2024-12-02 at 14:05:09 UTC plus 1 now."),
        ("Until 2024-12-02T08:00-05:30 then.", "Until 2024-12-02 at 08:00 UTC minus 5:30 then."),
        ("Edit /etc/hosts now.", "Edit slash E T C slash hosts now."),  # was "etcetera hosts"
        ("See /etc/nginx/nginx.conf.", "See slash E T C slash nginx slash nginx dot conf."),  # its dot was lost
        ("Open ~/.bashrc now.", "Open tilde slash dot bashrc now."),  # was "about slash bashrc"
        ("Run ./run_all.sh now.", "Run dot slash run underscore all dot sh now."),
        ("The ΔΔCt method.", "The delta delta Ct method."),  # a term's symbols, no Greek word: was refused
        ("It took 5 μs and 1 µs.", "It took 5 microseconds and 1 microsecond."),  # "5 mu s", "1 micro s"
        ("Add 10 µL, then 2.5 μM.", "Add 10 microliters, then 2.5 micromolar."),
        ("So x → ∞ and A ⇒ B here.", "So x to infinity and A implies B here."),  # ∞ and ⇒ were silent
        ("Then √2 and a ∈ S, b ∉ S here.", "Then square root of 2 and a in S, b not in S here."),
        ("So f -> g here.", "So f to g here."),  # not "greater than"
        ("It is $9.99/month or $99/yr now.", "It is $9.99 per month or $99 per year now."),  # the "per" was lost
        ("Meet Tue, Dec 2 at noon.", "Meet Tuesday, Dec 2 at noon."),  # "Tue" was "two"
        ("It ends Fri 5 Jan.", "It ends Friday 5 Jan."),
    ],
)
def test_what_an_llm_writes_is_read_as_a_listener_expects(written: str, as_if: str) -> None:
    assert said(written) == said(as_if)


@pytest.mark.parametrize(
    "text",
    [
        "It costs $5.50 now.",
        "It costs 5.50$ now.",
        "It costs USD 5.00 now.",
        "It costs 5.00 EUR now.",
        "It costs 5.50 dollars now.",
        "It rose 2.5% today.",
        "Version 3.11.2 is out.",
        "5 > 3 here.",
        "He sat down, Sun 5 times.",
        "It is 5/10 now.",
        "It costs € 5.50 now.",  # money, its sign a space before
        "From €10.00 – 20.00 now.",
        "Meet at 5.00 pm, at 10.30 or so.",
        "It rose 2.50% and the price is 19.90 now.",
        "Orders\n>$100 ship free.",
        "Use [^0-9] or [^a-z] to match.",  # a character class, no footnote
        "Set UUID_V4 and IEEE_754 now.",  # acronyms, spelled as before
        "Mail MAX_USER@example.com now.",  # an address, its underscore said
        "Then ptr->next is null.",
        "Wed 10 Mayhem now.",
    ],
)
def test_what_reads_well_already_is_read_as_before(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Amounts keep their cents, a version of three numbers its points, a "greater than" inside a line its words."""
    before = said(text)
    rewrites = ("markup_unsaid", "terms_said", "signs_as_words", "decimals_with_their_zeros", "time_ranges_with_to")
    for rewrite in (*rewrites, "ip_addresses_with_dots", "rates_with_per", "weekdays_in_full"):
        monkeypatch.setattr(reading, rewrite, lambda written, *_: written)
    assert said(text) == before
