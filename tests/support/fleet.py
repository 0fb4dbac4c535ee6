"""A fleet of speech replicas behind HAProxy, started by deploy/fleet/fleet.sh, and the drills run against one under
steady load: replicas restarted, one killed, one's code2wav stage process killed. tests/e2e/test_fleet.py runs them
on a CPU fleet it starts; tests/gpu/test_fleet.py on a GPU fleet already running."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.debian import ensure_package
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "deploy/fleet/fleet.sh"


def ensure_haproxy() -> str:
    """Debian's haproxy, installed with apt-get when it is not there."""
    sbin = Path("/usr/sbin/haproxy")  # off PATH for a user other than root
    return ensure_package("haproxy", lambda: shutil.which("haproxy") or (str(sbin) if sbin.exists() else None))


def free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports."""
    for _ in range(100):
        base = free_port()
        try:
            sockets = []
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")


@dataclass
class Fleet:
    """A fleet that deploy/fleet/fleet.sh started with `env` (its settings: REPLICAS, BASE_PORT, STATS, WORK, ...)."""

    url: str
    env: dict[str, str]
    work: Path

    @property
    def replicas(self) -> int:
        return int(self.env["REPLICAS"])

    def replica_url(self, index: int) -> str:
        return f"http://127.0.0.1:{int(self.env['BASE_PORT']) + index}"

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(FLEET), *args], env=self.env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def replica_log(self, index: int) -> str:
        return (self.work / f"replica-{index}.log").read_text(errors="replace")


@contextmanager
def started_fleet(work: Path, replicas: int, server: str | Path, settings: dict[str, str]) -> Iterator[Fleet]:
    """`fleet.sh start`: `replicas` of `server` (what fleet.sh runs as SPEECH_SERVER) behind Debian's HAProxy on free
    loopback ports, with `settings` in every replica's environment; `fleet.sh stop` after."""
    front = free_port()
    env = {
        **os.environ,
        "REPLICAS": str(replicas),
        "FRONT": f"127.0.0.1:{front}",
        "STATS": f"127.0.0.1:{free_port()}",
        "BASE_PORT": str(free_ports(replicas)),
        "WORK": str(work),
        "SPEECH_SERVER": str(server),
        "HAPROXY": ensure_haproxy(),
        "PYTHON": sys.executable,
        **settings,
    }
    running = Fleet(f"http://127.0.0.1:{front}", env, work)
    running.run("start")
    try:
        yield running
    finally:
        subprocess.run([str(FLEET), "stop"], env=env, capture_output=True, timeout=120, cwd=ROOT)


@dataclass
class Load:
    """Clients that keep asking the fleet for speech until told to stop, each outcome counted."""

    url: str
    # fields every request carries besides its text and format (a GPU fleet on random weights: max_new_tokens)
    extra: dict[str, object] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def record(self, ok: bool, what: str) -> None:
        self.outcomes["ok" if ok else "failed"] += 1
        if not ok:
            self.failures.append(what)

    def http(self, index: int) -> None:
        """Streamed pcm: a whole body (an incomplete chunked one raises), of whole samples and over a second."""
        with httpx.Client(timeout=60) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                body = {
                    "input": f"The fleet serves request {index} {n} without a gap.",
                    "response_format": "pcm",
                    **self.extra,
                }
                try:
                    with client.stream("POST", f"{self.url}/v1/audio/speech", json=body) as response:
                        data = b"".join(response.iter_bytes())
                    ok = response.status_code == 200 and len(data) % 2 == 0 and len(data) > 2 * 24_000
                    self.record(ok, f"http {response.status_code} {len(data)} bytes")
                except httpx.HTTPError as exc:
                    self.record(False, f"http {type(exc).__name__}: {exc}")

    def websocket(self) -> None:
        """A session a time: one utterance, all its audio, session.done, a normal close."""
        ws_url = self.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                with connect(ws_url, open_timeout=10) as ws:
                    config = {"type": "session.config", "voice": "alloy", "response_format": "pcm", **self.extra}
                    ws.send(json.dumps(config))
                    ws.send(json.dumps({"type": "input.text", "text": f"Session {n} speaks one sentence."}))
                    ws.send(json.dumps({"type": "input.done"}))
                    ws.send(json.dumps({"type": "session.close"}))
                    events, audio = [], 0
                    try:
                        while True:
                            message = ws.recv(timeout=30)
                            if isinstance(message, bytes):
                                audio += len(message)
                            else:
                                events.append(json.loads(message))
                    except ConnectionClosed:
                        pass
                    done = [e for e in events if e["type"] == "audio.done"]
                    ok = ws.close_code == 1000 and events[-1:] and events[-1]["type"] == "session.done"
                    ok = bool(ok) and len(done) == 1 and done[0]["total_bytes"] == audio > 0
                    self.record(ok, f"websocket close {ws.close_code}, events {[e['type'] for e in events]}")
            except Exception as exc:  # a refused upgrade, a timeout: the session failed
                self.record(False, f"websocket {type(exc).__name__}: {exc}")

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self.http, args=(i,)) for i in range(3)]
        self.threads.append(threading.Thread(target=self.websocket))
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def served(fleet: Fleet, index: int) -> int:
    return fleet.replica_log(index).count('"message": "speech request"')


