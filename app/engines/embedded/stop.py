"""Stopping a sentence part-way: the event loop tells the worker thread synthesizing it that nobody will hear it (its
caller left, or its request was aborted), and the thread stops at its next step instead of running to the end on a
CPU that other requests are waiting for.

hibari's synthesis is no loop of its own to stop: `Hibari.from_ids` is one network run and one vocoder pass
(hibari/tts.py, `from_ids`), and the engine runs those steps itself (`alignment.synthesize_ids`, once per phoneme
piece of at most MAX_PHONEMES), then the time-stretch and the word timing. A stop is checked between these steps, and
inside a network run by onnxruntime: the flag is the run's own `RunOptions.terminate`, which its executor checks
between the graph's nodes, the run then raising at once. The vocoder (`hibari.dsp.synth`) is one vectorized pass
with nothing to check: once begun, it runs to its end.
"""

from __future__ import annotations

from typing import Any


class SynthesisStopped(Exception):
    """The sentence was stopped part-way (`Stop.set`): no audio, and no failure either."""


class Stop:
    """One synthesis's stop: set from the event loop, seen by the worker thread running it."""

    def __init__(self) -> None:
        import onnxruntime as ort

        # onnxruntime's flag for a run in progress, and this synthesis's one flag: read between steps as well
        self.run_options: Any = ort.RunOptions()

    def set(self) -> None:
        """Stop the synthesis at its next step (a network run in progress: at its next node). Thread-safe."""
        self.run_options.terminate = True

    @property
    def is_set(self) -> bool:
        return bool(self.run_options.terminate)

    def check(self) -> None:
        """`SynthesisStopped` once the stop is set: called by the worker between steps."""
        if self.is_set:
            raise SynthesisStopped()
