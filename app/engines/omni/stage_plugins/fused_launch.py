"""How the fused code predictor's kernels are launched (`SPEECH_OMNI__FUSED_KERNELS`,
`SPEECH_OMNI__FUSED_DEPENDENT_LAUNCH`): set in the server, read in the talker's process, which vllm-omni spawns with
the server's environment. Plain Python, so that the server (and a machine without Triton) can import it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

VARIABLE = "SPEECH_OMNI_FUSED_KERNELS"
Kernels = Literal["as-tuned", "split", "prefetch"]
KERNELS: tuple[Kernels, ...] = get_args(Kernels)
DEPENDENT = "dependent"
# The most rows of a launch (one row block of the kernels) that the split and prefetch tiles and dependent launches
# apply to: 16 streams, 8 in a frame's first pass (positions 0 and 1 at once). The split and prefetch tiles' registers
# hold no more; started in turn on one H200, prefetch with dependent launches at every row block did more work up to 8
# streams and lost bursts of 32, where it differed from the tuned kernels by its dependent launches alone
# (benchmarks/gpu/2026-12-01-h200-omni-fused-prefetch-in-turn/). Past this the launches are the tuned kernels' own, bit
# for bit (tests/gpu/test_predictor_kernels.py).
LAUNCHED_MAX_ROWS = 16

log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


@dataclass(frozen=True)
class FusedLaunch:
    """`kernels`: the projections' tiles as tuned one kernel at a time (`as-tuned`), each reduction split across
    more programs (`split`), or split so that each program's share of the weights is loaded whole before its input
    (`prefetch`); `dependent`: launched as programmatic dependent launches where the GPU has them. Both apply to
    launches of up to `LAUNCHED_MAX_ROWS` rows; past that, the tuned kernels' own launches. The default, prefetch with
    dependent launches, won at one and eight streams on both tools in three starts against three of the tuned kernels
    on one H200 (benchmarks/gpu/2026-12-04-h200-omni-prefetch-six-starts/)."""

    kernels: Kernels = "prefetch"
    dependent: bool = True

    def dependent_at(self, block_m: int) -> bool:
        """Whether the launches over a row block of `block_m` rows are to be dependent ones (where the GPU has them):
        asked for, and the block at most `LAUNCHED_MAX_ROWS`."""
        return self.dependent and block_m <= LAUNCHED_MAX_ROWS

    @property
    def name(self) -> str:
        """The launch as the variable writes it: `prefetch+dependent`, `as-tuned`."""
        return "+".join([self.kernels, *([DEPENDENT] if self.dependent else [])])

    def environment_value(self) -> str | None:
        """The variable's value for this launch; None for the default (the variable unset)."""
        return None if self == FusedLaunch() else self.name


def from_environment(environ: Mapping[str, str]) -> FusedLaunch:
    """The launch `environ` names; a value it does not know is said and the default kept, not a failed stage."""
    value = environ.get(VARIABLE, "")
    if not value:
        return FusedLaunch()
    kernels, *rest = value.split("+")
    if kernels not in KERNELS or rest not in ([], [DEPENDENT]):
        log.warning("%s=%r is not a launch of the fused kernels: the default, %s", VARIABLE, value, FusedLaunch().name)
        return FusedLaunch()
    return FusedLaunch(kernels=kernels, dependent=bool(rest))  # type: ignore[arg-type]
