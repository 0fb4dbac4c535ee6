"""Run a module (`python gc_probe.py MODULE ARGS...`) with the garbage collector's pauses accounted: once a second it
writes {"pauses": {generation: [collections, total ms, longest ms]}, "tracked": n, "frozen": n} to $GC_PROBE_OUT.
The module is imported from the working directory first, as `python -m` would."""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import threading
import time

pauses = {generation: [0, 0.0, 0.0] for generation in range(3)}
_started = [0.0]


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = 1000 * (time.perf_counter() - _started[0])
    entry = pauses[info["generation"]]
    entry[0] += 1
    entry[1] += ms
    entry[2] = max(entry[2], ms)


def _report(path: str) -> None:
    while True:
        time.sleep(1)
        state = {"pauses": pauses, "tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)


gc.callbacks.append(_on_gc)
threading.Thread(target=_report, args=(os.environ["GC_PROBE_OUT"],), daemon=True).start()
sys.path.insert(0, os.getcwd())
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
