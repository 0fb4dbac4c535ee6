"""`make run` as a new user runs it: loopback only unless HOST says otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import RunningServer, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
LISTEN = "0A"


def listening_addresses(port: int) -> set[str]:
    """The addresses a TCP socket listens on at `port`, from /proc/net/tcp and tcp6."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == LISTEN and int(hex_port, 16) == port:
                raw = bytes.fromhex(address)
                # /proc lists each 32-bit word in host byte order (little-endian here)
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, width // 2, 4))
                found.add(
                    ".".join(str(b) for b in words)
                    if width == 8
                    else ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))
                )
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the listening sockets from /proc/net")
def test_make_run_listens_on_loopback_only(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "make-run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECH_") and k not in ("HOST", "PORT")}
    env["SPEECH_VOICE_STORE"] = str(tmp_path / "voices")  # not the checkout's ./data
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["make", "-C", str(ROOT), "run", f"PORT={port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # make and the server it starts, stopped together below
        )
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until(server, "/ready", timeout_s=180)
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def test_make_run_takes_host() -> None:
    dry = subprocess.run(
        ["make", "-C", str(ROOT), "-n", "run", "HOST=0.0.0.0", "PORT=8123"], capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    assert "--host 0.0.0.0 --port 8123" in dry.stdout


def test_make_run_takes_the_servers_own_settings() -> None:
    """SPEECH_HOST, SPEECH_PORT and SPEECH_ENGINE (docs/settings.md) are the server's settings: `make run` passes them
    on instead of flags that would override them; HOST and PORT still win over them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECH_") and k not in ("HOST", "PORT")}
    env["ENGINE"] = "omni"  # a variable of that name, exported for something else, does not change what is served
    settings = {"SPEECH_HOST": "0.0.0.0", "SPEECH_PORT": "8124", "SPEECH_ENGINE": "omni"}
    dry = subprocess.run(
        ["make", "-C", str(ROOT), "-n", "run"], capture_output=True, text=True, env={**env, **settings}, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    assert "--host 0.0.0.0 --port 8124 --engine omni" in dry.stdout
    plain = subprocess.run(["make", "-C", str(ROOT), "-n", "run"], capture_output=True, text=True, env=env, timeout=60)
    assert (
        plain.returncode == 0 and "--host 127.0.0.1 --port 8000 --engine embedded" in plain.stdout
    )  # loopback and the CPU engine by default
    flags = subprocess.run(
        ["make", "-C", str(ROOT), "-n", "run", "PORT=8125"],
        capture_output=True,
        text=True,
        env={**env, **settings},
        timeout=60,
    )
    assert flags.returncode == 0 and "--port 8125" in flags.stdout, flags.stderr
