"""Levers switched on and off in a running server (`SPEECH_OMNI__LEVER_SWITCH_FILE`), to measure one against its
baseline in the same start.

A lever measured across starts shares its comparison with each start's own luck: on one H200 three starts of the same
profile spread over 204–269 ms of a burst of 32's uninterrupted p95, as wide as the levers measured against them
(benchmarks/gpu/2026-12-01-h200-omni-fused-prefetch-in-turn/). A lever that makes the same results either way (the
prompts built together, the frames kept as lists) can instead be switched between load levels of one start, the levels
alternating A and B on the same process, weights, caches and memory.

The engine gives the stage processes the file's path (VARIABLE). A switchable lever that its own setting turned on is
in force only while the file names it (whitespace-separated words; a missing file names none); the file is read at
most every CHECK_EVERY_S, so that a step costs a clock read. Without the variable, a lever its setting turned on is
always on. Each change is logged in the stage process's log, so that a run shows when each level's state began.

Plain Python, imports nothing of the service: the stage processes load it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping

VARIABLE = "SPEECH_OMNI_LEVER_SWITCH"  # the file's path, set by the engine for the stage processes
CHECK_EVERY_S = 0.25
# what the file may name (their settings' names)
LEVERS = frozenset({"prompt_batch", "frames_as_lists"})

log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


class Switch:
    """Which levers the file names, read at most every CHECK_EVERY_S; `path` None: every lever on."""

    def __init__(self, path: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()  # the talker's step loop and its other threads may ask at once
        self._checked_at = float("-inf")
        self._named: frozenset[str] | None = None  # None: not read yet

    def on(self, lever: str) -> bool:
        assert lever in LEVERS, lever  # a misspelt name would be off whatever the file says
        if self.path is None:
            return True
        with self._lock:
            now = self._clock()
            if now - self._checked_at >= CHECK_EVERY_S:
                self._checked_at = now
                self._read()
            assert self._named is not None
            return lever in self._named

    def _read(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as file:  # type: ignore[arg-type]
                named = frozenset(file.read().split())
        except (OSError, UnicodeDecodeError):
            named = frozenset()
        if named != self._named:
            unknown = sorted(named - LEVERS)
            log.info(
                "%s: levers on: %s%s",
                VARIABLE,
                " ".join(sorted(named & LEVERS)) or "none",
                f" (not switchable, ignored: {' '.join(unknown)})" if unknown else "",
            )
            self._named = named


def from_environ(environ: Mapping[str, str] = os.environ) -> Switch:
    return Switch(environ.get(VARIABLE) or None)


_process_switch: Switch | None = None


def for_process(environ: Mapping[str, str] = os.environ) -> Switch:
    """The stage process's one switch, for every lever in it (the talker's model and its window producer), so that
    each change of the file is read and logged once; made again where a later start names another file."""
    global _process_switch
    if _process_switch is None or _process_switch.path != (environ.get(VARIABLE) or None):
        _process_switch = from_environ(environ)
    return _process_switch
