"""The omni engine's request timeline as a test reads it back (app/engines/omni/stage_plugins/timeline.py writes one
JSON line an event to `events_<role>_<pid>.jsonl`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def recorded_events(folder: Path, role: str = "*") -> list[dict[str, Any]]:
    """Every event `role`'s recorders (every role's: "*") wrote under `folder`, file by file in name order."""
    return [
        json.loads(line)
        for path in sorted(folder.glob(f"events_{role}_*.jsonl"))
        for line in path.read_text().splitlines()
    ]
