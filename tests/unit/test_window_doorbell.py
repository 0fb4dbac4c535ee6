"""code2wav's window doorbell (app/engines/omni/stage_plugins/window_doorbell.py): real sockets in Linux's abstract
namespace, real threads; vllm-omni's connector and worker as stand-ins (tests/fakes/vllm_omni_0_30_data_plane.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from app.engines.omni.stage_plugins import model_registration, window_doorbell
from app.engines.omni.stage_plugins.window_doorbell import Bell, Listener, ThreadWakeups
from tests.fakes.vllm_omni_0_30_data_plane import install_data_plane
from tests.fakes.vllm_omni_0_30_scheduler import import_against_stand_ins
from tests.support.timeline import installed_recorder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the abstract socket namespace is Linux's")

LONG_S = 30  # waits that end at once when what they wait for works; a failure waits this long, once


def _name() -> str:
    return f"speech-test-{os.getpid()}-{os.urandom(4).hex()}"


def _in_thread(work: Callable[[], Any]) -> Any:
    """`work`'s answer, run on a thread of its own (one a data plane would run: its receiving or saving thread)."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(work()))
    thread.start()
    thread.join(LONG_S)
    assert answer, "the thread did not finish"
    return answer[0]


def test_one_threads_clear_no_longer_swallows_a_wake_up_meant_for_the_other() -> None:
    """vllm-omni's data plane shares one Event between its receiving and saving threads, each of which clears it
    after its wait: a set() that the other thread cleared first was lost until the waiting thread's timeout."""
    wakeups = ThreadWakeups()
    ready = threading.Barrier(2, timeout=LONG_S)
    cleared = threading.Event()
    seen: list[bool] = []

    def receiving() -> None:
        wakeups.wait(0)
        wakeups.clear()  # its own, once
        ready.wait()  # the saving thread clears its own meanwhile
        cleared.wait(LONG_S)
        seen.append(wakeups.wait(LONG_S))  # woken by the set() below, whatever the saving thread cleared

    def saving() -> None:
        wakeups.wait(0)
        wakeups.clear()
        ready.wait()
        wakeups.set()
        wakeups.clear()  # the saving thread's clear after its own wake-up
        cleared.set()

    threads = [threading.Thread(target=receiving), threading.Thread(target=saving)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LONG_S)
    assert seen == [True]


def test_a_thread_first_seen_starts_awake() -> None:
    wakeups = ThreadWakeups()
    wakeups.set()  # before any thread waited: nothing to set yet
    assert _in_thread(lambda: wakeups.wait(0)) is True
    assert _in_thread(lambda: (wakeups.clear(), wakeups.wait(0))[1]) is False


def test_a_ring_reaches_the_listener_and_a_ring_nobody_hears_is_dropped() -> None:
    at = window_doorbell.address(_name())
    bell = Bell(at)
    bell.ring()  # nobody listens yet: dropped, no error
    rang = threading.Event()
    listener = Listener(at, rang.set)
    try:
        bell.ring()
        assert rang.wait(LONG_S)
    finally:
        listener.close()
    assert not listener._thread.is_alive()
    bell.ring()  # the listener is gone: dropped again
    bell.close()


def test_rings_queued_while_the_listener_was_busy_wake_once() -> None:
    """Each wake-up sets the receiving and saving threads' Events and takes the GIL: rings that queued while the
    listener was handing on the last one make one more wake-up, not one each."""
    at = window_doorbell.address(_name())
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def on_ring() -> None:
        calls.append(1)
        entered.set()
        release.wait(LONG_S)

    listener = Listener(at, on_ring)
    bell = Bell(at)
    try:
        bell.ring()
        assert entered.wait(LONG_S)  # the first ring is being handed on
        entered.clear()
        bell.ring()
        bell.ring()  # both queue meanwhile
        release.set()
        assert entered.wait(LONG_S)  # one more wake-up for the two
    finally:
        listener.close()
        bell.close()
    assert len(calls) == 2


