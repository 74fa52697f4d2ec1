"""One run's figures for a sweep's summary: final loss, test accuracy, speed after warm-up, memory,
skipped steps, time. Pure: reads the run's metric tables, as the run store returns them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gaccum_core.sweeps.stats import steady_median
from gaccum_core.train.metrics import last_epoch_loss

if TYPE_CHECKING:
    import pandas as pd

def _last(frame: pd.DataFrame, column: str) -> float:
    if column not in frame or frame.empty:
        return math.nan
    value = frame[column].iloc[-1]
    return math.nan if value is None else float(value)


def _most(frame: pd.DataFrame, column: str) -> float:
    if column not in frame or frame[column].isna().all():
        return math.nan
    return float(frame[column].max())


def run_figures(metrics: pd.DataFrame, evals: pd.DataFrame) -> dict[str, float]:
    """The run's figures: its last epoch's training loss, its last evaluation's accuracy, the median samples/s (and
    tokens/s) of its steps after warm-up, its peak training memory (what the planner counts: weights,
    gradients, optimizer state, activations) and the device's peak, skipped steps, wall time, steps."""
    return {
        "final_loss": last_epoch_loss(metrics),
        "test_accuracy": _last(evals, "test_accuracy"),
        "samples_per_s": steady_median(list(metrics.get("samples_per_s", []))),
        "tokens_per_s": steady_median(list(metrics.get("tokens_per_s", []))),
        "peak_mem_mb": _most(metrics, "train_mem_mb"),
        "device_peak_mb": _most(metrics, "mem_peak_mb"),
        "skipped": _last(metrics, "skipped_total"),
        "time_s": _last(metrics, "wall_time_s"),
        "steps": float(len(metrics)),
    }
