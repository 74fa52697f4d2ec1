"""Where the memory budget line falls: training memory grows linearly in the micro-batch size b
(weights, gradients and optimizer state are fixed; the activations saved for backward are per sample),
so peak(b) = fixed + per_sample * b through measured points predicts the largest b under a limit.

Pure: measured (b, peak) pairs in, a prediction out. A prediction only chooses what to measure next;
whether a size fits is always decided by measuring it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Line:
    """peak_mb(b) = fixed_mb + per_sample_mb * b."""

    fixed_mb: float
    per_sample_mb: float

    def peak_mb(self, micro_batch_size: float) -> float:
        """The predicted peak at this micro-batch size."""
        return self.fixed_mb + self.per_sample_mb * micro_batch_size

    def largest_within(self, limit_mb: float) -> float:
        """The largest (real) b whose predicted peak is within the limit: inf when memory does not grow."""
        if self.per_sample_mb <= 0:
            return math.inf if self.fixed_mb <= limit_mb else -math.inf
        return (limit_mb - self.fixed_mb) / self.per_sample_mb


def fit(points: Sequence[tuple[int, float]]) -> Line | None:
    """The line through two (b, peak) points; through the origin from one point (every MB per sample:
    it over-estimates the growth, so its first guess errs towards a size that fits); None without points."""
    if not points:
        return None
    if len(points) == 1 or points[0][0] == points[1][0]:
        b, peak = points[0]
        return Line(0.0, peak / b)
    (b1, p1), (b2, p2) = points[:2]
    slope = (p2 - p1) / (b2 - b1)
    return Line(p1 - slope * b1, slope)


def nearest_points(points: Sequence[tuple[int, float]], limit_mb: float) -> list[tuple[int, float]]:
    """The two measured points that bracket the limit most closely (the largest under it and the smallest
    above it), else the two nearest it on the side measured: the line is most accurate between them."""
    under = sorted(p for p in points if p[1] <= limit_mb)
    over = sorted(p for p in points if p[1] > limit_mb)
    if under and over:
        return [under[-1], over[0]]
    return under[-2:] if under else over[:2]


def predicted_index(sizes: Sequence[int], points: Sequence[tuple[int, float]], limit_mb: float) -> int | None:
    """The index in the ascending `sizes` of the largest predicted to be within the limit (-1: none is),
    from the measured (b, peak) points; None when nothing has been measured."""
    line = fit(nearest_points(points, limit_mb))
    if line is None:
        return None
    largest = line.largest_within(limit_mb)
    if largest == math.inf:
        return len(sizes) - 1
    # A hair of slack: a size exactly on the line is predicted to fit despite rounding.
    return bisect.bisect_right(sizes, largest * (1 + 1e-9)) - 1
