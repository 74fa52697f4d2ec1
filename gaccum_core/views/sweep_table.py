"""A sweep's summary as a table to read: each figure as mean ± its 95 % interval, the coincidence verdict
in words. Pure: a DataFrame of text from the summary's numbers."""

from __future__ import annotations

import math

import pandas as pd

# (column title, summary column, digits); the ± part from the column's _ci twin.
_FIGURES = (("final loss", "final_loss", 4), ("test accuracy", "test_accuracy", 3),
            ("samples/s", "samples_per_s", 0), ("tokens/s", "tokens_per_s", 0), ("time (s)", "time_s", 1))


def mean_pm(mean: float, ci: float, digits: int) -> str:
    """'0.1234 ± 0.0050'; the mean alone when there is no interval (one repeat); '' for no value."""
    if mean is None or not math.isfinite(mean):
        return ""
    if ci is None or not math.isfinite(ci):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}" if digits else f"{mean:,.0f} ± {ci:,.0f}"


def _coincides_text(row: pd.Series) -> str:
    if row["coincides"] is None or (isinstance(row["coincides"], float) and math.isnan(row["coincides"])):
        return ""
    diff = row["loss_max_diff"]
    said = "yes" if bool(row["coincides"]) else "NO"
    if not row["coincides_with"]:
        return f"{said} (reference)"
    gap = "not comparable" if math.isinf(diff) else f"{diff:.1e}"
    return f"{said}: {gap} vs {row['coincides_with']}"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The summary as text columns: cell, runs done of repeats, each figure as mean ± CI, memory, skipped
    steps, the coincidence verdict. Tokens/s only when some cell trained on text."""
    shown = pd.DataFrame({"cell": table["label"], "runs": [f"{r}/{n}" for r, n in zip(table["runs"], table["repeats"])]})
    for title, name, digits in _FIGURES:
        if name == "tokens_per_s" and table[f"{name}_mean"].isna().all():
            continue
        shown[title] = [mean_pm(m, c, digits) for m, c in zip(table[f"{name}_mean"], table[f"{name}_ci"])]
    shown["peak memory (MB)"] = [f"{v:.1f}" if math.isfinite(v) else "" for v in table["peak_mem_mb"]]
    shown["skipped"] = [f"{v:g}" if math.isfinite(v) else "" for v in table["skipped"]]
    shown["coincides"] = [_coincides_text(row) for _, row in table.iterrows()]
    return shown
