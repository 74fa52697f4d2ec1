"""The Pitfalls page's post-training reports: each case's figures, its drift chart, the summary table and the CSV."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gaccum_core.lab.pitfalls.catalog import pitfall
from gaccum_core.lab.pitfalls.reports import ReportCase

_LAYOUT = dict(template="plotly_white", height=320, margin=dict(l=50, r=10, t=40, b=40))
_FLOOR = 1e-12  # a drift of exactly 0 cannot sit on a log axis: drawn at this floor
# The first window's figures, beside each step's row in the CSV.
CASE_COLUMNS = ["window_grad_ratio", "window_cosine", "predicted_scale", "sgd_lr_factor", "never_trained"]


def report_metrics(case: ReportCase) -> list[tuple[str, str, str]]:
    """The case's figures as (label, value, beside): the first window's gradient ratio and cosine, SGD's
    learning-rate factor, the drift after the last step and, where the loop drops samples, how many."""
    steps = len(case.frame)
    predicted = f"predicted {case.predicted_scale:.6f}" if case.predicted_scale is not None else "not a scale"
    lr = ("SGD lr factor", "—", "none: the direction is off") if case.lr_factor is None else \
        ("SGD lr factor", f"{case.lr_factor:.6f}", "a constant scale: lr × it")
    shown = [("‖g_bug‖ / ‖g_exact‖", f"{case.grad_ratio:.6f}", f"first window; {predicted}"),
             ("Cosine(g_bug, g_exact)", f"{case.cosine:.6f}", "1 is the exact direction"), lr,
             (f"Drift after {steps} steps", f"{case.final_drift:.2e}", "L2, report's loop vs exact")]
    if case.never_trained:
        shown.append(("Never trained", f"{case.never_trained} samples", "per epoch: the last window"))
    return shown


def report_figure(case: ReportCase) -> go.Figure:
    """The L2 distance between the report's loop's weights and the exact loop's, after each SGD step."""
    figure = go.Figure()
    figure.update_layout(title="‖weights(report's loop) − weights(exact loop)‖", xaxis_title="SGD step",
                         yaxis_title="L2 drift", yaxis_type="log", uirevision=f"report_{case.key}", **_LAYOUT)
    figure.add_scatter(x=case.frame["step"], y=np.maximum(case.frame["drift"].to_numpy(dtype=float), _FLOOR),
                       name="drift", mode="lines+markers", line=dict(color="#d62728"))
    return figure


def report_table(cases: Iterable[ReportCase]) -> pd.DataFrame:
    """One row per report (its repository and number, as its title begins) and its figures."""
    return pd.DataFrame([{"report": pitfall(c.key).title.split(":")[0], "‖g_bug‖ / ‖g_exact‖": c.grad_ratio, "cosine": c.cosine,
                          "predicted scale": _or_not_a_scale(c.predicted_scale),
                          "SGD lr factor": _or_not_a_scale(c.lr_factor),
                          "drift after N steps": c.final_drift, "never trained": c.never_trained} for c in cases])


def _or_not_a_scale(value: float | None) -> str:
    """A scale to 6 decimals, or what its absence means (the bug changes the gradient's direction, not its size)."""
    return "— (not a scale)" if value is None else f"{value:.6f}"


def report_table_formats() -> dict[str, str]:
    """printf formats of report_table's numbers (the scales are text: a case without one says so)."""
    six = {name: "%.6f" for name in ("‖g_bug‖ / ‖g_exact‖", "cosine")}
    return {**six, "drift after N steps": "%.2e"}


def report_csv(cases: Iterable[ReportCase]) -> str:
    """Every SGD step of each case, its key in a `pitfall` column and its first window's figures beside, as CSV."""
    return pd.concat([c.frame.assign(pitfall=c.key, **dict(zip(CASE_COLUMNS, (
        c.grad_ratio, c.cosine, c.predicted_scale, c.lr_factor, c.never_trained)))) for c in cases]).to_csv(index=False)
