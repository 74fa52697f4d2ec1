"""Mean and 95 % confidence interval over a cell's repeats (Student's t, from intervals), and the median
of a run's steps after its warm-up. Pure."""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence

from gaccum_core.intervals import t_975


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % interval) of the finite values; the half-width is NaN for fewer than
    two values (one repeat says nothing of the spread), both NaN for none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not kept:
        return math.nan, math.nan
    mean = statistics.fmean(kept)
    if len(kept) < 2:
        return mean, math.nan
    return mean, t_975(len(kept) - 1) * statistics.stdev(kept) / math.sqrt(len(kept))


def warmup_steps(steps: int) -> int:
    """Steps left out of a run's speed as warm-up: the first tenth, at least the first step (compilation,
    allocator growth, caches), none of a one-step run."""
    return 0 if steps < 2 else max(1, steps // 10)


def steady_median(per_step: Sequence[float]) -> float:
    """The median of a run's per-step figures after its warm-up steps (NaN for none)."""
    kept = [float(v) for v in per_step[warmup_steps(len(per_step)):] if v is not None and math.isfinite(float(v))]
    return statistics.median(kept) if kept else math.nan
