"""A server asked to start with settings it cannot use stops at once and says which SPEECH_* variable (or flag) is
wrong, in one line an operator reads, never a traceback; API keys that were set but name no key stop it rather than
leave the API open."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.server import free_port, server_command


def start(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    full_env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("SPEECH_")},
        "SPEECH_HOST": "127.0.0.1",
        "SPEECH_PORT": str(free_port()),
        **env,
    }
    command = [*server_command(), "--engine", "embedded", *flags]
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("env", "flags", "named"),
    [
        ({"SPEECH_MAX_CONCURRENCY": "-1"}, (), "SPEECH_MAX_CONCURRENCY"),
        ({"SPEECH_MAX_QUEUE": "abc"}, (), "SPEECH_MAX_QUEUE"),
        ({"SPEECH_EMBEDDED__WORKERS": "0"}, (), "SPEECH_EMBEDDED__WORKERS"),
        ({"SPEECH_VOICE_ALIASES": "notjson"}, (), "SPEECH_VOICE_ALIASES"),
        # a key of an engine's group that is none of its settings, in the group given whole or as a variable of its own
        ({"SPEECH_EMBEDDED": '{"workerz": 2}'}, (), "SPEECH_EMBEDDED: 'workerz'"),
        ({"SPEECH_EMBEDDED__WORKERZ": "2"}, (), "SPEECH_EMBEDDED__WORKERZ"),
        ({}, ("--port", "99999"), "--port"),
        ({"SPEECH_API_KEYS_FILE": "/nonexistent/keys"}, (), "SPEECH_API_KEYS_FILE"),
        ({}, ("--engine", "omni"), "--engine"),  # not installed here: neither vllm-omni nor a GPU
        # a CA bundle that is missing, or holds no certificate (this file), would fail every ref_audio fetch instead
        ({"SPEECH_REF_AUDIO_CA_BUNDLE": "/nonexistent/ca.pem"}, (), "SPEECH_REF_AUDIO_CA_BUNDLE"),
        ({"SPEECH_REF_AUDIO_CA_BUNDLE": __file__}, (), "SPEECH_REF_AUDIO_CA_BUNDLE"),
    ],
)
def test_a_setting_the_server_cannot_use_is_named_in_one_line(
    env: dict[str, str], flags: tuple[str, ...], named: str
) -> None:
    done = start(env, *flags)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3, done.stderr


@pytest.mark.parametrize("keys", [",", " , ", '[" "]', " "])  # blanks alone too: set, naming no key
def test_api_keys_that_name_no_key_stop_the_start_instead_of_opening_the_api(tmp_path: Path, keys: str) -> None:
    """Set but empty (a list of blanks, a file of comments only): the operator meant the API to be closed."""
    done = start({"SPEECH_API_KEYS": keys})
    assert done.returncode != 0 and "SPEECH_API_KEYS" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    comments = tmp_path / "keys"
    comments.write_text("# only comments\n\n")
    done = start({"SPEECH_API_KEYS_FILE": str(comments)})
    assert done.returncode != 0 and "SPEECH_API_KEYS_FILE" in done.stderr, done.stderr
    assert "open" in done.stderr, done.stderr


def test_a_secret_setting_is_named_but_never_echoed() -> None:
    """A key that fails a check is named by its variable; its value stays out of the message."""
    done = start({"SPEECH_API_KEYS": "sk-secret-123", "SPEECH_API_KEY_MAX_CONCURRENCY": "0"})
    assert done.returncode != 0 and "SPEECH_API_KEY_MAX_CONCURRENCY" in done.stderr, done.stderr
    assert "sk-secret-123" not in done.stderr + done.stdout


@pytest.mark.parametrize(("where", "named", "said"), [("port", "SPEECH_PORT", "in use"), ("host", "SPEECH_HOST", "")])
def test_an_address_it_cannot_listen_on_stops_it_in_one_line_before_the_engine_loads(
    where: str, named: str, said: str
) -> None:
    """A port another process holds, or a host that is no address of this machine (192.0.2.1: a documentation
    address), is found before the engine's load (minutes on a GPU engine), in one line naming the variable."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        env = {"SPEECH_PORT": str(held.getsockname()[1])} if where == "port" else {"SPEECH_HOST": "192.0.2.1"}
        done = start(env)
    assert done.returncode != 0
    assert named in done.stderr and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "engine ready" not in done.stderr, done.stderr


def test_the_port_flag_is_named_where_it_was_given() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        done = start({}, "--port", str(held.getsockname()[1]))
    assert done.returncode != 0 and "--port" in done.stderr, done.stderr


def test_version_prints_the_version_and_exits_zero() -> None:
    """`speech-server --version` answers as a command-line program does, whatever the settings, starting nothing."""
    from app import __version__

    done = start({"SPEECH_PORT": "not a port"}, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"speech-server {__version__}", done.stdout


def test_an_engine_not_installed_names_the_extra_to_install() -> None:
    """sglang-omni can never be beside the test tools (uv.lock keeps them apart): `--engine sglang` here is an engine
    not installed, as on any machine its extra was not installed on."""
    done = start({}, "--engine", "sglang")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "speech-server: SPEECH_ENGINE (--engine): the sglang engine is not installed (no sglang-omni in this Python "
        'environment): install the `sglang` extra: make install EXTRAS="--extra sglang --extra align" '
        "SYNC_FLAGS=--no-dev"
    ], done.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SPEECH_REF_AUDIO_CA_BUNDLE": "/nonexistent/ca.pem"}, "SPEECH_REF_AUDIO_CA_BUNDLE"),
        ({"SPEECH_API_KEYS_FILE": "/nonexistent/keys"}, "SPEECH_API_KEYS_FILE"),
    ],
)
def test_a_file_setting_it_cannot_read_stops_it_before_the_engine_is_made(env: dict[str, str], named: str) -> None:
    """Checked after the engine had been made (on a GPU engine, its model's files read), and after whatever that
    refused: here the sglang engine, not installed, was named instead of the file at fault. The file is named first."""
    done = start(env, "--engine", "sglang")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"speech-server: {named}: "), done.stderr
    assert "admission" not in done.stdout + done.stderr  # logged once the engine is made
