"""`speech-loadtest --help` shows every option's default."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from loadtest.cli import build_parser


def test_help_shows_every_default() -> None:
    parser = build_parser()
    text = " ".join(parser.format_help().split())  # wrapping undone
    with_value = [
        a for a in parser._actions if a.default not in (None, False, [], argparse.SUPPRESS) and a.option_strings
    ]
    assert len(with_value) >= 10
    for action in with_value:
        assert f"(default: {action.default})" in text, action.option_strings
    assert "(default: None)" not in text and "(default: False)" not in text
    for said_in_words in ("--model", "--voice", "--rounds", "--out"):
        (action,) = [a for a in parser._actions if said_in_words in a.option_strings]
        assert "(default: " in (action.help or ""), said_in_words


def test_the_default_output_directory_is_not_committed() -> None:
    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", "loadtest-results/20260101-000000/results.json"], timeout=30
    )
    assert ignored.returncode == 0, "loadtest-results/ (speech-loadtest's default --out) must be in .gitignore"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--target", "http://a", "--unique-texts", "--asr"], "--asr"),  # Whisper would hear the labels too
    ],
)
def test_unique_texts_are_refused_where_they_would_be_measured_wrong(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadtest.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(argv)
    err = capsys.readouterr().err
    assert "--unique-texts" in err and said in err


def test_unique_texts_reach_an_engine_target_in_an_open_loop() -> None:
    """An engine+ target draws an open loop's texts itself and is handed the label (loadtest/runner.py)."""
    from loadtest.cli import parse_args

    args = parse_args(["--target", "engine+http://a:1", "--unique-texts", "--rate", "4"])
    assert args.unique_texts and args.rate == "4"
