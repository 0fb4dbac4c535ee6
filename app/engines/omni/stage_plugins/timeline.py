"""The omni engine's request timeline: when each request's windows passed each of vllm-omni's processes, on one clock
(the host's wall clock, in nanoseconds), so that a first audio's time splits into the talker (its queue, prefill and
first frame, up to the producer handing its first window on), the hand-off between the stages' processes (the shared
memory and code2wav's receiving thread), code2wav's scheduling and step, and the way back to the server. vLLM's
profiler cannot say this: the hand-off is Python in threads that launch nothing.

The engine turns it on for a run (`POST /admin/profile/start` with `"timeline": true`) by writing a flag file, whose
path it gave the stage processes (FLAG_VARIABLE) before they started; every process then appends one JSON line an event
to `events_<role>_<pid>.jsonl` in the folder the flag names, until the run stops and the flag goes. A recorder reads the
flag at most every CHECK_EVERY_S, so that an event costs a clock read while no run records. deploy/gpu/omni_timeline.py
lays the events out request by request.

Events: the server's `submitted` (the request handed to vllm-omni), `audio` (each window's audio back) and `first_audio`
(its first audio back); the talker's `first_step_launched` and `first_step_returned` (the step that takes in the
request's prompt handed to the model runner, and that call's return: `talker_worker.py`), `window_sent` (its producer
handed a window on) and, with the window doorbell's connector, `window_written` (that window is in shared memory:
`window_doorbell_stage.py`); code2wav's `window_ready` (the window's readiness reached the scheduler: from the receiving
thread, or with a model step's output), `window_scheduled` (with its `frames`), `window_launched`, `window_returned`
and `window_copied` (the step handed to the model runner, that call's return, and its output on the host:
`code2wav_worker.py`) and `window_decoded` (the step that carried it returned to the scheduler). A stream's n-th event
of each name is its n-th window's.
Imports nothing of the service, so that the stage processes can load it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

FLAG_VARIABLE = "SPEECH_OMNI_TIMELINE_FLAG"  # the flag file's path, set by the engine for the stage processes
TALKER_WORKER = "app.engines.omni.stage_plugins.talker_worker.TimelineARWorker"  # stage 0's, where a run can record
CODE2WAV_WORKER = "app.engines.omni.stage_plugins.code2wav_worker.TimelineGenerationWorker"  # stage 1's, alike
CHECK_EVERY_S = 0.25


class Recorder:
    """One process's recorder for one role (server, talker, code2wav): `record` is a no-op but for a clock read while
    no run records."""

    def __init__(self, role: str, flag: str | None) -> None:
        self.role, self.flag = role, flag
        # the look at the flag and the line under one lock: threads of a process share the recorder (the talker's step
        # loop and its saving thread), and one's look must not close the file the other is writing to
        self._lock = threading.RLock()
        self._checked_at = float("-inf")
        self._folder: str | None = None
        self._run: str | None = None  # the run's own mark (a new start of the same folder is a new run)
        self._file: TextIO | None = None
        self._file_run: tuple[str, str | None] | None = None  # the folder and run the open file belongs to

    def pin(self, folder: str | None) -> None:
        """Record to `folder` (None: not at all) whatever the flag says: the engine's own recorder, in the process
        that writes the flag, follows its runs at once."""
        self.flag, self._folder, self._run = None, folder, None
        self._close()  # a pinned folder is a new run

    def _close(self) -> None:
        """The run's file closed once it records no more (a later run of the same name opens it anew)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
            self._file = self._file_run = None

    def folder(self) -> str | None:
        """The folder the current run records to, or None (read from the flag at most every CHECK_EVERY_S)."""
        if self.flag is None:
            return self._folder
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= CHECK_EVERY_S:
                self._checked_at = now
                try:
                    with open(self.flag, encoding="utf-8") as flag:
                        marks = json.load(flag)
                    self._folder, self._run = str(marks["folder"]) or None, str(marks.get("run", ""))
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    self._folder, self._run = None, None
                if self._folder is None and self._file is not None:
                    self._close()
            return self._folder

    def on(self) -> bool:
        return self.folder() is not None

    def record(self, event: str, request_id: str, at_ns: int | None = None, **fields: Any) -> None:
        """`at_ns`: when it happened (time.time_ns()), where that was before this call; now otherwise."""
        at_ns = time.time_ns() if at_ns is None else at_ns
        with self._lock:
            folder = self.folder()
            if folder is None:
                return
            line = json.dumps({"ts_ns": at_ns, "event": event, "request_id": request_id, **fields})
            try:
                if self._file is None or self._file_run != (folder, self._run):
                    if self._file is not None:
                        self._file.close()
                    os.makedirs(folder, exist_ok=True)
                    path = os.path.join(folder, f"events_{self.role}_{os.getpid()}.jsonl")
                    self._file, self._file_run = open(path, "a", encoding="utf-8", buffering=1), (folder, self._run)
                self._file.write(line + "\n")
            except OSError:  # a timeline is a diagnosis: a full disk must not fail the request
                self._file = None

    @contextmanager
    def call(self, request_ids: list[str], launched: str, returned: str) -> Iterator[None]:
        """Around a stage worker's call for `request_ids` (none: nothing recorded): when it was made (`launched`) and
        when it returned (`returned`, a failed call too), one time each for them all; the lines are written after
        the call, so that its time is its own."""
        launched_ns = time.time_ns()
        try:
            yield
        finally:
            returned_ns = time.time_ns()
            for event, at_ns in ((launched, launched_ns), (returned, returned_ns)):
                for request_id in request_ids:
                    self.record(event, request_id, at_ns)


_recorders: dict[str, Recorder] = {}
_recorders_lock = threading.Lock()


def recorder(role: str) -> Recorder:
    """This process's recorder for `role`, its flag read from FLAG_VARIABLE when first asked for."""
    with _recorders_lock:
        if role not in _recorders:
            _recorders[role] = Recorder(role, os.environ.get(FLAG_VARIABLE) or None)
        return _recorders[role]


def start(flag: str, folder: str) -> None:
    """Every process's recorders record to `folder` from their next look at the flag on (within CHECK_EVERY_S)."""
    os.makedirs(folder, exist_ok=True)
    partial = f"{flag}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as out:
        # the run's mark: a recorder that missed the stop (it looks only when called) opens the folder's file anew
        json.dump({"folder": folder, "run": f"{os.getpid()}-{time.time_ns()}"}, out)
    os.replace(partial, flag)  # a reader sees the old flag or the new, never half of one


def stop(flag: str) -> None:
    """No recorder records past its next look at the flag."""
    try:
        os.remove(flag)
    except FileNotFoundError:
        pass
