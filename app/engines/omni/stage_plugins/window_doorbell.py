"""A doorbell for code2wav's receiving thread: the talker rings once a window is in shared memory, and code2wav looks
for it at once instead of at its next look.

vllm-omni 0.30's code2wav receives windows on a thread of its model runner's data plane that looks for every
pending stream's next window in shared memory, then, having found none, waits up to 5 ms on the data plane's one
`threading.Event` (`_work_available`), which nothing in the talker's process can set
(distributed/omni_connectors/model_runner/omni_connector_payload_transport.py `_recv_loop`). A window written just
after a look waits for the next: on the GPU, every window's hand-off from the talker to code2wav took 2 to 7 ms,
spread evenly, at one stream as at 32.

With the profile's shared-memory connector named `CONNECTOR_NAME` (the service's plugin registers it in every
process, `model_registration.register`), the engine gives both stages an address (`ADDRESS_VARIABLE`, inherited by
the spawned stage processes) and runs code2wav under the service's worker (`WORKER_CLASS`, a stage override):
- the talker's connector rings the address, a UNIX datagram that never blocks, after each window it wrote
  (`DoorbellSharedMemoryConnector.put`), and, while a request timeline records, records the write
  (`window_written`), which splits the hand-off into the talker's part and code2wav's;
- code2wav's worker binds the address and, on each ring, wakes the receiving thread, which looks again at once; it
  also wakes it after each model step that ran windows, which frees the streams whose staged window that step took
  (the thread does not read a stream's next window while its last is still staged); where the address is taken
  (a second code2wav worker of the same server), the worker says so and leaves vllm-omni's 5-ms look as it is;
- the data plane's shared Event becomes `ThreadWakeups`: each of its two threads (receiving, saving) waits on and
  clears an Event of its own, so that one thread's `clear()` no longer swallows a wake-up meant for the other.
The 5-ms look stays as it was, for a ring that is lost. The address is in Linux's abstract socket namespace: no
file to clean up, gone with the process that bound it. This module imports nothing of vllm-omni
(`window_doorbell_stage.py` has the classes that extend it)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

CONNECTOR_NAME = "SpeechSharedMemoryConnector"  # a profile's connector of this name rings
WORKER_CLASS = "app.engines.omni.stage_plugins.window_doorbell_stage.DoorbellGenerationWorker"
ADDRESS_VARIABLE = "SPEECH_OMNI_WINDOW_DOORBELL"  # the address's name in the abstract namespace, set by the engine
RECEIVE_BYTES = 64
# what of vllm-omni 0.30.0 code2wav's worker relies on (tests/unit/test_vllm_omni_wheel.py): the v2 model runner's
# data plane (worker_v2/omni_model_runner.py) and that plane's one Event (model_runner/omni_connector_runtime.py)
DATA_PLANE = "_omni_data_plane"
WAKEUP = "_work_available"

log = logging.getLogger("vllm.speech.doorbell")


def request_of(put_key: str) -> str | None:
    """The request whose window a connector key names: vllm-omni 0.30 writes a stream's n-th window under
    `<request>_<stage>_<n>` (omni_connector_payload_transport.py `_enqueue_chunk_payload`); None for another key."""
    request, stage, window = ["", "", "", *put_key.rsplit("_", 2)][-3:]
    return request if request and stage.isdigit() and window.isdigit() else None


def address(name: str) -> str:
    """The socket address of `name` in Linux's abstract namespace (a leading NUL: no file; an environment variable
    cannot hold the NUL, so the name travels without it)."""
    return "\0" + name


def address_from_environment() -> str | None:
    name = os.environ.get(ADDRESS_VARIABLE)
    return address(name) if name else None


class Bell:
    """The talker's side: one datagram a ring, never waiting. A ring nobody hears (code2wav not yet listening, its
    queue of datagrams full) is dropped: the receiving thread's own look finds the window within 5 ms."""

    def __init__(self, to: str) -> None:
        self._to = to
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    def ring(self) -> None:
        try:
            with self._lock:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._socket.setblocking(False)
                self._socket.sendto(b"w", self._to)
        except OSError:
            pass

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


class Listener:
    """code2wav's side: binds the address and calls `on_ring` for each burst of rings, from a daemon thread."""

    def __init__(self, at: str, on_ring: Callable[[], None]) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(at)
        self._on_ring = on_ring
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="speech-window-doorbell", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._closed.is_set():
            try:
                self._socket.recv(RECEIVE_BYTES)
                while True:  # the rings queued meanwhile: one wake-up for them all
                    self._socket.recv(RECEIVE_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
            except OSError:
                if self._closed.is_set():
                    return
                log.warning("window doorbell: receive failed; the receiving thread looks every 5 ms", exc_info=True)
                return
            if self._closed.is_set():
                return
            self._on_ring()

    def close(self) -> None:
        self._closed.set()
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # ends a blocked recv
        except OSError:
            pass
        self._socket.close()
        self._thread.join(timeout=1)


class ThreadWakeups:
    """Stands in for the data plane's `_work_available` (`threading.Event`), which its receiving and saving threads
    both wait on and clear: here each thread that waits has an Event of its own, and `set()` sets them all. A
    thread's first Event starts set (a wake-up given before it ever waited costs one extra look, never a lost one)."""

    def __init__(self) -> None:
        self._events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _mine(self) -> threading.Event:
        ident = threading.get_ident()
        event = self._events.get(ident)
        if event is None:
            with self._lock:
                event = self._events.setdefault(ident, threading.Event())
                event.set()
        return event

    def set(self) -> None:
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    def clear(self) -> None:
        self._mine().clear()

    def is_set(self) -> bool:
        return self._mine().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._mine().wait(timeout)
