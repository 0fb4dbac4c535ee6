"""The profiler's routes are served only where SPEECH_PROFILER_DIR is set, and refuse an engine with no profiler in
OpenAI's error shape (the sglang engine's runs: tests/e2e/test_sglang_engine.py)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.server import RunningServer, start_server


def test_without_a_profiler_directory_there_are_no_profiler_routes(server: RunningServer) -> None:
    answer = httpx.post(f"{server.base_url}/admin/profile/start", json={}, timeout=30)
    assert answer.status_code == 404 and answer.json()["error"]["type"] == "invalid_request_error"


def test_an_engine_without_a_profiler_is_refused_by_name(tmp_path: Path) -> None:
    running = start_server(tmp_path / "server.log", env={"SPEECH_PROFILER_DIR": str(tmp_path / "profiles")})
    try:
        answer = httpx.post(f"{running.base_url}/admin/profile/start", timeout=30)
        assert answer.status_code == 400
        assert answer.json()["error"] == {
            "message": "The embedded engine has no profiler.",
            "type": "invalid_request_error",
            "param": None,
            "code": "unsupported_engine",
        }
        stop = httpx.post(f"{running.base_url}/admin/profile/stop", json={"run_id": "r1"}, timeout=30)
        assert stop.status_code == 400 and stop.json()["error"]["code"] == "unsupported_engine"
    finally:
        running.stop()
