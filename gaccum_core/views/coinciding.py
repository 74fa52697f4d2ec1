"""Which runs coincide: the same losses at every step, what exact accumulation promises for b·k = b'·k',
and what one line drawn over another would hide. Pure: no plotly, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gaccum_core.views.series import RunSeries, with_rows


@dataclass(frozen=True)
class Coincidence:
    """Runs whose training losses agree at every step to within max_diff (relative)."""

    run_ids: tuple[str, ...]
    labels: tuple[str, ...]
    steps: int
    max_diff: float


def coinciding(runs: list[RunSeries], tolerance: float = 1e-5) -> list[Coincidence]:
    """Groups of runs with the same steps whose losses differ by at most `tolerance` relative: what
    exact accumulation promises for b·k = b'·k', and what one colour drawn over another would hide."""
    groups: list[list[tuple[RunSeries, np.ndarray]]] = []
    for _, run in with_rows(runs):
        loss = run.metrics["loss"].to_numpy(dtype=float)
        for group in groups:
            if _relative_gap(group[0][1], loss) <= tolerance:
                group.append((run, loss))
                break
        else:
            groups.append([(run, loss)])
    return [Coincidence(tuple(r.run_id for r, _ in group), tuple(r.label for r, _ in group), len(group[0][1]),
                        max(_relative_gap(group[0][1], loss) for _, loss in group[1:]))
            for group in groups if len(group) > 1]


def _relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |a|, over equally long finite series; inf when they cannot be compared."""
    if len(a) != len(b) or len(a) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