# about four minutes of speech: at 48 kHz, 23 MB of pcm, more than the sockets between a replica and its client hold,
# so that a stream read only in part is still being written by its replica
LONG = " ".join(["The fleet keeps speaking while one of its replicas is killed without warning."] * 50)


def routed(fleet: Fleet) -> dict[str, str]:
    """Request id -> the replica HAProxy sent it to (r0, r1, ...), from HAProxy's log of finished sessions."""
    pattern = re.compile(r" replicas/(r\d+) .*?\{([^}]*)\}")
    found = {}
    for line in (fleet.work / "haproxy.log").read_text(errors="replace").splitlines():
        match = pattern.search(line)
        if match and match.group(2):
            found[match.group(2)] = match.group(1)
    return found


def busiest(fleet: Fleet) -> int:
    """The replica with the most sessions in progress now, from HAProxy's stats page."""
    text = httpx.get(f"http://{fleet.env['STATS']}/stats;csv", timeout=5).text.lstrip("# ")
    rows = [r for r in csv.DictReader(io.StringIO(text)) if r["pxname"] == "replicas" and r["svname"].startswith("r")]
    return int(max(rows, key=lambda r: int(r["scur"] or 0))["svname"][1:])


def restarts_under_load(
    fleet: Fleet,
    which: list[int],
    restart_timeout: float = 300,
    least_ok: int = 50,
    extra: dict[str, object] | None = None,
) -> None:
    """SIGTERM each replica of `which` in turn (it drains: HAProxy takes it out within a second, retries elsewhere what
    it refused before answering, and the streams it holds finish), start it again, next: every HTTP stream and every
    WebSocket session of the steady load completes whole, each restarted replica started once more, and the fleet
    served on."""
    starts = [fleet.replica_log(i).count("Application startup complete") for i in range(fleet.replicas)]
    with Load(fleet.url, dict(extra or {})) as load:
        time.sleep(1.0)
        for index in which:
            fleet.run("restart", str(index), timeout=restart_timeout)
        before = [served(fleet, i) for i in range(fleet.replicas)]
        time.sleep(2.0)
    print(f"replicas {which} restarted under load: {dict(load.outcomes)}")  # every request counted (pytest -s)
    assert not load.failures, load.failures[:5]
    assert load.outcomes["ok"] > least_ok, load.outcomes
    after = [served(fleet, i) for i in range(fleet.replicas)]
    assert all(b > a for a, b in zip(before, after, strict=True)) or sum(after) > sum(before)
    for index in range(fleet.replicas):
        again = fleet.replica_log(index).count("Application startup complete") - starts[index]
        assert again == (1 if index in which else 0), (index, again)


