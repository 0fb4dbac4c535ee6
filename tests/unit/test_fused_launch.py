"""app/engines/omni/stage_plugins/fused_launch.py: how the fused code predictor's kernels are launched, set in the
server and read back in the talker's process from one environment variable."""

from __future__ import annotations

import itertools
import logging
from typing import get_args

import pytest

from app.engines.omni.stage_plugins.fused_launch import (
    KERNELS,
    LAUNCHED_MAX_ROWS,
    VARIABLE,
    FusedLaunch,
    from_environment,
)
from app.settings import OmniSettings


@pytest.mark.parametrize(("kernels", "dependent"), list(itertools.product(KERNELS, (False, True))))
def test_every_launch_reads_back_as_it_was_set(kernels: str, dependent: bool) -> None:
    launch = FusedLaunch(kernels, dependent)  # type: ignore[arg-type]
    value = launch.environment_value()
    assert from_environment({} if value is None else {VARIABLE: value}) == launch


def test_the_settings_offer_the_kernels_the_talkers_process_reads() -> None:
    """The setting (app.settings, which the stage plugins may not import) and the variable name the same launches."""
    field = OmniSettings.model_fields["fused_kernels"]
    assert get_args(field.annotation) == KERNELS and field.default == FusedLaunch().kernels
    assert OmniSettings.model_fields["fused_dependent_launch"].default is FusedLaunch().dependent


def test_the_default_leaves_the_variable_unset() -> None:
    """The default is prefetch with dependent launches (benchmarks/gpu/2026-12-04-h200-omni-prefetch-six-starts/)."""
    assert FusedLaunch() == FusedLaunch("prefetch", True) and FusedLaunch().environment_value() is None
    assert FusedLaunch("split", True).environment_value() == "split+dependent"
    assert FusedLaunch("as-tuned", False).environment_value() == "as-tuned"
    assert from_environment({}) == from_environment({VARIABLE: ""}) == FusedLaunch()


@pytest.mark.parametrize("value", ["fastest", "split+pdl", "split+dependent+dependent", "+dependent", "Split"])
def test_a_value_it_does_not_know_is_said_and_the_default_kept(value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="vllm.speech.plugin"):
        assert from_environment({VARIABLE: value}) == FusedLaunch()
    assert VARIABLE in caplog.text and repr(value) in caplog.text and "prefetch+dependent" in caplog.text


@pytest.mark.parametrize("kernels", KERNELS)
def test_dependent_launches_are_asked_for_up_to_one_row_block_of_16_streams(kernels: str) -> None:
    """Past 16 rows the launches are the tuned kernels' own, not dependent: where prefetch with dependent launches
    lost (bursts of 32) it differed from them by its dependent launches alone."""
    dependent = FusedLaunch(kernels, True)  # type: ignore[arg-type]
    assert LAUNCHED_MAX_ROWS == 16
    assert [dependent.dependent_at(block_m) for block_m in (16, 32, 64, 128)] == [True, False, False, False]
    assert not any(FusedLaunch(kernels, False).dependent_at(block_m) for block_m in (16, 32))  # type: ignore[arg-type]
