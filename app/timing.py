"""Where a request's time to first audio goes: its milestones from arrival to the first byte written, and the phases
between them (exported as `speech_ttfa_phase_seconds{phase}` and logged with the request).

Phases, which add up to the request's TTFA exactly:
- `validate`: arrival → waiting for a slot. Reading and validating the body, fetching and decoding reference audio,
  resolving the voice, building the engine job.
- `queue`: waiting for a synthesis slot (admission).
- `prepare`: slot granted → the engine hands the work to its model. Sentence splitting, prompt and reference-audio
  features (omni: vllm-omni's prompt inputs, built in a worker pool), waiting for that pool.
- `engine`: handed to the model → the engine's first audio chunk. For omni, vllm-omni's talker and code2wav stages
  with their scheduling; for the embedded engine, its worker thread (queueing for it included).
- `encode_write`: the first chunk → its first encoded bytes written to the connection (resampling, encoding, the
  event loop getting to it). With a format whose encoder holds back its first frame (mp3, aac, opus) and an engine
  whose first chunk is short, this includes waiting for the engine's next chunk.
Requests that end before their first byte (errors, a client that left) have milestones but no phases.

TTFA alone is never the goal: a stream that starts early and then runs dry is heard as a stutter. `ListenerClock` times
the audio that follows (the time to uninterrupted audio, from the same origin).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

Milestone = Literal["queued", "admitted", "submitted", "first_chunk", "first_byte"]
PHASES = ("validate", "queue", "prepare", "engine", "encode_write")


@dataclass(slots=True)
class TtfaTimeline:
    """Milestones of one request in time.perf_counter() seconds. Each is set once and the first mark wins: a long
    text becomes several engine requests, and the caller waits for the first."""

    received: float
    queued: float | None = None
    admitted: float | None = None
    submitted: float | None = None  # set by the engine; an engine that does not counts its preparation as engine time
    first_chunk: float | None = None
    first_byte: float | None = None

    def mark(self, milestone: Milestone, at: float | None = None) -> None:
        if getattr(self, milestone) is None:
            setattr(self, milestone, time.perf_counter() if at is None else at)

    @property
    def ttfa_s(self) -> float | None:
        return None if self.first_byte is None else self.first_byte - self.received

    def phases(self) -> dict[str, float]:
        """Seconds per phase, once the first byte is out (before that, TTFA has no breakdown)."""
        queued, admitted, first_chunk, first_byte = self.queued, self.admitted, self.first_chunk, self.first_byte
        if queued is None or admitted is None or first_chunk is None or first_byte is None:
            return {}
        submitted = admitted if self.submitted is None else self.submitted
        points = (self.received, queued, admitted, submitted, first_chunk, first_byte)
        return {phase: max(0.0, end - start) for phase, (start, end) in zip(PHASES, pairwise(points), strict=True)}

    def offsets(self) -> dict[str, float]:
        """Each milestone reached, in seconds since arrival (for the request's log record)."""
        marks = {
            "queued": self.queued,
            "admitted": self.admitted,
            "submitted": self.submitted,
            "first_chunk": self.first_chunk,
            "first_byte": self.first_byte,
        }
        return {name: round(at - self.received, 4) for name, at in marks.items() if at is not None}


# Lateness below this is float noise in the arithmetic, not a gap anyone could hear (the load tool's listener,
# loadtest.playback, ignores the same).
RAN_DRY_EPSILON_S = 1e-6


@dataclass(slots=True)
class ListenerClock:
    """When a real-time listener of one stream could start and never run dry, from when each piece of its audio was
    written (exported as `speech_uninterrupted_seconds`).

    A listener who starts at S plays the audio at position p at S + p, so bytes written at t after A seconds of audio
    went out before them are in time if t <= S + A. The earliest start with every write in time is S = max over writes
    of (t - A); the first write (A = 0) makes S at least the time to first audio, and how far S lies past it is the
    stream's largest deficit: the buffer, counted in time, that a listener starting at the first audio would need never
    to run dry. The load tool computes the same figure from the client's side."""

    origin: float  # time.perf_counter() of the request's arrival: TTFA's origin
    first_s: float | None = None  # the first write, in seconds since the origin
    ready_s: float | None = None  # S so far, in seconds since the origin
    audio_s: float = 0.0  # seconds of audio the writes so far carry

    def wrote(self, at: float, audio_through_s: float) -> None:
        """Bytes went out at `at` (perf_counter); with them, the writes so far carry `audio_through_s` seconds."""
        since = at - self.origin
        late = since - self.audio_s  # the start this write needs: it brings the audio from position audio_s on
        if self.first_s is None or self.ready_s is None:
            self.first_s = self.ready_s = since
        elif late > self.ready_s:
            self.ready_s = late
        self.audio_s = max(self.audio_s, audio_through_s)

    @property
    def deficit_s(self) -> float | None:
        """The largest deficit (0 for a stream that never ran dry); None before the first write."""
        if self.first_s is None or self.ready_s is None:
            return None
        deficit = self.ready_s - self.first_s
        return deficit if deficit > RAN_DRY_EPSILON_S else 0.0

    @property
    def heard_by(self) -> float | None:
        """When (perf_counter) a listener who started as soon as it could never run dry has heard all the audio
        written so far; None before the first write."""
        return None if self.ready_s is None else self.origin + self.ready_s + self.audio_s

    @property
    def uninterrupted_s(self) -> float | None:
        """Time to uninterrupted audio: the first write plus the largest deficit; None before the first write."""
        deficit = self.deficit_s
        return None if deficit is None or self.first_s is None else self.first_s + deficit

    @property
    def ran_dry(self) -> bool:
        return bool(self.deficit_s)
