"""An engine asked for that cannot run here is refused in one line saying what to do: the extra to install where its
packages are missing (as the README and docs/engines.md install it), the GPU where none is visible, the platform
where its extra installs nothing."""

from __future__ import annotations

import pytest

import app.engines
from app.engines import create_engine
from app.settings import InvalidSettings, Settings


def refusal(settings: Settings) -> str:
    with pytest.raises(InvalidSettings) as refused:
        create_engine(settings)
    return str(refused.value)


@pytest.fixture
def linux_x86_64(monkeypatch: pytest.MonkeyPatch) -> None:
    """The platform the GPU engines' extras install on, whatever runs the tests."""
    monkeypatch.setattr(app.engines.sys, "platform", "linux")
    monkeypatch.setattr(app.engines.platform, "machine", lambda: "x86_64")


@pytest.fixture
def nothing_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.engines, "package_installed", lambda package: False)


@pytest.mark.parametrize(
    ("engine", "command"),
    [
        ("omni", 'make install EXTRAS="--extra omni --extra align"'),
        # sglang-omni's pins conflict with the test tools': its environment is made without them
        ("sglang", 'make install EXTRAS="--extra sglang --extra align" SYNC_FLAGS=--no-dev'),
        ("embedded", 'make install EXTRAS="--extra embedded"'),
    ],
)
@pytest.mark.usefixtures("linux_x86_64", "nothing_installed")
def test_an_engine_not_installed_is_refused_naming_the_extra_that_installs_it(engine: str, command: str) -> None:
    """It said "missing package or GPU", which told the operator neither which nor what to install."""
    said = refusal(Settings(engine=engine))
    assert said.startswith("SPEECH_ENGINE (--engine): "), said
    assert f"install the `{engine}` extra: {command}" in said, said
    assert "GPU" not in said, said
    assert "\n" not in said


@pytest.mark.usefixtures("linux_x86_64")
@pytest.mark.parametrize("engine", ["omni", "sglang"])
def test_a_gpu_engine_installed_on_a_machine_without_a_gpu_is_refused_for_the_gpu(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    monkeypatch.setattr(app.engines, "package_installed", lambda package: True)
    monkeypatch.setattr(app.engines, "gpu_present", lambda: False)
    said = refusal(Settings(engine=engine))
    assert "needs an NVIDIA GPU" in said and "extra" not in said, said


@pytest.mark.usefixtures("linux_x86_64")
def test_a_gpu_hidden_by_cuda_visible_devices_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.engines, "package_installed", lambda package: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert "CUDA_VISIBLE_DEVICES=-1" in refusal(Settings(engine="omni"))


@pytest.mark.usefixtures("nothing_installed")
@pytest.mark.parametrize("engine", ["omni", "sglang"])
def test_a_gpu_engine_on_a_platform_its_extra_does_not_install_on_says_so(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """Its extra's packages are for Linux x86_64 only: elsewhere installing it installs nothing."""
    monkeypatch.setattr(app.engines.sys, "platform", "darwin")
    monkeypatch.setattr(app.engines.platform, "machine", lambda: "arm64")
    said = refusal(Settings(engine=engine))
    assert "Linux x86_64" in said and "make install" not in said, said


def test_an_installed_package_is_found_by_its_module() -> None:
    assert app.engines.package_installed("json")
    assert not app.engines.package_installed("no_such_package_of_this_service")
