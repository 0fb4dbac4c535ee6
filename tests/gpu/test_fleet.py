"""The fleet's drills (tests/support/fleet.py) on a GPU fleet already running: omni replicas, one per GPU, behind
HAProxy, started by deploy/fleet/fleet.sh (ENGINE=omni) with the settings in this process's environment (REPLICAS,
FRONT, STATS, BASE_PORT, WORK, SPEECH_SERVER, HAPROXY, START_WAIT_S, ...), under steady load over HTTP and the
WebSocket, as tests/e2e/test_fleet.py runs them on a CPU fleet.

SPEECH_GPU_FLEET_WORK: the fleet's WORK folder (its pid files and logs); the tests skip without it.
SPEECH_GPU_FLEET_RESTARTS=0: the replicas restarted in turn under load (comma-separated; all of them is the rolling
restart, each restart an omni replica's whole start); SPEECH_GPU_FLEET_RESTART_S=900: how long one restart may take.
SPEECH_GPU_FLEET_BODY='{"max_new_tokens": 100}': fields (a JSON object) for the drills' steady load and the requests
sent while a replica is out; the long streams the kill drill holds half read go without them. A fleet on random
weights with SPEECH_OMNI__FIXED_LENGTH=true needs a length: without one each request runs to the talker's cap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, kill_under_load, restarts_under_load, stage_killed

RESTART_S = float(os.environ.get("SPEECH_GPU_FLEET_RESTART_S", "900"))
EXTRA: dict[str, object] = json.loads(os.environ.get("SPEECH_GPU_FLEET_BODY", "{}"))
assert isinstance(EXTRA, dict), f"SPEECH_GPU_FLEET_BODY is not a JSON object: {EXTRA!r}"


@pytest.fixture(scope="module")
def gpu_fleet() -> Fleet:
    work = os.environ.get("SPEECH_GPU_FLEET_WORK")
    if not work:
        pytest.skip("SPEECH_GPU_FLEET_WORK is not set: no GPU fleet to test")
    env = {**os.environ, "WORK": work}
    missing = [key for key in ("REPLICAS", "FRONT", "STATS", "BASE_PORT") if key not in env]
    if missing:
        pytest.fail(f"the fleet's settings are not in the environment: {missing}")
    fleet = Fleet(f"http://{env['FRONT']}", env, Path(work))
    assert "r0 UP" in fleet.run("status").stdout, "the fleet is not running"
    return fleet


def test_replicas_restarted_under_load_fail_and_truncate_nothing(gpu_fleet: Fleet) -> None:
    which = [int(index) for index in os.environ.get("SPEECH_GPU_FLEET_RESTARTS", "0").split(",")]
    restarts_under_load(gpu_fleet, which, restart_timeout=RESTART_S, extra=EXTRA)


def test_a_replica_killed_fails_only_the_streams_it_held_each_visibly(gpu_fleet: Fleet) -> None:
    kill_under_load(gpu_fleet, restart_timeout=RESTART_S, extra=EXTRA)


def test_a_code2wav_process_killed_takes_its_replica_out_and_fails_its_liveness(gpu_fleet: Fleet) -> None:
    body = {"input": "Spoken while a replica is out.", "response_format": "pcm", **EXTRA}
    stage_killed(gpu_fleet, gpu_fleet.replicas - 1, body, restart_timeout=RESTART_S)
