"""Which runs coincide: the same losses at every step they share, what exact accumulation promises for
b·k = b'·k', and what one line drawn over another would hide; and the sentence the pages say it in. A run
stopped early is compared with a longer one over its own steps. Pure: no plotly, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gaccum_core.views.series import RunSeries, with_rows


@dataclass(frozen=True)
class Coincidence:
    """Runs whose training losses agree at each of their first `steps` steps (every step all of them have) to
    within max_diff (relative); whole when they all have that many steps, no more."""

    run_ids: tuple[str, ...]
    labels: tuple[str, ...]
    steps: int
    max_diff: float
    whole: bool = True

    def sentence(self, labels: Sequence[str] | None = None) -> str:
        """What the pages say of it, naming the runs by `labels` (default: their own, as the legends do)."""
        names = " and ".join(self.labels if labels is None else labels)
        over = f"over all {self.steps} steps" if self.whole else f"over their first {self.steps} steps"
        return (f"{names} coincide {over}: their losses differ by at most {self.max_diff:.1e} (relative); "
                "the later ones are drawn dashed.")


def coinciding(runs: list[RunSeries], tolerance: float = 1e-5) -> list[Coincidence]:
    """Groups of runs whose losses differ by at most `tolerance` relative over the steps they share: what
    exact accumulation promises for b·k = b'·k', and what one colour drawn over another would hide. Each run
    is compared with its group's first; a run stopped early coincides with a longer one over its own steps."""
    groups: list[list[tuple[RunSeries, np.ndarray]]] = []
    for _, run in with_rows(runs):
        loss = run.metrics["loss"].to_numpy(dtype=float)
        for group in groups:
            if _relative_gap(group[0][1], loss) <= tolerance:
                group.append((run, loss))
                break
        else:
            groups.append([(run, loss)])
    return [_coincidence(group) for group in groups if len(group) > 1]


def _coincidence(group: list[tuple[RunSeries, np.ndarray]]) -> Coincidence:
    """The group's verdict over the steps every run of it has."""
    lengths = {len(loss) for _, loss in group}
    steps = min(lengths)
    first = group[0][1][:steps]
    return Coincidence(tuple(r.run_id for r, _ in group), tuple(r.label for r, _ in group), steps,
                       max(_relative_gap(first, loss[:steps]) for _, loss in group[1:]), len(lengths) == 1)


def _relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |a| over the steps both have (the shorter one's); inf when they cannot be compared
    (fewer than 2 common steps, or a value that is not finite among them)."""
    steps = min(len(a), len(b))
    a, b = a[:steps], b[:steps]
    if steps < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
