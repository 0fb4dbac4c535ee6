"""The settings page of the docs site is generated from the settings model (docs/gen_settings.py, a MkDocs hook): every
setting appears under the variable the service reads, and settings nested per engine get the names pydantic-settings
reads for them."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Literal

import pytest
from pydantic import AliasChoices, BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings", ROOT / "docs" / "gen_settings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up, as MkDocs' hook loader allows
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def rows(markdown: str) -> dict[str, list[str]]:
    """Variable → its table row's cells (variable cell excluded)."""
    found = {}
    for line in markdown.splitlines():
        match = re.match(r"^\| `(SPEECH_[A-Z0-9_]+)`[^|]* \| (.*) \|$", line)
        if match:
            found[match.group(1)] = re.split(r" (?<!\\)\| ", match.group(2))
    return found


def test_every_setting_is_on_the_page_under_the_variable_the_service_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    table = rows(gen.render(Settings))
    groups = {  # each engine's settings: a model of its own
        name: info.annotation
        for name, info in Settings.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    }
    assert set(groups) == {"embedded", "omni", "sglang"}
    service = {f"SPEECH_{name.upper()}" for name in Settings.model_fields if name not in groups}
    engines = {
        f"SPEECH_{group.upper()}__{name.upper()}" for group, model in groups.items() for name in model.model_fields
    }  # type: ignore[union-attr]
    assert set(table) == service | engines
    monkeypatch.setenv("SPEECH_QUEUE_TIMEOUT_S", "7.5")  # the documented name is the one that is read
    assert Settings().queue_timeout_s == 7.5
    kind, default, what = table["SPEECH_PORT"]
    assert (kind, default, what) == ("integer, 1 – 65535", "`8000`", Settings.model_fields["port"].description)
    assert table["SPEECH_ENGINE"][0] == "`auto` \\| `embedded` \\| `omni` \\| `sglang`"  # a pipe in a cell is escaped
    assert table["SPEECH_MAX_BODY_BYTES"][1] == "`26214400` (25 MiB)"
    assert table["SPEECH_API_KEYS_FILE"][1] == "unset"


def test_defaults_that_depend_on_the_machine_are_left_to_the_description() -> None:
    table = rows(gen.render(Settings))
    for name in ("SPEECH_EMBEDDED__WORKERS", "SPEECH_VOICE_STORE", "SPEECH_MAX_CONCURRENCY"):
        assert table[name][1] == gen.SEE_DESCRIPTION, name
        assert "default" in table[name][2].lower(), name
    page = gen.render(Settings)
    assert str(Path.home()) not in page  # the build machine's home directory never reaches the page


class Omni(BaseModel):
    """Settings of the omni engine."""

    model: str | None = Field(None, description="Model directory.")
    warmup: list[int] = Field(default_factory=lambda: [1, 2], description="Batch sizes.")
    mps: bool = Field(False, description="MPS.")


class Nested(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPEECH_", env_nested_delimiter="__")

    port: int = Field(8000, validation_alias=AliasChoices("speech_port", "speech_listen_port"), description="Port.")
    omni: Omni = Field(default_factory=Omni)


def test_nested_settings_render_with_the_names_pydantic_settings_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    page = gen.render(Nested)
    table = rows(page)
    assert set(table) == {"SPEECH_PORT", "SPEECH_OMNI__MODEL", "SPEECH_OMNI__WARMUP", "SPEECH_OMNI__MPS"}
    assert "### `settings.omni`" in page and "Settings of the omni engine." in page
    assert "| `SPEECH_PORT` (also `SPEECH_LISTEN_PORT`) |" in page
    assert table["SPEECH_OMNI__WARMUP"][:2] == ["list of integer (comma list or JSON)", "`1,2`"]
    monkeypatch.setenv("SPEECH_OMNI__MODEL", "/models/x")
    monkeypatch.setenv("SPEECH_LISTEN_PORT", "9000")
    assert Nested().omni.model == "/models/x" and Nested().port == 9000


def test_a_nested_model_without_a_delimiter_is_refused() -> None:
    class Flat(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="SPEECH_")
        omni: Omni = Field(default_factory=Omni)

    with pytest.raises(ValueError, match="env_nested_delimiter"):
        gen.render(Flat)


def test_the_hook_fills_the_settings_page_and_only_it() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    assert gen.MARKER in page

    def build(text: str, src_uri: str) -> str:
        return gen.on_page_markdown(text, page=SimpleNamespace(file=SimpleNamespace(src_uri=src_uri)))

    built = build(page, "settings.md")
    assert gen.MARKER not in built and "| `SPEECH_HOST` |" in built
    assert build(page, "api.md") == page
    with pytest.raises(ValueError, match="marker"):
        build("# Settings\n", "settings.md")


def test_a_setting_of_several_kinds_names_each_of_them() -> None:
    """SPEECH_OMNI__CUDA_MPS is `true`, `false` or `auto`: the page said `Union[bool, Literal['auto']]`."""

    class Choice(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="SPEECH_T_")
        mps: bool | Literal["auto"] = Field(False, description="Off by default.")
        size: int | Literal["max"] | None = Field(None, description="")

    markdown = gen.render(Choice)
    assert rows(markdown)["SPEECH_T_MPS"][:2] == ["`true` \\| `false` \\| `auto`", "`false`"]
    assert rows(markdown)["SPEECH_T_SIZE"][0] == "integer \\| `max`"
    assert rows(gen.render(Settings))["SPEECH_OMNI__CUDA_MPS"][:2] == ["`true` \\| `false` \\| `auto`", "`auto`"]
