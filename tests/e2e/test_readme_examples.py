"""The "Try it" examples of the README and of the docs' home page, run as written (only the address changed) against a
real server: curl into a file and into ffplay, the OpenAI SDK, and server-sent events with curl, the OpenAI SDK and
Node's fetch. The README shows one curl and one SDK example; docs/index.md has them all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.audio import decode
from tests.support.docs import fenced_blocks
from tests.support.server import RunningServer

README_URL = "http://localhost:8000"
PAGES = ("README.md", "docs/index.md")  # the pages whose "## Try it" examples run here


def try_it_blocks() -> list[tuple[str, str, str]]:
    """(page, language, code) of every fenced block in the "Try it" sections; an example both pages show runs once."""
    seen: set[str] = set()
    found = []
    for page in PAGES:
        for language, code in fenced_blocks(page, "## Try it"):
            if code not in seen:
                seen.add(code)
                found.append((page, language, code))
    return found


BLOCKS = try_it_blocks()


def ensure_ffplay() -> None:
    """FFmpeg's ffplay, from Debian's ffmpeg package when missing (the README's player)."""
    if shutil.which("ffplay"):
        return
    if os.geteuid() != 0:
        pytest.skip("ffplay (Debian's ffmpeg package) is missing and installing it needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "ffmpeg"]):
        subprocess.run(command, check=True, env=env, capture_output=True, timeout=900)


def audio_files(folder: Path) -> dict[str, float]:
    """Duration in seconds of every audio file an example wrote."""
    found = {}
    for path in folder.iterdir():
        if path.suffix in (".mp3", ".wav", ".pcm"):
            found[path.name] = decode(path.read_bytes(), path.suffix[1:]).duration_s
    return found


def test_the_sections_have_every_kind_of_example() -> None:
    languages = [language for _, language, _ in BLOCKS]
    assert languages.count("sh") >= 2 and languages.count("python") >= 2 and languages.count("js") == 1
    joined = "\n".join(code for _, _, code in BLOCKS)
    assert '"stream_format": "sse"' in joined and 'stream_format="sse"' in joined and "iter_lines" in joined
    assert "-ac 1" in joined and "-ch_layout" not in joined  # ffplay's portable channel option
    readme = [language for language, _ in fenced_blocks("README.md", "## Try it")]
    assert "sh" in readme and "python" in readme, readme  # the front door keeps one curl and one SDK example


@pytest.mark.parametrize(
    ("page", "language", "code"),
    BLOCKS,
    ids=[f"{page.removesuffix('.md')}-{lang}-{i}" for i, (page, lang, _) in enumerate(BLOCKS)],
)
def test_example_runs(server: RunningServer, tmp_path: Path, page: str, language: str, code: str) -> None:
    code = code.replace(README_URL, server.base_url)
    env = {**os.environ, "SDL_AUDIODRIVER": "dummy"}  # ffplay plays into SDL's null device: no sound card here
    if language == "sh":
        if "ffplay" in code:
            ensure_ffplay()
        command = ["bash", "-c", "set -euo pipefail\n" + code]
    elif language == "python":
        command = [sys.executable, "-c", code]
    elif language == "js":
        node = shutil.which("node")
        if node is None:
            pytest.skip("Node.js is not installed")
        version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
        if int(version.lstrip("v").split(".")[0]) < 20:
            pytest.skip(f"the example is for Node.js 20 or later; this is {version.strip()}")
        (tmp_path / "sse.mjs").write_text(code)
        command = ["bash", "-c", f"{node} sse.mjs > hello.pcm"]  # as the page runs it
    else:
        raise AssertionError(f"no runner for {language} blocks ({page})")
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, page + "\n" + done.stdout[-2000:] + done.stderr[-2000:]
    written = audio_files(tmp_path)
    if '"stream_format": "sse"' in code and language == "sh":  # curl prints the events
        assert done.stdout.count('"type":"speech.audio.delta"') >= 1 and '"type":"speech.audio.done"' in done.stdout
    elif "ffplay" not in code or "-o hello" in code:
        assert written, "the example wrote no audio"
    assert all(duration > 0.5 for duration in written.values()), written
