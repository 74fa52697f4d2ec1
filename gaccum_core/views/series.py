"""A run as the charts see it (RunSeries), which runs have rows and speak tokens, and the points of a
line decimated to what a chart can show. Pure: no plotly, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MAX_POINTS = 2000


@dataclass(frozen=True)
class RunSeries:
    """One run as the charts see it: its legend label, its metric and eval frames, and its colour
    (views.colours.run_colours; None: by its place among the runs shown)."""

    run_id: str
    label: str
    metrics: pd.DataFrame
    evals: pd.DataFrame
    colour: str | None = None


def with_rows(runs: list[RunSeries]) -> list[tuple[int, RunSeries]]:
    """(index, run) for the runs that have at least one optimizer step."""
    return [(i, run) for i, run in enumerate(runs) if len(run.metrics)]


def is_language(run: RunSeries) -> bool:
    """A causal language modelling run: its steps count target tokens (an image run's, or a run
    written before token columns existed, hold none)."""
    tokens = run.metrics.get("tokens_seen")
    return tokens is not None and bool(pd.to_numeric(tokens, errors="coerce").notna().any())


def downsample(frame: pd.DataFrame, x: str, y: str, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Rows with finite x and y, min/max-decimated in x order to at most max_points rows."""
    xs, ys = frame[x].to_numpy(dtype=float), frame[y].to_numpy(dtype=float)
    finite = np.isfinite(xs) & np.isfinite(ys)
    if not finite.all():
        frame, xs, ys = frame[finite], xs[finite], ys[finite]
    if not frame[x].is_monotonic_increasing:
        order = np.argsort(xs, kind="stable")
        frame, ys = frame.iloc[order], ys[order]
    if len(frame) <= max_points:
        return frame
    return frame.iloc[_min_max_positions(ys, max_points)]


def _min_max_positions(ys: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted positions of the first, the last and each equal-count bucket's min and max."""
    n = len(ys)
    buckets = max((max_points - 2) // 2, 1)
    size = -(-n // buckets)
    offsets = np.arange(buckets) * size
    # Padding with +inf / -inf keeps the short last bucket's argmin / argmax inside the data.
    lows = np.full(buckets * size, np.inf)
    lows[:n] = ys
    highs = np.full(buckets * size, -np.inf)
    highs[:n] = ys
    picked = np.concatenate(([0, n - 1], lows.reshape(buckets, size).argmin(axis=1) + offsets,
                             highs.reshape(buckets, size).argmax(axis=1) + offsets))
    picked = np.unique(picked)
    return picked[picked < n]  # buckets past the end (all padding) point nowhere
