"""The omni engine's request timeline on the real engine: the server, the talker's process and code2wav's each record
a request's windows while a timeline run is on, every stage event belongs to a request the server handed over, and the
phases of first audio follow one another. Needs the server started with SPEECH_PROFILER_DIR, readable here as
SPEECH_GPU_PROFILER_DIR."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.gpu.support import model_of, stream_windows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy/gpu"))
import omni_timeline

TOKENS = 51  # 50 frames
# the shipped profile's windows (codec_chunk_ramp, codec_chunk_frames, initial_codec_chunk_frames): 1, 2, 4, 8, 16, 19
WINDOWS = len(stream_windows(TOKENS - 1, ramp=[1, 2, 4, 8, 16, 25], steady=25, initial=1))
LOOK_S = 0.5  # the stage processes look at the run's flag every quarter second


@pytest.fixture(scope="module")
def profiler_dir() -> Path:
    value = os.environ.get("SPEECH_GPU_PROFILER_DIR")
    if not value:
        pytest.skip("SPEECH_GPU_PROFILER_DIR is not set: the server's profiler directory is not readable here")
    return Path(value)


def test_a_timeline_run_records_every_processs_events_for_each_request(omni_url: str, profiler_dir: Path) -> None:
    run = f"gpu-timeline-{uuid.uuid4().hex[:8]}"
    started = httpx.post(f"{omni_url}/admin/profile/start", json={"run_id": run, "timeline": True}, timeout=30)
    assert started.status_code == 200, started.text
    time.sleep(LOOK_S)
    ids = [f"tl-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    answered: dict[str, float] = {}  # each request's whole time, as the client saw it
    try:
        for request_id in ids:
            sent = time.monotonic()
            payload = {
                "model": model_of(omni_url),
                "voice": "vivian",
                "input": "Where does the first audio go?",
                "response_format": "pcm",
                "max_new_tokens": TOKENS,
            }
            answer = httpx.post(
                f"{omni_url}/v1/audio/speech", json=payload, headers={"X-Request-Id": request_id}, timeout=300
            )
            assert answer.status_code == 200, answer.text
            answered[request_id] = (time.monotonic() - sent) * 1000
    finally:
        stopped = httpx.post(f"{omni_url}/admin/profile/stop", json={"run_id": run}, timeout=60)
    assert stopped.status_code == 200, stopped.text
    time.sleep(LOOK_S)
    folder = profiler_dir / run
    roles = {path.name.split("_")[1] for path in folder.glob("events_*.jsonl")}
    assert roles == {"server", "talker", "code2wav"}, sorted(folder.iterdir())
    requests = omni_timeline.load([folder])
    # every stage event belongs to one of the server's requests (its id starts with the server's)
    assert len(requests) == len(ids) and all(any(r.startswith(i) for i in ids) for r in requests), sorted(requests)
    for request, events in requests.items():
        # each window decoded once; an end marker may travel as a window of no codes, sent and received, never run
        assert len(events[omni_timeline.SCHEDULED]) == len(events[omni_timeline.DECODED]) == WINDOWS, events
        assert len(events[omni_timeline.SENT]) == len(events[omni_timeline.READY]) >= WINDOWS, events
        # the talker's worker recorded the request's first step, launched then returned, before its first window
        assert len(events[omni_timeline.LAUNCHED]) == len(events[omni_timeline.RETURNED]) == 1, events
        talker = omni_timeline.talker_phases(events)
        assert set(talker) == {phase for phase, _, _ in omni_timeline.TALKER_PHASES}, talker
        assert all(value >= 0 for value in talker.values()), talker
        phases = omni_timeline.first_audio_phases(events)
        assert set(phases) == {phase for phase, _, _ in omni_timeline.PHASES}, phases
        # in order: sent before ready before scheduled before decoded before the server had it; and within what the
        # client waited for the whole answer
        assert all(value >= 0 for value in phases.values()), phases
        (client_id,) = [i for i in ids if request.startswith(i)]
        assert phases["first audio"] < answered[client_id], (phases, answered)
        # every window in order too, each stream's n-th of each event paired
        for phase, values in omni_timeline.window_phases(events).items():
            assert values and min(values) >= 0, (phase, values)
        # code2wav's worker recorded each step's call for every window it ran, between its scheduling and its return
        assert len(events[omni_timeline.WORKER_LAUNCHED]) == len(events[omni_timeline.WORKER_RETURNED]) == WINDOWS
        for phase, values in omni_timeline.step_phases(events).items():
            assert values and min(values) >= 0, (phase, values)
        # with the window doorbell's connector, the windows were written between their sending and code2wav's having
        # them; with vllm-omni's, no write is recorded
        doorbell = doorbell_on()
        if doorbell is None:  # the server's log is not readable here: its recorded writes say it
            doorbell = bool(events.get(omni_timeline.WRITTEN))
        if doorbell:
            # every window decoded was written (an end marker vllm-omni delivers without a write may be sent only)
            assert WINDOWS <= len(events[omni_timeline.WRITTEN]) <= len(events[omni_timeline.SENT]), events
            for phase, values in omni_timeline.hand_off_phases(events).items():
                assert values and min(values) >= 0, (phase, values)
        else:
            assert not events.get(omni_timeline.WRITTEN), events


def doorbell_on() -> bool | None:
    """Whether the server's log says its code2wav listens to the window doorbell; None where the log is not readable
    here."""
    log = os.environ.get("SPEECH_GPU_SERVER_LOG")
    if not log or not Path(log).is_file():
        return None
    return "window doorbell: code2wav's receiving thread wakes" in Path(log).read_text(errors="replace")
