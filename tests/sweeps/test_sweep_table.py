"""The sweep summary as read: mean ± interval to two significant digits, the verdict per cell."""

import math

import pandas as pd

from gaccum_core.views.sweep_table import display_table, mean_pm


def test_a_figure_reads_mean_plus_minus_its_interval_or_the_mean_alone():
    assert mean_pm(0.24137, 2.5931, 4) == "0.2414 ± 2.6"
    assert mean_pm(1234.4, 53.3, 0) == "1,234 ± 53"
    assert mean_pm(0.5, math.nan, 3) == "0.500"  # one repeat: no interval
    assert mean_pm(math.nan, math.nan, 3) == ""


def test_each_cell_says_whether_it_coincides_with_its_reference():
    nan = math.nan
    table = pd.DataFrame({
        "label": ["b=8 k=8", "b=32 k=2", "b=16 k=2"], "runs": [2, 2, 1], "repeats": [2, 2, 2],
        "coincides": [True, False, None], "coincides_with": ["", "b=8 k=8", ""], "loss_max_diff": [0.0, 0.036, nan],
        **{f"{name}_{part}": [1.0, 2.0, nan] for name in ("final_loss", "test_accuracy", "samples_per_s", "time_s")
           for part in ("mean", "ci")},
        "tokens_per_s_mean": [nan] * 3, "tokens_per_s_ci": [nan] * 3,
        "peak_mem_mb": [0.2, 0.6, nan], "skipped": [0.0, 0.0, nan]})
    shown = display_table(table)
    assert list(shown["coincides"]) == ["yes (ref.)", "NO: 3.6e-02", ""]
    assert list(shown["runs"]) == ["2/2", "2/2", "1/2"]
    assert "tokens/s" not in shown and "skipped" not in shown  # no cell trained on text or skipped a step
    assert list(display_table(table.assign(skipped=[0.0, 3.0, nan]))["skipped"]) == ["0", "3", ""]
    assert list(shown["final loss"]) == ["1.0000 ± 1", "2.0000 ± 2", ""]
