"""What the fleet's balancer (deploy/fleet/haproxy.cfg.in, started by deploy/fleet/fleet.sh, Debian's HAProxy) does
to a stream's timing, in front of a stand-in replica (tests/support/paced_replica.py) that sends its first window at
once and the next a second later."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.fleet import ROOT, Fleet, routed, started_fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timing]


@pytest.fixture(scope="module")
def balancer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("balancer")
    replica = work / "paced-replica"
    replica.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT}/tests/support/paced_replica.py" "$@"\n')
    replica.chmod(0o755)
    with started_fleet(work, 1, replica, {}) as running:
        yield running


def first_window_ms(url: str) -> float:
    """Milliseconds from sending the request to holding the stream's first bytes."""
    with httpx.Client(timeout=10) as client:
        started = time.perf_counter()
        with client.stream("POST", f"{url}/v1/audio/speech", json={"input": "Hello."}) as response:
            assert response.status_code == 200
            assert next(response.iter_raw())
            return (time.perf_counter() - started) * 1000


def test_the_first_audio_passes_the_balancer_as_soon_as_the_replica_sends_it(balancer: Fleet) -> None:
    """HAProxy merges what it forwards (MSG_MORE) unless told not to (`option http-no-delay`): a stream's first window,
    alone until the next comes, then left the kernel only when its 200 ms timer expired, and every stream's first
    audio came 200 ms late through the balancer (on four H200s: the fleet's time to first audio p50 317 ms against
    one replica's 112 ms direct). Held back, not one of ten requests gets its first window within 100 ms; sent on, a
    busy machine slows some of them but not all."""
    direct = [first_window_ms(balancer.replica_url(0)) for _ in range(10)]
    through = [first_window_ms(balancer.url) for _ in range(10)]
    assert min(direct) < 100, direct  # the stand-in sends its first window at once
    assert min(through) < 100, through


def test_the_balancers_log_never_holds_an_api_key(balancer: Fleet) -> None:
    """A browser's WebSocket carries its API key in the query (`?api_key=`: it cannot set headers), which the service
    never logs (docs/websocket.md). HAProxy's HTTP log wrote each request's whole target, the key in it, into the
    fleet's haproxy.log; it now writes the key blanked, and the rest of the line as before: the path, the other
    parameters, the replica and the caller's X-Request-Id."""
    secret = "sk-fleet-log-secret"
    targets = {
        "ws": f"/v1/audio/speech/stream?api_key={secret}",
        "ws-second": f"/v1/audio/speech/stream?voice=alloy&api_key={secret}&x=1",
        "ws-encoded": f"/v1/audio/speech/stream?api%5Fkey={secret}",
    }
    for request_id, target in targets.items():
        httpx.get(f"{balancer.url}{target}", headers={"x-request-id": request_id}, timeout=10)
    log = balancer.work / "haproxy.log"
    deadline = time.monotonic() + 10  # HAProxy logs a request once it ends
    while not set(targets) <= routed(balancer).keys() and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text(errors="replace")
    assert set(targets) <= routed(balancer).keys(), text[-2000:]
    assert secret not in text
    assert '"GET /v1/audio/speech/stream?api_key=<redacted> HTTP/1.1"' in text
    assert '"GET /v1/audio/speech/stream?voice=alloy&api_key=<redacted>&x=1 HTTP/1.1"' in text
