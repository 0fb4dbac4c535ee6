"""Start the real `speech-server` console script on a free loopback port and wait for it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def json_log_records(text: str) -> list[dict[str, object]]:
    """The service's JSON log records in a log, skipping other lines (vllm-omni's plain text, tracebacks)."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def log_events(self) -> list[dict[str, object]]:
        """The server's JSON log lines so far."""
        return json_log_records(self.log_path.read_text(encoding="utf-8", errors="replace"))

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a sample's values over the series whose labels include `labels`, from /metrics now."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.base_url}/metrics", timeout=30).text
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def server_command() -> list[str]:
    script = Path(sys.executable).parent / "speech-server"
    return [str(script)]


def fake_omni_command(*args: str) -> list[str]:
    """The server on the omni engine over the vllm-omni fakes (tests/fakes/omni_server.py, with its `args`); needs
    SPEECH_OMNI__MODEL."""
    return [sys.executable, "-m", "tests.fakes.omni_server", *args]


def start_fake_omni(folder: Path, *args: str, wait_ready: bool = True, **env: str) -> RunningServer:
    """The server on the omni engine over the vllm-omni fakes (with its command-line `args`): a CustomVoice model
    directory in `folder`, the shipped profile, warm-up at batch size 1, and `env` on top."""
    from app.tools.qwen3_tts_model_dir import write_model_dir

    settings = {
        "SPEECH_OMNI__MODEL": str(write_model_dir(folder / "model", "custom_voice")),
        "SPEECH_OMNI__DEPLOY_CONFIG": "deploy/vllm-omni/customvoice.yaml",
        "SPEECH_OMNI__WARMUP_BATCH_SIZES": "1",
        **env,
    }
    return start_server(folder / "server.log", env=settings, wait_ready=wait_ready, command=fake_omni_command(*args))


def fake_sglang_command(*args: str) -> list[str]:
    """The server on the sglang engine over the sglang-omni stand-ins (tests/fakes/sglang_server.py, with its `args`);
    needs SPEECH_SGLANG__MODEL."""
    return [sys.executable, "-m", "tests.fakes.sglang_server", *args]


def start_fake_sglang(folder: Path, *args: str, variant: str = "custom_voice", **env: str) -> RunningServer:
    """The server on the sglang engine over the sglang-omni stand-ins (with its command-line `args`): a model directory
    of `variant` (custom_voice or base) in `folder`, warm-up at batch size 1, and `env` on top."""
    from app.tools.qwen3_tts_model_dir import write_model_dir

    settings = {
        "SPEECH_SGLANG__MODEL": str(write_model_dir(folder / "model", variant)),
        "SPEECH_SGLANG__WARMUP_BATCH_SIZES": "1",
        **env,
    }
    return start_server(folder / "server.log", env=settings, command=fake_sglang_command(*args))


def start_server(
    log_path: Path,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    timeout_s: float = 120.0,
    command: list[str] | None = None,
) -> RunningServer:
    port = free_port()
    full_env = {
        **os.environ,
        "SPEECH_HOST": "127.0.0.1",
        "SPEECH_PORT": str(port),
        "SPEECH_VOICE_STORE": str(log_path.parent / "voices"),  # each server its own store unless a test shares one
        **(env or {}),
    }
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        command or [*server_command(), "--engine", "embedded", "--log-level", "debug"],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=full_env,
    )
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path, env or {})
    if wait_ready:
        wait_until(server, "/ready", timeout_s)
    return server


def wait_for_log(server: RunningServer, message: str, timeout_s: float = 120.0) -> None:
    """Return once the server has logged a line whose message is `message`."""
    deadline = time.monotonic() + timeout_s
    while not any(record.get("message") == message for record in server.log_events()):
        if server.process.poll() is not None:
            raise RuntimeError(f"speech-server exited early:\n{server.log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(f"speech-server never logged {message!r}:\n{server.log_path.read_text()[-4000:]}")
        time.sleep(0.05)


def wait_until(server: RunningServer, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"speech-server exited early:\n{server.log_path.read_text()[-4000:]}")
        try:
            if httpx.get(server.base_url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    server.stop()
    raise TimeoutError(
        f"speech-server not answering {path} after {timeout_s} s:\n{server.log_path.read_text()[-4000:]}"
    )


def raw_answer(server: RunningServer, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """The server's answer to `request`, sent as it is on a socket of its own: its status line, its headers (by
    lower-case name) and its body, read until the server closes the connection."""
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}, body
