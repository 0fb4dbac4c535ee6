"""The README's "Try it" examples, run as written (only the address changed) against a real server: curl into a file
and into ffplay, the OpenAI SDK, and server-sent events with curl, the OpenAI SDK and Node's fetch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.audio import decode
from tests.support.server import RunningServer

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://localhost:8000"


def try_it_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block in the README's "Try it" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```$", section, re.S | re.M)


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


def test_the_section_has_every_kind_of_example() -> None:
    languages = [language for language, _ in BLOCKS]
    assert languages.count("sh") >= 2 and languages.count("python") >= 2 and languages.count("js") == 1
    joined = "\n".join(code for _, code in BLOCKS)
    assert '"stream_format": "sse"' in joined and 'stream_format="sse"' in joined and "iter_lines" in joined
    assert "-ac 1" in joined and "-ch_layout" not in joined  # ffplay's portable channel option


@pytest.mark.parametrize(("language", "code"), BLOCKS, ids=[f"{lang}-{i}" for i, (lang, _) in enumerate(BLOCKS)])
def test_example_runs(server: RunningServer, tmp_path: Path, language: str, code: str) -> None:
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
        command = ["bash", "-c", f"{node} sse.mjs > hello.pcm"]  # as the README runs it
    else:
        raise AssertionError(f"no runner for {language} blocks")
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = audio_files(tmp_path)
    if '"stream_format": "sse"' in code and language == "sh":  # curl prints the events
        assert done.stdout.count('"type":"speech.audio.delta"') >= 1 and '"type":"speech.audio.done"' in done.stdout
    elif "ffplay" not in code or "-o hello" in code:
        assert written, "the example wrote no audio"
    assert all(duration > 0.5 for duration in written.values()), written
