"""VoiceCatalog: requested names (engine ids and OpenAI aliases) to engine voice ids."""

from __future__ import annotations

import typing

import pytest

from app.engine_protocol import VoiceInfo
from app.settings import OPENAI_VOICES, Settings
from app.voices import VoiceCatalog

VOICES = (
    VoiceInfo("Vivian", "Vivian", ("Chinese", "English")),
    VoiceInfo("ryan", "Ryan", ("English",)),
    VoiceInfo("aiden", "Aiden", ("English",)),
)
ALIASES = {"alloy": "", "echo": "ryan", "fable": "AIDEN", "nova": "nobody", "Shimmer": ""}


@pytest.fixture
def catalog() -> VoiceCatalog:
    return VoiceCatalog(voices=VOICES, aliases=dict(ALIASES))


@pytest.mark.parametrize(("name", "expected"), [("Vivian", "Vivian"), ("ryan", "ryan"), ("aiden", "aiden")])
def test_exact_id(catalog: VoiceCatalog, name: str, expected: str) -> None:
    assert catalog.resolve(name) == expected


@pytest.mark.parametrize(("name", "expected"), [("vivian", "Vivian"), ("VIVIAN", "Vivian"), ("RyAn", "ryan")])
def test_case_insensitive_returns_the_engine_spelling(catalog: VoiceCatalog, name: str, expected: str) -> None:
    assert catalog.resolve(name) == expected


def test_surrounding_whitespace_is_ignored(catalog: VoiceCatalog) -> None:
    assert catalog.resolve("  ryan\t") == "ryan"
    assert catalog.resolve(" alloy ") == "Vivian"


def test_alias_with_empty_target_is_the_first_voice(catalog: VoiceCatalog) -> None:
    assert catalog.resolve("alloy") == "Vivian"
    assert catalog.resolve("ALLOY") == "Vivian"
    assert catalog.resolve("shimmer") == "Vivian"  # the alias itself is matched case-insensitively


def test_alias_to_a_named_voice(catalog: VoiceCatalog) -> None:
    assert catalog.resolve("echo") == "ryan"
    assert catalog.resolve("fable") == "aiden"  # the target is matched case-insensitively too


def test_alias_to_an_unknown_target_is_the_default_voice(catalog: VoiceCatalog) -> None:
    assert catalog.resolve("nova") == "Vivian"


@pytest.mark.parametrize("name", ["nobody", "", "   ", "ryan2", "ash", "vivia"])
def test_unknown_name_is_none(catalog: VoiceCatalog, name: str) -> None:
    assert catalog.resolve(name) is None


def test_voice_id_wins_over_an_alias_of_the_same_name() -> None:
    catalog = VoiceCatalog(voices=VOICES, aliases={"ryan": "aiden"})
    assert catalog.resolve("ryan") == "ryan"


def test_empty_catalog_resolves_nothing() -> None:
    catalog = VoiceCatalog(voices=(), aliases={"alloy": ""})
    assert catalog.resolve("alloy") is None
    assert catalog.resolve("anything") is None
    assert catalog.aliases_of("alloy") == []


def test_aliases_of(catalog: VoiceCatalog) -> None:
    assert catalog.aliases_of("Vivian") == ["Shimmer", "alloy", "nova"]  # empty and unknown targets: the default
    assert catalog.aliases_of("ryan") == ["echo"]
    assert catalog.aliases_of("aiden") == ["fable"]
    assert catalog.aliases_of("nobody") == []


def test_every_alias_resolves_to_the_voice_it_is_listed_under(catalog: VoiceCatalog) -> None:
    for voice in VOICES:
        for alias in catalog.aliases_of(voice.id):
            assert catalog.resolve(alias) == voice.id
    listed = [alias for voice in VOICES for alias in catalog.aliases_of(voice.id)]
    assert sorted(listed) == sorted(ALIASES)


def test_default_settings_alias_every_openai_voice_to_the_default() -> None:
    aliases = Settings.model_fields["voice_aliases"].default_factory()  # type: ignore[call-arg, misc]
    assert set(aliases) == set(OPENAI_VOICES)
    catalog = VoiceCatalog(voices=(VoiceInfo("heart", "Heart", ("English",)),), aliases=aliases)
    assert all(catalog.resolve(name) == "heart" for name in OPENAI_VOICES)
    assert catalog.aliases_of("heart") == sorted(OPENAI_VOICES)


def test_unknown_targets_are_the_aliases_naming_a_voice_the_engine_lacks(catalog: VoiceCatalog) -> None:
    assert catalog.unknown_targets() == {"nova": "nobody"}  # empty targets mean the default on purpose


def test_an_alias_named_as_an_engine_voice_is_shadowed_where_it_names_another() -> None:
    """A request's name is matched against the engine's voices first: an alias "Ryan" to vivian is never reached."""
    voices = (VoiceInfo("vivian", "Vivian", ("English",)), VoiceInfo("ryan", "Ryan", ("English",)))
    catalog = VoiceCatalog(voices=voices, aliases={"Ryan": "vivian", "vivian": "Vivian", "alloy": "", "echo": "ryan"})
    assert catalog.shadowed_aliases() == {"Ryan": "vivian"}  # one to its own voice, or to none, hides nothing
    assert catalog.resolve("ryan") == "ryan"


def test_an_alias_to_the_generic_default_voice_is_no_unknown_target() -> None:
    """ "default" names the default voice (vllm-omni's generic voice): an alias to it means what it says."""
    catalog = VoiceCatalog(voices=VOICES, aliases={"alloy": "default", "echo": "DEFAULT"})
    assert catalog.unknown_targets() == {}


def test_every_voice_the_openai_sdk_offers_is_an_alias() -> None:
    """Client code written against the OpenAI SDK runs unchanged: every voice name its `speech.create` offers (the
    pinned SDK's `Voice` literal; `marin` and `cedar` were once refused as unknown voices) names a voice here."""
    from openai.types.audio.speech_create_params import Voice

    offered = {name for arg in typing.get_args(Voice) for name in typing.get_args(arg) if isinstance(name, str)}
    assert len(offered) >= 13 and offered <= set(OPENAI_VOICES), offered - set(OPENAI_VOICES)
