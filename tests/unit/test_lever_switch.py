"""Levers switched in a running server (app/engines/omni/stage_plugins/lever_switch.py): which the file names, read at
most every quarter second on the clock given, each change logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.engines.omni.stage_plugins import lever_switch
from app.engines.omni.stage_plugins.lever_switch import Switch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_file_every_lever_its_setting_turned_on_is_on() -> None:
    switch = lever_switch.from_environ({})
    assert switch.path is None
    assert switch.on("frames_as_lists") and switch.on("prompt_batch")


def test_a_lever_is_on_while_the_file_names_it_read_at_most_every_quarter_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = tmp_path / "levers", Clock()
    switch = lever_switch.from_environ({lever_switch.VARIABLE: str(path)})
    switch._clock = clock  # the variable's switch, on a clock the test moves
    caplog.set_level(logging.INFO, logger="vllm.speech.plugin")
    assert not switch.on("frames_as_lists")  # no file yet: none on
    path.write_text("frames_as_lists\n")
    clock.now += lever_switch.CHECK_EVERY_S / 2
    assert not switch.on("frames_as_lists")  # not read again yet
    clock.now += lever_switch.CHECK_EVERY_S / 2
    assert switch.on("frames_as_lists") and not switch.on("prompt_batch")
    path.write_text("prompt_batch  frames_as_lists typo_lever")
    clock.now += lever_switch.CHECK_EVERY_S
    assert switch.on("frames_as_lists") and switch.on("prompt_batch")
    path.unlink()
    clock.now += lever_switch.CHECK_EVERY_S
    assert not switch.on("frames_as_lists") and not switch.on("prompt_batch")
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        f"{lever_switch.VARIABLE}: levers on: none",
        f"{lever_switch.VARIABLE}: levers on: frames_as_lists",
        f"{lever_switch.VARIABLE}: levers on: frames_as_lists prompt_batch (not switchable, ignored: typo_lever)",
        f"{lever_switch.VARIABLE}: levers on: none",
    ]


def test_an_unchanged_file_is_not_logged_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, clock = tmp_path / "levers", Clock()
    path.write_text("frames_as_lists")
    switch = Switch(str(path), clock)
    caplog.set_level(logging.INFO, logger="vllm.speech.plugin")
    for _ in range(5):
        assert switch.on("frames_as_lists")
        clock.now += 1
    assert len(caplog.records) == 1


def test_the_switchable_levers_are_settings_and_the_ones_lever_starts_may_switch() -> None:
    """One list in three places: the talker's, the settings' (each lever a switch of its own), and what
    lever-starts.sh's SWITCH_ROUNDS accepts; and which of them are on by default, the settings' and the script's."""
    import re

    from app.settings import SWITCHABLE_LEVERS, OmniSettings

    root = Path(__file__).resolve().parents[2]
    script = (root / "deploy/gpu/lever-starts.sh").read_text()
    switchable = re.search(r'^SWITCHABLE="([^"]*)"$', script, re.MULTILINE)
    assert switchable is not None
    assert set(switchable.group(1).split()) == lever_switch.LEVERS == set(SWITCHABLE_LEVERS)
    from app.engines.omni.engine import SWITCHABLE_PLUGINS  # each one's variable, set by the engine

    assert list(SWITCHABLE_PLUGINS) == list(SWITCHABLE_LEVERS)
    default_on = re.search(r'^SWITCH_DEFAULT_ON="([^"]*)"', script, re.MULTILINE)
    assert default_on is not None
    assert set(default_on.group(1).split()) == {lever for lever in SWITCHABLE_LEVERS if getattr(OmniSettings(), lever)}
    for lever in lever_switch.LEVERS:
        assert OmniSettings.model_fields[lever].annotation is bool, lever
    with pytest.raises(AssertionError):
        Switch(None).on("frames_as_list")


def test_a_stage_process_has_one_switch_for_every_lever_made_again_for_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The talker's model and its window producer ask the same switch (each change read and logged once); a later
    start in the same process that names another file, or none, gets a switch of its own."""
    monkeypatch.setattr(lever_switch, "_process_switch", None)
    first = {lever_switch.VARIABLE: str(tmp_path / "a")}
    switch = lever_switch.for_process(first)
    assert lever_switch.for_process(first) is switch and switch.path == str(tmp_path / "a")
    other = lever_switch.for_process({lever_switch.VARIABLE: str(tmp_path / "b")})
    assert other is not switch and other.path == str(tmp_path / "b")
    assert lever_switch.for_process({}).path is None
