"""The README is the front door: every link in it leads somewhere. (The docs pages' own links are checked by the
strict site build in `make test`; the README is not part of the site.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs both make it for plain headings: lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(page: Path) -> set[str]:
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6} (.*)", line)):
            lines.append(match.group(1))
    return {slug(line) for line in lines}


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    relative = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert len(relative) >= 10, relative  # the page table and the picture
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            assert anchor in headings(target), link


def test_slug_matches_the_anchors_the_docs_link_to() -> None:
    assert slug("Streaming text in: WebSocket") == "streaming-text-in-websocket"
    assert slug("Under load, on shutdown, and with hostile input") == "under-load-on-shutdown-and-with-hostile-input"
