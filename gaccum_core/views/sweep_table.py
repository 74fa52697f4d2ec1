"""A sweep's summary as a table to read: each figure as mean ± its 95 % interval, the coincidence verdict
in words. Pure: a DataFrame of text from the summary's numbers."""

from __future__ import annotations

import math

import pandas as pd

from gaccum_core.intervals import plus_minus

# (column title, summary column, digits); the ± part from the column's _ci twin.
_FIGURES = (("final loss", "final_loss", 4), ("test acc.", "test_accuracy", 3),
            ("samples/s", "samples_per_s", 0), ("tokens/s", "tokens_per_s", 0), ("time (s)", "time_s", 1))


def _coincides_text(row: pd.Series) -> str:
    """'yes (ref.)', 'yes: 2.1e-07' or 'NO: 3.6e-02' (the largest relative loss difference to the
    reference, the first cell of its b/k group); '' for a cell compared with none."""
    if row["coincides"] is None or (isinstance(row["coincides"], float) and math.isnan(row["coincides"])):
        return ""
    said = "yes" if bool(row["coincides"]) else "NO"
    if not row["coincides_with"]:
        return f"{said} (ref.)"
    diff = row["loss_max_diff"]
    return f"{said}: " + ("not comparable" if math.isinf(diff) else f"{diff:.1e}")


def _figure_text(mean: float, ci: float, digits: int, runs: int, repeats: int) -> str:
    """'0.1719 ± 0.050', the interval's words when it is wider than the mean, and ' · from 1 of 2 runs' for a
    cell with fewer done runs than repeats (one failed, or not run yet)."""
    text = plus_minus(mean, ci, digits=digits, count=runs)
    return text + (f" · from {runs} of {repeats} runs" if text and runs < repeats else "")


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The summary as text columns: cell, the coincidence verdict, each figure as mean ± CI, peak training
    memory, skipped steps, runs done of repeats (and how many failed). Tokens/s only when some cell trained
    on text, skipped steps only when some cell skipped one."""
    shown = pd.DataFrame({"cell": table["label"], "coincides": [_coincides_text(row) for _, row in table.iterrows()]})
    for title, name, digits in _FIGURES:
        if name == "tokens_per_s" and table[f"{name}_mean"].isna().all():
            continue
        shown[title] = [_figure_text(m, c, digits, r, n) for m, c, r, n in
                        zip(table[f"{name}_mean"], table[f"{name}_ci"], table["runs"], table["repeats"])]
    shown["peak MB"] = [f"{v:.1f}" if math.isfinite(v) else "" for v in table["peak_mem_mb"]]
    if (table["skipped"].fillna(0) > 0).any():  # skipped steps (fp16's GradScaler) only where some were
        shown["skipped"] = [f"{v:g}" if math.isfinite(v) else "" for v in table["skipped"]]
    shown["runs"] = [f"{r}/{n}" + (f", {f} failed" if f else "")  # last: mostly n/n
                     for r, n, f in zip(table["runs"], table["repeats"], table["failed"])]
    return shown
