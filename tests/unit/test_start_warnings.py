"""What the server says at start about settings that do not do what they seem to: a voice alias naming no voice of
the engine or hidden by a voice of the same name, a profiler folder for an engine without a profiler."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.engine_protocol import VoiceInfo
from app.engines import create_engine
from app.server import create_app
from app.settings import Settings


def test_an_alias_to_a_voice_the_engine_lacks_is_logged_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """A misspelt target would otherwise speak in the default voice without a word to the operator."""
    settings = Settings(voice_aliases={"narrator": "ryann", "alloy": ""})
    with caplog.at_level(logging.WARNING, logger="app.server"):
        app = create_app(settings)
    warned = [record.getMessage() for record in caplog.records if "narrator" in record.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "'ryann'" in warned[0] and "default voice" in warned[0]
    assert app.state.catalog.resolve("narrator") == app.state.catalog.resolve("alloy")  # as before: the default
    assert not [record for record in caplog.records if "alloy" in record.getMessage()]


def test_a_profiler_folder_on_an_engine_without_a_profiler_is_said_at_start(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The embedded engine has no profiler: its /admin/profile routes could only answer 400, so the operator who set
    SPEECH_PROFILER_DIR hears it at start rather than at the first call."""
    with caplog.at_level(logging.WARNING, logger="app.server"):
        create_app(Settings(profiler_dir=str(tmp_path)))
    warned = [record.getMessage() for record in caplog.records if "SPEECH_PROFILER_DIR" in record.getMessage()]
    assert len(warned) == 1 and "no profiler" in warned[0], caplog.text


def test_an_alias_an_engine_voice_of_the_same_name_hides_is_logged_at_start(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's name is matched against the engine's voices first: an alias "Ryan" to vivian would never be
    reached, and the operator who set it hears so at start."""
    settings = Settings(voice_aliases={"Ryan": "vivian", "alloy": ""})
    engine = create_engine(settings)
    voices = [VoiceInfo("vivian", "Vivian", ("English",)), VoiceInfo("ryan", "Ryan", ("English",))]
    monkeypatch.setattr(engine, "voices", lambda: voices)
    with caplog.at_level(logging.WARNING, logger="app.server"):
        app = create_app(settings, engine=engine)
    warned = [record.getMessage() for record in caplog.records if "'Ryan'" in record.getMessage()]
    assert len(warned) == 1 and "also a voice of this engine" in warned[0], caplog.text
    assert app.state.catalog.resolve("Ryan") == "ryan"
