"""The sweep summary as read: mean ± interval to two significant digits (with words when it is wider than the
mean), the verdict per cell, the runs a figure comes from."""

import math

import pandas as pd

from gaccum_core.intervals import count_for
from gaccum_core.sweeps.stats import mean_ci
from gaccum_core.views.sweep_table import display_table


def test_each_cell_says_whether_it_coincides_with_its_reference():
    nan = math.nan
    table = pd.DataFrame({
        "label": ["b=8 k=8", "b=32 k=2", "b=16 k=2"], "runs": [2, 2, 1], "repeats": [2, 2, 2], "failed": [0, 0, 1],
        "coincides": [True, False, None], "coincides_with": ["", "b=8 k=8", ""], "loss_max_diff": [0.0, 0.036, nan],
        **{f"{name}_{part}": [1.0, 2.0, nan] for name in ("final_loss", "test_accuracy", "samples_per_s", "time_s")
           for part in ("mean", "ci")},
        "tokens_per_s_mean": [nan] * 3, "tokens_per_s_ci": [nan] * 3,
        "peak_mem_mb": [0.2, 0.6, nan], "skipped": [0.0, 0.0, nan]})
    shown = display_table(table)
    assert list(shown["coincides"]) == ["yes (ref.)", "NO: 3.6e-02", ""]
    assert list(shown["runs"]) == ["2/2", "2/2", "1/2, 1 failed"]
    assert "tokens/s" not in shown and "skipped" not in shown  # no cell trained on text or skipped a step
    assert list(display_table(table.assign(skipped=[0.0, 3.0, nan]))["skipped"]) == ["0", "3", ""]
    assert list(shown["final loss"]) == ["1.0000 ± 1.0", "2.0000 ± 2.0", ""]


def test_an_incomplete_cell_says_so_in_each_figure_and_a_wide_interval_says_how_many_repeats_would_do():
    """Issue 33: a cell with a failed run is no longer summarised from the run left as if nothing happened, and
    two repeats 4,500 ± 44,000 apart say that the interval tells nothing yet."""
    nan = math.nan
    half = mean_ci([1000.0, 8000.0])[1]
    table = pd.DataFrame({
        "label": ["b=8 k=8", "b=32 k=2"], "runs": [1, 2], "repeats": [2, 2], "failed": [1, 0],
        "coincides": [None, None], "coincides_with": ["", ""], "loss_max_diff": [nan, nan],
        **{f"{name}_{part}": [nan, nan] for name in ("final_loss", "test_accuracy", "time_s", "tokens_per_s")
           for part in ("mean", "ci")},
        "samples_per_s_mean": [1000.0, 4500.0], "samples_per_s_ci": [nan, half],
        "peak_mem_mb": [0.2, 0.6], "skipped": [0.0, 0.0]})
    shown = display_table(table)
    assert list(shown["runs"]) == ["1/2, 1 failed", "2/2"]
    assert list(shown["samples/s"]) == [
        "1,000 · from 1 of 2 runs",
        f"4,500 ± 44,000 (interval wider than the value: about {count_for(4500.0, half, 2)} repeats would bring it "
        "within ±50 %)"]
