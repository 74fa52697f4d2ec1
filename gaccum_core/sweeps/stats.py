"""Mean and 95 % confidence interval over a cell's repeats (Student's t), and the median of a run's steps
after its warm-up. Pure."""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence

# Student's t, two-sided 95 % (the 0.975 quantile), by degrees of freedom; between rows the next smaller
# row's value is used (a slightly wider interval), beyond the last the normal's 1.96.
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
         10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098,
         18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595,
         26: 2.0555, 27: 2.0518, 28: 2.0484, 29: 2.0452, 30: 2.0423, 40: 2.0211, 60: 2.0003, 120: 1.9799}
NORMAL_975 = 1.9600


def t_975(dof: int) -> float:
    """The 0.975 quantile of Student's t with `dof` degrees of freedom (1 or more)."""
    if dof < 1:
        raise ValueError(f"dof={dof} is not allowed: at least 1")
    if dof > max(T_975):
        return NORMAL_975
    return T_975[max(d for d in T_975 if d <= dof)]


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
