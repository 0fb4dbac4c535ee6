"""Code examples read from the README and the docs pages, so that tests run them as a reader would copy them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)$")


def section(page: str, heading: str) -> str:
    """The text under `heading` (a whole line such as "## Try it") in `page` (relative to the repository root), up to
    the next heading of the same or a higher level; lines inside fenced code (a shell's `# comment`) are not
    headings."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = (ROOT / page).read_text().splitlines()
    assert heading in lines, f"{page} has no heading {heading!r}"
    start = lines.index(heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"^#{{1,{level}}} ", line):
            return "\n".join(lines[start:end]) + "\n"
    return "\n".join(lines[start:]) + "\n"


def fenced_blocks(page: str, heading: str, language: str | None = None) -> list[tuple[str, str]]:
    """(language, code) of every fenced block in that section, in order; only `language`'s when given."""
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", section(page, heading), re.S | re.M)
    return [(lang, code) for lang, code in blocks if language is None or lang == language]