def kill_under_load(fleet: Fleet, restart_timeout: float = 300, extra: dict[str, object] | None = None) -> None:
    """`kill -9` of one replica while streams it serves are half read: each of them ends in an error its client sees
    (an incomplete chunked body), never as a short body that looks whole; every other request, before, during and
    after, is served whole (HAProxy retries a refused connection elsewhere), but for what the steady load had in
    flight on it, cut as visibly; and the replica comes back."""
    held: list[tuple[str, httpx.Response, Iterator[bytes]]] = []
    client = httpx.Client(timeout=60)
    with Load(fleet.url, dict(extra or {})) as load:
        for n in range(6):  # long streams, read only in part: still being served when the replica dies
            request_id = f"held-{n}"
            response = client.send(
                client.build_request(
                    "POST",
                    f"{fleet.url}/v1/audio/speech",
                    json={"input": LONG, "response_format": "pcm", "sample_rate": 48000},
                    headers={"x-request-id": request_id},
                ),
                stream=True,
            )
            assert response.status_code == 200
            chunks = response.iter_raw(8192)
            assert next(chunks)
            held.append((request_id, response, chunks))
        victim = busiest(fleet)  # a replica holding some of them (leastconn spreads them by its own count)
        fleet.run("kill", str(victim))
        time.sleep(2.0)  # HAProxy's health check takes it out; requests meanwhile are retried elsewhere
        outcomes = {}
        for request_id, response, chunks in held:
            try:
                outcomes[request_id] = ("whole", sum(len(chunk) for chunk in chunks))
            except httpx.HTTPError as exc:
                outcomes[request_id] = ("cut", type(exc).__name__)
            finally:
                response.close()
    client.close()
    print(f"replica {victim} killed: held {outcomes}; steady load {dict(load.outcomes)}, {load.failures}")
    to = routed(fleet)
    cut = {request_id for request_id, (how, _) in outcomes.items() if how == "cut"}
    assert cut and cut == {request_id for request_id in outcomes if to.get(request_id) == f"r{victim}"}, (outcomes, to)
    assert len({size for how, size in outcomes.values() if how == "whole"}) == 1  # the rest came whole, all alike
    # the steady load: at most what each of its 4 clients had in flight on the victim, each cut visibly (an incomplete
    # body, an abnormal close), never a refusal or a short answer that looks whole
    visible = re.compile(r"^(http (RemoteProtocolError|ReadError)|websocket (close 1006|ConnectionClosedError))")
    assert len(load.failures) <= 4 and all(visible.match(failure) for failure in load.failures), load.failures
    fleet.run("restart", str(victim), timeout=restart_timeout)
    assert httpx.get(f"{fleet.replica_url(victim)}/ready", timeout=5).status_code == 200


def stage_killed(fleet: Fleet, victim: int, body: dict[str, object], restart_timeout: float = 300) -> None:
    """`fleet.sh kill-stage I` kills the replica's code2wav stage process (vllm-omni titles it
    StageEngineCoreProc_stage1..., and so does the CPU tests' stand-in): the replica's readiness fails within the 5 s
    goal, HAProxy takes it out, its liveness fails (engine_failed) for an orchestrator to restart it, it accepts
    nothing (503), and the fleet serves every request `body` asks meanwhile; `restart` brings it back."""
    replica = fleet.replica_url(victim)
    no_ps = fleet.work / "no-procps"  # a slim host without procps: the script reads /proc itself
    no_ps.mkdir(exist_ok=True)
    (no_ps / "ps").write_text("#!/bin/sh\nexit 127\n")
    (no_ps / "ps").chmod(0o755)
    killed = subprocess.run(
        [str(FLEET), "kill-stage", str(victim)],
        env={**fleet.env, "PATH": f"{no_ps}:{fleet.env['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert killed.returncode == 0, killed.stdout + killed.stderr
    started = time.monotonic()
    # the log line names the pattern, however long the process's path
    assert "which holds 'StageEngineCoreProc_stage1'" in killed.stdout
    while httpx.get(f"{replica}/ready", timeout=5).status_code != 503:
        assert time.monotonic() - started < 5, "readiness still passes 5 s after the stage process died"
        time.sleep(0.1)
    health = httpx.get(f"{replica}/health", timeout=5)
    assert health.status_code == 503 and health.json()["error"]["code"] == "engine_failed"
    assert httpx.post(f"{replica}/v1/audio/speech", json=body, timeout=10).status_code == 503
    # HAProxy's next check (every second, out after one failure) takes it out of the pool: within the 5 s goal
    while f"r{victim} DOWN" not in fleet.run("status").stdout:
        assert time.monotonic() - started < 5, "HAProxy still sends the replica work 5 s after its stage died"
        time.sleep(0.2)
    for _ in range(6):  # leastconn would pick the idle victim first, were it in the pool
        assert httpx.post(f"{fleet.url}/v1/audio/speech", json=body, timeout=60).status_code == 200
    nothing = subprocess.run(
        [str(FLEET), "kill-stage", "0", "NoSuchStage"],
        env=fleet.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nothing.returncode == 1 and "no process" in nothing.stdout  # a pattern that matches nothing says so
    fleet.run("restart", str(victim), timeout=restart_timeout)
    assert httpx.get(f"{replica}/ready", timeout=5).status_code == 200
