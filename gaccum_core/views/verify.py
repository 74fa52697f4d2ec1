"""verify's report drawn (the Equivalence page's "Your loop"): each split's relative gradient difference against the
tolerance, each split's gradient scale against k where a mistake fits, the diagnosis in words and the downloads."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gaccum_core.lab.mistakes import MISTAKES
from gaccum_core.verify.report import VerifyReport
from gaccum_core.verify.splits import describe
from gaccum_core.views.lab import _FLOOR, _figure, _floored

_ABOVE, _BELOW = "#d62728", "#2ca02c"  # a split above the tolerance, and within it


def split_table(report: VerifyReport) -> pd.DataFrame:
    """One row per split: its micro-batch sizes as --splits writes them, k, its relative max-abs gradient difference
    from the first split and its gradient's scale on the reference (the objective's, else the first split's)."""
    return pd.DataFrame({"split": [describe(s.sizes) for s in report.splits],
                         "k": [len(s.sizes) for s in report.splits],
                         "relative difference": [s.difference for s in report.splits],
                         "scale": [s.scale for s in report.splits]})


def difference_figure(report: VerifyReport) -> go.Figure:
    """Each split's relative gradient difference from the first split's (the reference, not drawn) on a log axis,
    0 drawn at the floor, a dashed line at the tolerance; for a random loop, its one split run twice."""
    table, twice = split_table(report), report.mistake == "nondeterministic"
    first = table["split"].iloc[0]
    title = f"the split {first} run twice" if twice else f"each split's gradient against the split {first}'s"
    figure = _figure("verify_differences", title, "split (micro-batch sizes)", "relative max-abs difference",
                     log_y=True)
    figure.update_xaxes(type="category")  # "12" is a split, not a number
    shown = table if twice else table.iloc[1:]
    differences = shown["relative difference"].to_numpy(dtype=float)
    notes = [f"0 (drawn at {_FLOOR:g})" if d == 0 else f"{d:.2e}" for d in differences]
    figure.add_scatter(x=shown["split"], y=_floored(shown["relative difference"]), mode="markers", name="split",
                       marker=dict(size=11, color=list(np.where(differences > report.tolerance, _ABOVE, _BELOW))),
                       customdata=notes, hovertemplate="split %{x}<br>%{customdata}<extra></extra>")
    figure.add_hline(y=report.tolerance, line=dict(dash="dash", color=_ABOVE))
    # On a log axis an annotation's y and the range are given as log10 (add_hline's own annotation is not).
    ys = np.log10(np.concatenate([_floored(shown["relative difference"]), [report.tolerance]]))
    figure.add_annotation(x=1, xref="x domain", y=float(np.log10(report.tolerance)), yref="y", showarrow=False,
                          xanchor="right", yanchor="top", text=f"{report.precision} tolerance {report.tolerance:g}")
    figure.update_yaxes(exponentformat="e", range=[float(ys.min()) - 0.5, float(ys.max()) + 0.5])
    return figure


def scale_figure(report: VerifyReport) -> go.Figure | None:
    """Each split's gradient scale against its k, a line at 1 (one big batch), where an accumulation mistake fits;
    None otherwise (a passing, random or split-dependent loop)."""
    if report.mistake is None or not MISTAKES[report.mistake].accumulation_error:
        return None
    table = split_table(report)
    reference = "the objective's" if report.matches_objective is not None else f"the split {table['split'].iloc[0]}'s"
    figure = _figure("verify_scales", f"each split's gradient as a multiple of {reference}", "k (micro-batches)",
                     "scale")
    figure.update_xaxes(dtick=1)
    figure.add_scatter(x=table["k"], y=table["scale"], mode="markers", name="split", marker=dict(size=11),
                       text=table["split"], hovertemplate="split %{text}<br>k %{x}<br>scale %{y:.4g}<extra></extra>")
    figure.add_hline(y=1.0, line=dict(dash="dot", color=_BELOW), annotation_text="one big batch")
    return figure


def diagnosis(report: VerifyReport) -> str | None:
    """The mistake that fits, with its relative residual and fitted scale, in one line; None when the loop passes."""
    if report.mistake is None:
        return None
    figures = ([f"relative residual {report.residual:.2g}"] if report.residual is not None else []) + \
        ([f"fitted scale {report.factor:.3g}"] if report.factor is not None else [])
    return f"Diagnosis: {MISTAKES[report.mistake].name}" + (f" ({', '.join(figures)})" if figures else "")


def report_csv(report: VerifyReport) -> str:
    """The splits as CSV text, each row with the verdict's figures (mistake, residual, tolerance, precision)."""
    return split_table(report).assign(mistake=report.mistake, residual=report.residual, factor=report.factor,
                                      tolerance=report.tolerance, precision=report.precision,
                                      passed=report.passed).to_csv(index=False)


def report_json(report: VerifyReport) -> str:
    """The report as `verify --json` prints it."""
    return json.dumps(report.to_dict(), indent=1)
