"""A sweep's figures: the cells' settings against speed, memory and loss (parallel coordinates), speed
against peak memory with error bars, and the loss curves of each cell as a band (mean ± 95 % interval over
its repeats). Pure: plotly figures from the summary's tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gaccum_core.config import short_word
from gaccum_core.intervals import plus_minus
from gaccum_core.runs.labels import value_text
from gaccum_core.sweeps.stats import t_975
from gaccum_core.train.metrics import smooth_ema
from gaccum_core.views.colours import colour_at

_LAYOUT = dict(template="plotly_white", height=380, margin=dict(l=60, r=20, t=50, b=50))
# The outcome axes of the parallel coordinates: (summary column, axis title).
OUTCOMES = (("samples_per_s_mean", "samples/s"), ("peak_mem_mb", "peak memory (MB)"), ("final_loss_mean", "final loss"))


def _setting_axis(table: pd.DataFrame, field: str) -> dict:
    """One axis per crossed setting: numbers on their own scale, anything else as evenly spaced names."""
    values = table[field]
    title = "precision" if field == "amp" else short_word(field)
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        ticks = sorted(values.unique())
        return dict(label=title, values=values.tolist(), tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    names = list(dict.fromkeys(values.astype(str)))
    words = [value_text(field, n).split("=", 1)[-1] for n in names]  # as the cells' labels say them: fp32, ckpt/full
    return dict(label=title, values=[names.index(v) for v in values.astype(str)], tickvals=list(range(len(names))),
                ticktext=words, range=[-0.3, len(names) - 0.7] if len(names) > 1 else [-1, 1])


def parallel_figure(table: pd.DataFrame, fields: list[str]) -> go.Figure:
    """Each cell a line from its settings (the crossed fields) to its samples/s, peak memory and final loss,
    coloured by final loss (lower is darker)."""
    done = table[table["runs"] > 0]
    dimensions = [_setting_axis(done, f) for f in fields]
    for column, title in OUTCOMES:
        if done[column].notna().any():
            dimensions.append(dict(label=title, values=done[column].tolist()))
    loss = done["final_loss_mean"]
    figure = go.Figure(go.Parcoords(dimensions=dimensions, line=dict(
        color=loss.tolist(), colorscale="Viridis", showscale=True, colorbar=dict(title="final loss", thickness=12))))
    figure.update_layout(**{**_LAYOUT, "margin": dict(l=80, r=130, t=110, b=30)},
                         title=dict(text="Settings → speed, memory, loss (drag along an axis to pick cells)", y=0.97))
    return figure


def speed_memory_figure(table: pd.DataFrame) -> go.Figure:
    """Samples/s (mean ± 95 % interval over repeats) against peak training memory, a marker per cell."""
    figure = go.Figure()
    for i, row in enumerate(table[table["runs"] > 0].itertuples()):
        ci = row.samples_per_s_ci if np.isfinite(row.samples_per_s_ci) else None
        figure.add_trace(go.Scatter(
            x=[row.peak_mem_mb], y=[row.samples_per_s_mean], name=row.label, mode="markers",
            marker=dict(size=11, color=colour_at(i)),
            # A speed is never negative: the interval's lower arm stops at 0 (two repeats give t = 12.7).
            error_y=dict(type="data", symmetric=False, array=[ci], arrayminus=[None if ci is None else
                                                                               min(ci, row.samples_per_s_mean)],
                         visible=ci is not None),
            hovertemplate=f"{row.label}<br>{plus_minus(row.samples_per_s_mean, ci, 'samples/s', 0, row.runs)}"
                          "<br>peak memory %{x:.2f} MB<extra></extra>"))
    figure.update_layout(**_LAYOUT, title="Speed against peak memory (95% interval over repeats)",
                         xaxis_title="peak training memory (MB)", yaxis=dict(title="samples/s", rangemode="tozero"),
                         legend=dict(orientation="h", y=-0.25))
    return figure


def loss_bands(curves: pd.DataFrame, x: str, smoothing: float = 0.0) -> pd.DataFrame:
    """Per cell and step: x (its mean over the repeats), the mean of the repeats' losses (each EMA-smoothed
    first with `smoothing`, as the Train page's) and its 95 % half-width (NaN with one repeat)."""
    smoothed = curves.assign(loss=curves.groupby("run_id", sort=False)["loss"].transform(
        lambda loss: smooth_ema(loss.astype(float).tolist(), smoothing)))
    grouped = smoothed.groupby(["cell", "label", "step"], sort=True)
    bands = grouped.agg(x=(x, "mean"), loss=("loss", "mean"), sd=("loss", "std"), n=("loss", "count")).reset_index()
    t = bands["n"].map(lambda n: t_975(n - 1) if n > 1 else np.nan)
    return bands.assign(ci=t * bands["sd"] / np.sqrt(bands["n"]))


def loss_band_figure(curves: pd.DataFrame, x: str = "samples_seen", smoothing: float = 0.6) -> go.Figure:
    """The training loss of each cell against samples (or tokens) seen: its mean over the repeats (each
    repeat smoothed first), with the 95 % interval as a shaded band (cut at 0: a loss is not negative)."""
    figure = go.Figure()
    bands = loss_bands(curves, x, smoothing)
    floor = 0.0 if (bands["loss"] >= 0).all() else -np.inf
    for i, ((cell, label), band) in enumerate(bands.groupby(["cell", "label"], sort=True)):
        colour = colour_at(i)
        if band["ci"].notna().any():
            upper, lower = band["loss"] + band["ci"], np.maximum(band["loss"] - band["ci"], floor)
            figure.add_trace(go.Scatter(
                x=np.concatenate([band["x"], band["x"][::-1]]), y=np.concatenate([upper, lower[::-1]]),
                fill="toself", fillcolor=colour, opacity=0.15, line=dict(width=0), name=f"{label} 95% band",
                legendgroup=str(cell), showlegend=False, hoverinfo="skip"))
        spread = " ± %{customdata:.4f}" if band["ci"].notna().any() else ""
        figure.add_trace(go.Scatter(x=band["x"], y=band["loss"], name=label, legendgroup=str(cell), mode="lines",
                                    line=dict(color=colour, width=1.8), customdata=band["ci"],
                                    hovertemplate=f"{label}<br>loss %{{y:.4f}}{spread}<extra></extra>"))
    title = "tokens seen" if x == "tokens_seen" else "samples seen"
    figure.update_layout(**_LAYOUT, title=f"Loss per cell: mean and 95% band (smoothed {smoothing:g})",
                         xaxis_title=title, yaxis_title="loss", hovermode="x unified",
                         legend=dict(orientation="h", y=-0.25))
    return figure