def test_an_address_is_taken_by_one_listener_only() -> None:
    at = window_doorbell.address(_name())
    listener = Listener(at, lambda: None)
    try:
        with pytest.raises(OSError):
            Listener(at, lambda: None)
    finally:
        listener.close()


def scheduled(*requests: str, fails: bool = False) -> types.SimpleNamespace:
    """vLLM's SchedulerOutput as the worker reads it: the requests a step runs, and their tokens."""
    return types.SimpleNamespace(num_scheduled_tokens=dict.fromkeys(requests, 16), fails=fails)


@pytest.fixture
def stage_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    return import_against_stand_ins(
        monkeypatch, "app.engines.omni.stage_plugins.window_doorbell_stage", install_data_plane
    )


def test_the_talkers_connector_rings_after_each_window_it_wrote(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _name()
    monkeypatch.setenv(window_doorbell.ADDRESS_VARIABLE, name)
    rings: list[int] = []
    rang = threading.Event()
    listener = Listener(window_doorbell.address(name), lambda: (rings.append(1), rang.set()))
    connector = stage_module.create_connector({"stage_id": 0})
    try:
        assert connector.put("0", "1", "req-0_0", {"codes": [1]})[0] is True
        assert rang.wait(LONG_S)
        assert connector.get("0", "1", "req-0_0") == ({"codes": [1]}, 1)  # what it stores is vllm-omni's
        rang.clear()
        connector.fail_puts = True  # nothing written: no ring
        assert connector.put("0", "1", "req-0_1", {"codes": [2]})[0] is False
        connector.fail_puts = False
        assert connector.put("0", "1", "req-0_2", {"codes": [3]})[0] is True
        assert rang.wait(LONG_S)
    finally:
        listener.close()
        connector.close()
    assert len(rings) == 2 and connector.closed


def test_a_window_key_names_its_request_as_vllm_omni_writes_it() -> None:
    assert window_doorbell.request_of("speech-1f2e-a1b2_0_3") == "speech-1f2e-a1b2"
    assert window_doorbell.request_of("a_b_0_12") == "a_b"  # a request id may hold the separator itself
    for other in ("req-0_0", "a_x_1", "_0_1", "k", ""):
        assert window_doorbell.request_of(other) is None


def test_while_a_timeline_records_the_connector_records_each_window_it_wrote(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The talker's part of a hand-off ends at the write: `window_written` for the key's request, after vllm-omni's
    put succeeded, none for a put that failed or a key that names no window."""
    monkeypatch.delenv(window_doorbell.ADDRESS_VARIABLE, raising=False)
    recorder = installed_recorder(monkeypatch, "talker")
    recorder.pin(str(tmp_path))  # this process's talker recorder, recording as a run would
    connector = stage_module.create_connector({})
    try:
        assert connector.put("0", "1", "r1-ab_0_0", {"codes": [1]})[0] is True
        connector.fail_puts = True
        assert connector.put("0", "1", "r1-ab_0_1", {"codes": [2]})[0] is False
        connector.fail_puts = False
        assert connector.put("0", "1", "not-a-window", {"codes": [3]})[0] is True
        assert connector.put("0", "1", "r2-cd_0_0", {"codes": [4]})[0] is True
    finally:
        recorder.pin(None)
        connector.close()
    (events_file,) = tmp_path.glob("events_talker_*.jsonl")
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [(e["event"], e["request_id"]) for e in events] == [("window_written", "r1-ab"), ("window_written", "r2-cd")]


def test_without_an_address_the_connector_is_vllm_omnis(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(window_doorbell.ADDRESS_VARIABLE, raising=False)
    connector = stage_module.create_connector({})
    assert connector._bell is None and connector.put("0", "1", "k", 1)[0] is True


def test_code2wavs_worker_wakes_the_receiving_thread_on_each_ring_and_after_each_step(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _name()
    monkeypatch.setenv(window_doorbell.ADDRESS_VARIABLE, name)
    worker = stage_module.DoorbellGenerationWorker()
    worker.init_device()
    plane = worker.model_runner._omni_data_plane
    wakeups = plane._work_available
    try:
        assert isinstance(wakeups, ThreadWakeups)
        receiving = threading.Event()
        woken: list[bool] = []

        def receive() -> None:  # the data plane's receiving thread: looked, found nothing, waits up to 5 ms
            plane._work_available.wait(0)
            plane._work_available.clear()
            receiving.set()
            woken.append(plane._work_available.wait(LONG_S))

        thread = threading.Thread(target=receive)
        thread.start()
        assert receiving.wait(LONG_S)
        Bell(window_doorbell.address(name)).ring()  # the talker wrote a window
        thread.join(LONG_S)
        assert woken == [True]
        # a step that ran windows frees the streams whose staged windows it took: the receiving thread looks again;
        # vLLM's loop calling it with nothing scheduled (every millisecond while streams wait) frees nothing
        with ThreadPoolExecutor(max_workers=1) as receiving_thread:  # one thread throughout
            looked = receiving_thread.submit(lambda: (wakeups.wait(0), wakeups.clear(), wakeups.is_set())).result()
            assert looked[2] is False
            assert worker.execute_model(scheduled()) == "output of []"
            assert receiving_thread.submit(wakeups.is_set).result() is False
            assert worker.execute_model(scheduled("a", "b")) == "output of ['a', 'b']"
            assert receiving_thread.submit(wakeups.is_set).result() is True
            receiving_thread.submit(wakeups.clear).result()
            with pytest.raises(RuntimeError):
                worker.execute_model(scheduled("a", fails=True))  # a failed step wakes it too
            assert receiving_thread.submit(wakeups.is_set).result() is True
    finally:
        worker.shutdown()
    assert worker.shut_down and worker._doorbell is None


def test_without_an_address_code2wavs_worker_is_vllm_omnis_and_says_so(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(window_doorbell.ADDRESS_VARIABLE, raising=False)
    worker = stage_module.DoorbellGenerationWorker()
    worker.init_device()
    assert isinstance(worker.model_runner._omni_data_plane._work_available, threading.Event)
    assert "window doorbell off" in caplog.text
    assert worker.execute_model(scheduled("a")) == "output of ['a']"
    worker.shutdown()


def test_where_another_worker_holds_the_address_code2wav_keeps_vllm_omnis_look_and_says_so(
    stage_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    name = _name()
    monkeypatch.setenv(window_doorbell.ADDRESS_VARIABLE, name)
    first = Listener(window_doorbell.address(name), lambda: None)  # a first code2wav worker of the same server
    try:
        worker = stage_module.DoorbellGenerationWorker()
        worker.init_device()  # starts all the same
        assert isinstance(worker.model_runner._omni_data_plane._work_available, threading.Event)
        assert "window doorbell off: cannot bind" in caplog.text
        assert worker.execute_model(scheduled("a")) == "output of ['a']"
        worker.shutdown()
    finally:
        first.close()


def test_the_plugin_registers_the_connector_by_its_name_once(monkeypatch: pytest.MonkeyPatch) -> None:
    class Factory:
        registry: ClassVar[dict[str, Callable[[dict], Any]]] = {"SharedMemoryConnector": lambda config: None}

        @classmethod
        def register_connector(cls, name: str, constructor: Callable[[dict], Any]) -> None:
            if name in cls.registry:  # as vllm-omni's factory.py: a name twice is an error
                raise ValueError(name)
            cls.registry[name] = constructor

        @classmethod
        def list_registered_connectors(cls) -> list[str]:
            return list(cls.registry)

    module = types.ModuleType("vllm_omni.distributed.omni_connectors.factory")
    module.OmniConnectorFactory = Factory  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm_omni.distributed.omni_connectors.factory", module)
    model_registration.register_connectors()
    model_registration.register_connectors()  # the plugin runs once a process, but the server's runs it again
    assert sorted(Factory.registry) == ["SharedMemoryConnector", window_doorbell.CONNECTOR_NAME]
