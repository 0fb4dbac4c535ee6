"""The omni engine's request timeline as a test reads it back (app/engines/omni/stage_plugins/timeline.py writes one
JSON line an event to `events_<role>_<pid>.jsonl`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.engines.omni.stage_plugins import timeline


def recorded_events(folder: Path, role: str = "*") -> list[dict[str, Any]]:
    """Every event `role`'s recorders (every role's: "*") wrote under `folder`, file by file in name order."""
    return [
        json.loads(line)
        for path in sorted(folder.glob(f"events_{role}_*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def installed_recorder(monkeypatch: pytest.MonkeyPatch, role: str) -> timeline.Recorder:
    """A recorder for `role` with no flag (`pin` it to a folder to record), as this process's `timeline.recorder(role)`
    for the rest of the test."""
    recorder = timeline.Recorder(role, None)
    monkeypatch.setitem(timeline._recorders, role, recorder)
    return recorder
