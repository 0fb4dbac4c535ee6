"""Summary statistics: mean and percentiles (linear interpolation between closest ranks, as numpy's default)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """{"mean", "p50", "p90", "p95", "p99"}; all None when there are no values."""
    if not values:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), **{f"p{p}": float(np.percentile(array, p)) for p in PERCENTILES}}


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """{"p50", "p95", "max"}: the typical case, the tail and the worst; all None when there are no values."""
    if not values:
        return {"p50": None, "p95": None, "max": None}
    array = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(array, 50)), "p95": float(np.percentile(array, 95)), "max": float(array.max())}


def low_spread(values: Sequence[float]) -> dict[str, float | None]:
    """{"p50", "p5", "min"}: the typical case, the low tail and the worst, for a measure where less is worse; all None
    when there are no values."""
    if not values:
        return {"p50": None, "p5": None, "min": None}
    array = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(array, 50)), "p5": float(np.percentile(array, 5)), "min": float(array.min())}
