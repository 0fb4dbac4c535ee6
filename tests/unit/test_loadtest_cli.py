"""`speech-loadtest --help` shows every option's default."""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest.cli import build_parser, parse_args
from loadtest.targets import Target, discover


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


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--rate", "-1"], "--rate takes numbers above 0"),  # it had spun forever, memory growing
        (["--rate", "0"], "--rate takes numbers above 0"),
        (["--rate", "fast"], "--rate takes floats separated by commas"),
        (["--concurrency", "0"], "--concurrency takes numbers above 0"),
        (["--concurrency", "abc"], "--concurrency takes ints separated by commas"),
        (["--concurrency", "-1"], "--concurrency takes numbers above 0"),
        (["--requests", "0"], "--requests must be 1 or more"),
        (["--warmup", "-1"], "--warmup must be 0 or more"),
        (["--rounds", "0"], "--rounds must be 1 or more"),
        (["--duration", "0"], "--duration must be more than 0 seconds"),
        (["--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--header", "NoColon"], "--header must look like 'Name: value'"),
        (["--header", "Authorization: Bearer k\u00e9y\u2019"], "HTTP carries a header as Latin-1 text"),
        (["--rate", "inf"], "--rate takes numbers above 0"),  # as endless a loop as a negative rate
        (["--rate", "nan"], "--rate takes numbers above 0"),
        (["--text-rate", "nan"], "--text-rate must be a finite number"),
        (["--keepalive-expiry", "inf"], "--keepalive-expiry must be a finite number"),
    ],
)
def test_options_it_cannot_run_with_are_usage_errors_not_tracebacks_or_empty_reports(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--target", "http://127.0.0.1:9", *argv])
    assert exited.value.code == 2 and said in capsys.readouterr().err


def test_a_target_it_cannot_reach_or_that_refuses_it_is_said_in_one_line(tmp_path: Path) -> None:
    """Before any request: a closed port, a URL without a scheme, and an output folder that cannot be written (which
    had cost the whole run's results, written only at its end), each a message naming what is wrong, no traceback."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    for target, said in ((f"http://127.0.0.1:{closed}", "cannot be reached"), (f"127.0.0.1:{closed}", "cannot be")):
        done = subprocess.run(
            [sys.executable, "-m", "loadtest.cli", "--target", target, "--requests", "1", "--concurrency", "1",
             "--no-progress", "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.cli", "--target", f"http://127.0.0.1:{closed}", "--out", str(blocked / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "--out: cannot write" in done.stderr and "Traceback" not in done.stderr


async def test_a_target_that_wants_a_key_or_answers_no_json_is_told_apart_from_one_without_voices() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audio/voices":
            return httpx.Response(401, json={"error": {"code": "invalid_api_key"}})
        return httpx.Response(200, text="<html>not a speech server</html>")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(httpx.HTTPStatusError):  # said as the 401 it is (cli: "pass its key")
            await discover(client, Target(0, "http://a", "m", None))
        with pytest.raises(RuntimeError, match="did not answer JSON"):
            await discover(client, Target(0, "http://a", None, "v"))
