"""A fleet on the CPU: three embedded replicas behind a real HAProxy (Debian's, installed when missing), started and
restarted by deploy/fleet/fleet.sh with deploy/fleet/haproxy.cfg.in, under steady load over HTTP and the WebSocket."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.support.fleet import (
    ROOT,
    Fleet,
    kill_under_load,
    restarts_under_load,
    routed,
    stage_killed,
    started_fleet,
)
from tests.support.server import free_port
from tests.support.wav import pcm_wav

REPLICAS = 3


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    settings = {
        "SPEECH_VOICE_STORE": str(work / "voices"),  # one store for the fleet
        "SPEECH_MAX_CONCURRENCY": "8",  # room for the streams a test holds half read beside the steady load
    }
    with started_fleet(work, REPLICAS, Path(sys.executable).parent / "speech-server", settings) as running:
        yield running


def test_a_rolling_restart_under_load_fails_and_truncates_nothing(fleet: Fleet) -> None:
    """Every replica restarted in turn under steady load (tests/support/fleet.py `restarts_under_load`): nothing
    fails or comes short, and each serves again."""
    restarts_under_load(fleet, list(range(REPLICAS)))


def test_a_replica_killed_fails_only_the_streams_it_held_each_visibly(fleet: Fleet) -> None:
    """`kill -9` of one replica while streams it serves are half read (tests/support/fleet.py `kill_under_load`): only
    those, and what the steady load had in flight on it, fail, each visibly; the replica comes back."""
    kill_under_load(fleet)


def test_balance_roundrobin_renders_a_config_haproxy_runs_and_takes_the_replicas_in_turn(
    fleet: Fleet, tmp_path: Path
) -> None:
    """BALANCE=roundrobin, the comparison fleet.sh offers (benchmarks/cpu/2026-11-27-fleet-balance/): a second HAProxy
    in front of the same replicas (fleet.sh finds them running by their pid files and starts only its balancer) checks
    its config, runs, and sends one request after another to each replica in turn."""
    work = tmp_path / "roundrobin"
    work.mkdir()
    for index in range(REPLICAS):
        shutil.copy(fleet.work / f"replica-{index}.pid", work)
    front, stats = free_port(), free_port()
    env = {**fleet.env, "BALANCE": "roundrobin", "FRONT": f"127.0.0.1:{front}", "STATS": f"127.0.0.1:{stats}"}
    balancer = Fleet(f"http://127.0.0.1:{front}", {**env, "WORK": str(work)}, work)
    try:
        balancer.run("start", timeout=60)
        assert re.search(r"^\s*balance roundrobin$", (work / "haproxy.cfg").read_text(), re.MULTILINE)
        ids = [f"turn-{n}" for n in range(2 * REPLICAS)]
        for request_id in ids:
            body = {"input": f"Request {request_id} takes its turn.", "response_format": "pcm"}
            answer = httpx.post(
                f"{balancer.url}/v1/audio/speech", json=body, headers={"x-request-id": request_id}, timeout=60
            )
            assert answer.status_code == 200 and len(answer.content) > 0, answer.text[:200]
        deadline = time.monotonic() + 10  # HAProxy logs a request once it ends
        while not set(ids) <= routed(balancer).keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        to = routed(balancer)
        order = [to.get(request_id) for request_id in ids]
        assert sorted(order[:REPLICAS]) == [f"r{i}" for i in range(REPLICAS)] and order[REPLICAS:] == order[:REPLICAS]
    finally:
        pid = work / "haproxy.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGTERM)


@pytest.fixture(scope="module")
def cloning_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three cloning replicas (a Base checkpoint over the vllm-omni stand-ins) sharing one voice store, as fleet.sh
    starts omni replicas; the stand-in takes its address from SPEECH_HOST and SPEECH_PORT, and runs a stand-in of
    vllm-omni's code2wav stage process (its engine dies with it)."""
    work = tmp_path_factory.mktemp("cloning-fleet")
    server = work / "speech-server"
    server.write_text(
        "#!/usr/bin/env bash\n"
        "# what fleet.sh runs: $SPEECH_SERVER --engine omni --host H --port P\nwhile [ $# -gt 0 ]; do case $1 in\n"
        "  --host) export SPEECH_HOST=$2; shift 2 ;; --port) export SPEECH_PORT=$2; shift 2 ;; *) shift ;; esac; done\n"
        f"cd {ROOT} && exec {sys.executable} -m tests.fakes.omni_server --stage-process\n"
    )
    server.chmod(0o755)
    settings = {
        "ENGINE": "omni",
        "SPEECH_VOICE_STORE": str(work / "voices"),
        "SPEECH_OMNI__MODEL": str(write_model_dir(work / "model", "base")),
        "SPEECH_OMNI__DEPLOY_CONFIG": "deploy/vllm-omni/voice-clone.yaml",
        "SPEECH_OMNI__WARMUP_BATCH_SIZES": "1",
    }
    with started_fleet(work, REPLICAS, server, settings) as running:
        yield running


def test_a_voice_registered_through_the_balancer_speaks_on_every_replica(cloning_fleet: Fleet) -> None:
    """Registered once, through HAProxy (which replica took it is HAProxy's choice): every replica lists it and speaks
    with it, and so does the fleet."""
    sample = pcm_wav((np.sin(np.linspace(0, 2000, 3 * 24_000)) * 8000).astype("<i2"), 24_000)
    registered = httpx.post(
        f"{cloning_fleet.url}/v1/audio/voices",
        data={"name": "fleet-voice", "consent": "true", "ref_text": "Hello."},
        files={"audio_sample": ("sample.wav", sample, "audio/wav")},
        timeout=60,
    )
    assert registered.status_code == 201, registered.text
    for url in [cloning_fleet.replica_url(i) for i in range(REPLICAS)] + [cloning_fleet.url]:
        names = [voice["name"] for voice in httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["data"]]
        assert "fleet-voice" in names, (url, names)
        spoken = httpx.post(
            f"{url}/v1/audio/speech",
            json={"input": "Spoken in a registered voice.", "voice": "fleet-voice", "response_format": "pcm"},
            timeout=60,
        )
        assert spoken.status_code == 200 and len(spoken.content) > 0, (url, spoken.text[:200])


def test_a_code2wav_process_killed_takes_its_replica_out_and_fails_its_liveness(cloning_fleet: Fleet) -> None:
    """`fleet.sh kill-stage I` under the vllm-omni stand-in (tests/support/fleet.py `stage_killed`): the replica is
    out of the pool within 5 s, fails its liveness, refuses work, and the fleet serves on; it comes back."""
    sample = pcm_wav((np.sin(np.linspace(0, 2000, 3 * 24_000)) * 8000).astype("<i2"), 24_000)
    registered = httpx.post(  # a Base checkpoint speaks registered voices
        f"{cloning_fleet.url}/v1/audio/voices",
        data={"name": "stage-voice", "consent": "true", "ref_text": "Hello."},
        files={"audio_sample": ("sample.wav", sample, "audio/wav")},
        timeout=60,
    )
    assert registered.status_code == 201, registered.text
    body = {"input": "Spoken while a replica is out.", "voice": "stage-voice", "response_format": "pcm"}
    stage_killed(cloning_fleet, 2, body)
