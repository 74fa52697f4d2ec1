"""The y range and tick settings a chart's data calls for: a constant series drawn around its value, a
diverged run clipped out of the range with a note that says so, whole-number ticks on short integer
axes. Pure: numpy on the traces' values, no plotly objects."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# A run gone wild (a loss of 3e32) shows as a jump in the sorted values of a chart: the first value above
# the jump is more than JUMP times the whole spread of the values below it. Such values are clipped out
# of the range, as long as at least KEEP of the points stay in it. A curve that starts high and falls
# fast (a loss from 5.5 to 1.5) rises without such a jump, and keeps its range.
JUMP = 10.0
KEEP = 0.75
# Axes spanning at most this many units get a tick per unit: plotly's own choice on a short span of
# whole numbers is 0.5, shown by a ",d" format as "0 1 1 2 2".
UNIT_TICKS_UP_TO = 10


@dataclass(frozen=True)
class Clip:
    """A y range that leaves out values of runs gone wild, and the runs (legend names) it leaves out."""

    low: float
    high: float
    outliers: tuple[str, ...]
    largest: float

    def note(self) -> str:
        """What the chart says about it: the range shown and the run(s) beyond it."""
        runs = ", ".join(self.outliers)
        return f"y clipped to {_short(self.low)}–{_short(self.high)}: {runs} reach{'es' if len(self.outliers) == 1 else ''} {self.largest:.3g}"


def _short(value: float) -> str:
    return f"{value:.3g}"


def finite_values(traces: list[dict[str, Any]], key: str = "y", axis: str | None = None) -> np.ndarray:
    """The finite values under `key` of the traces drawn on y axis `axis` (None: every trace)."""
    parts = [np.asarray(t[key], dtype=float) for t in traces
             if key in t and (axis is None or t.get("yaxis", "y") == axis)]
    values = np.concatenate(parts) if parts else np.empty(0)
    return values[np.isfinite(values)]


def constant_range(values: np.ndarray, log: bool) -> tuple[float, float] | None:
    """A range around a series that never changes (lr 0.05 drawn on −1…1 looks like 0): [0, 2v] on a
    linear axis, a decade either side on a log one; None when the values vary (plotly's autorange)."""
    if not len(values) or values.max() - values.min() > 1e-9 * np.abs(values).max():  # rounding: the same
        return None
    value = float(values.mean())
    if log:
        if value <= 0:
            return None
        return (math.log10(value) - 1, math.log10(value) + 1)
    if value == 0:
        return (0.0, 1.0)
    return (0.0, 2 * value) if value > 0 else (2 * value, 0.0)


def _cut(values: np.ndarray) -> int | None:
    """The index of the largest value below the first jump (sorted values), or None without a jump."""
    first = max(int(np.ceil(len(values) * KEEP)) - 1, 0)
    below = values[first:-1] - values[0]
    floor = max(0.01 * float(np.max(np.abs(values[: first + 1]))), 1e-12)
    jumps = np.nonzero(np.diff(values[first:]) > JUMP * np.maximum(below, floor))[0]
    return first + int(jumps[0]) if len(jumps) else None


def clip(traces: list[dict[str, Any]]) -> Clip | None:
    """A range without the values of runs gone wild (see JUMP), naming the traces that reach them; None
    when no value is that far out."""
    values = np.sort(finite_values(traces))
    if len(values) < 4:
        return None
    cut = _cut(values)
    if cut is None:
        return None
    low, high = float(values[0]), float(values[cut])
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 1.0
    wild = [t for t in traces if (finite_values([t]) > high).any()]
    named = [t for t in wild if t.get("showlegend", True) is not False] or wild  # the raw loss's run
    outliers = tuple(dict.fromkeys(str(t.get("name", "")) for t in named))
    return Clip(low - pad, high + pad, outliers, float(values[-1]))


def unit_ticks(values: np.ndarray) -> dict[str, Any]:
    """Tick settings for a whole-number axis: one tick per unit when the span is short (one point,
    or a few skipped steps), so no tick label repeats; nothing when plotly's own ticks are whole."""
    if not len(values) or values.max() - values.min() > UNIT_TICKS_UP_TO:
        return {}
    return {"dtick": 1, "tick0": 0}


def band(values: np.ndarray, low: float, high: float, log: bool = False) -> tuple[float, float] | None:
    """A y range (log10 units on a log axis) that draws `values` between `low` and `high` of the plot's height
    (fractions from its bottom): [0, largest / high] on a linear axis when that leaves the smallest at `low` or
    above, else the values stretched over the band (a constant one in its middle); None without values."""
    values = np.log10(values[values > 0]) if log else values
    if not len(values):
        return None
    smallest, largest = float(values.min()), float(values.max())
    if not log and largest > 0 and smallest >= 0 and smallest / largest * high >= low:
        return (0.0, largest / high)
    if largest - smallest <= 1e-9 * max(abs(largest), 1.0):
        pad = 0.5 if log else 0.05 * abs(largest) or 1.0
        smallest, largest = smallest - pad, largest + pad
    span = (largest - smallest) / (high - low)
    return (smallest - low * span, smallest - low * span + span)
