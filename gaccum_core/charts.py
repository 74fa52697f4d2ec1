"""Plotly figures that overlay runs' metrics for the dashboard; pure: no streamlit, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from gaccum_core.metrics import smooth_ema

X_AXES: dict[str, str] = {"step": "optimizer step", "samples_seen": "samples seen", "wall_time_s": "wall time (s)"}
MAX_POINTS = 2000
PALETTE = tuple(qualitative.Plotly)
WAITING = "waiting for the first optimizer step"
NO_SCALER = "no GradScaler in these runs (amp off or bf16)"
NO_EVALS = "waiting for the first evaluation"
# column -> (legend suffix, line dash): colour tells the run apart, dash the metric.
MEMORY_LINES = {
    "mem_allocated_mb": ("allocated", "solid"),
    "mem_reserved_mb": ("reserved", "dot"),
    "mem_peak_mb": ("peak", "dash"),
    "activation_mb": ("activations", "dashdot"),
}

_TEMPLATE_KEYS = ("autotypenumbers", "colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor",
                  "plot_bgcolor", "xaxis", "yaxis", "title")


@dataclass(frozen=True)
class RunSeries:
    """One run as the charts see it: its legend label and its metric and eval frames."""

    run_id: str
    label: str
    metrics: pd.DataFrame
    evals: pd.DataFrame


def downsample(frame: pd.DataFrame, x: str, y: str, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Rows with finite x and y, min/max-decimated in x order to at most max_points rows."""
    xs, ys = frame[x].to_numpy(dtype=float), frame[y].to_numpy(dtype=float)
    finite = np.isfinite(xs) & np.isfinite(ys)
    if not finite.all():
        frame, xs, ys = frame[finite], xs[finite], ys[finite]
    if not frame[x].is_monotonic_increasing:
        order = np.argsort(xs, kind="stable")
        frame, ys = frame.iloc[order], ys[order]
    if len(frame) <= max_points:
        return frame
    return frame.iloc[_min_max_positions(ys, max_points)]


def _min_max_positions(ys: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted positions of the first, the last and each equal-count bucket's min and max."""
    n = len(ys)
    buckets = max((max_points - 2) // 2, 1)
    size = -(-n // buckets)
    offsets = np.arange(buckets) * size
    # Padding with +inf / -inf keeps the short last bucket's argmin / argmax inside the data.
    lows = np.full(buckets * size, np.inf)
    lows[:n] = ys
    highs = np.full(buckets * size, -np.inf)
    highs[:n] = ys
    picked = np.concatenate(([0, n - 1], lows.reshape(buckets, size).argmin(axis=1) + offsets,
                             highs.reshape(buckets, size).argmax(axis=1) + offsets))
    picked = np.unique(picked)
    return picked[picked < n]  # buckets past the end (all padding) point nowhere


@cache
def _template() -> go.layout.Template:
    """plotly_white cut down to what cartesian line charts read."""
    # The full template holds defaults for every trace type and polar/geo/3-D axes; validating and
    # serialising it took ~35 ms per figure, most of the server-side draw of a 50k-step run.
    white = pio.templates["plotly_white"]
    layout = {key: value for key, value in white.layout.to_plotly_json().items() if key in _TEMPLATE_KEYS}
    return go.layout.Template(layout=layout, data={"scatter": white.data.scatter})


def _colour(index: int) -> str:
    """The run's colour, fixed by its position in the runs list."""
    return PALETTE[index % len(PALETTE)]


def _line(frame: pd.DataFrame, x: str, y: str, **style: Any) -> go.Scatter:
    """A downsampled line trace of frame[y] against frame[x]."""
    points = downsample(frame, x, y)
    return go.Scatter(x=points[x].to_numpy(), y=points[y].to_numpy(), mode="lines", **style)


def _with_rows(runs: list[RunSeries]) -> list[tuple[int, RunSeries]]:
    """(index, run) for the runs that have at least one optimizer step."""
    return [(i, run) for i, run in enumerate(runs) if len(run.metrics)]


def _check_x(x: str) -> None:
    """Reject an x axis the charts do not know."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not allowed: one of {', '.join(X_AXES)}")


def _figure(name: str, title: str, x: str, y_title: str, traces: list[go.Scatter],
            note: str | None = None, log_y: bool = False) -> go.Figure:
    """A figure with the layout every chart shares, and a centred note when there is nothing to draw."""
    figure = go.Figure(data=traces)
    figure.update_layout(
        title=title, template=_template(), height=320, showlegend=True,
        margin=dict(l=50, r=10, t=40, b=40), uirevision=name,
        xaxis_title=X_AXES[x], yaxis_title=y_title, yaxis_type="log" if log_y else "linear",
    )
    if note:
        figure.add_annotation(text=note, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    return figure


def loss_figure(runs: list[RunSeries], x: str, smoothing: float) -> go.Figure:
    """Raw (faint) and EMA-smoothed training loss per run; two traces per run."""
    _check_x(x)
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing={smoothing!r} is not allowed: a weight in [0, 1)")
    traces = []
    for i, run in _with_rows(runs):
        # Smoothed on the full series: an EMA of the decimated points would drift from TensorBoard's.
        frame = run.metrics.assign(smoothed=smooth_ema(run.metrics["loss"].astype(float).tolist(), smoothing))
        style = dict(legendgroup=run.run_id, line_color=_colour(i))
        traces.append(_line(frame, x, "loss", name=f"{run.label} raw", showlegend=False,
                            opacity=0.3, line_width=1, **style))
        traces.append(_line(frame, x, "smoothed", name=run.label, line_width=2, **style))
    return _figure("loss", "training loss", x, "loss", traces, None if traces else WAITING)


def scale_figure(runs: list[RunSeries], x: str, **_other_options: Any) -> go.Figure:
    """GradScaler scale per fp16 run on a log axis, skipped steps marked with a red x."""
    _check_x(x)
    rows = _with_rows(runs)
    traces = []
    for i, run in rows:
        if not np.isfinite(run.metrics["scale"].to_numpy(dtype=float)).any():
            continue
        style = dict(legendgroup=run.run_id)
        traces.append(_line(run.metrics, x, "scale", name=run.label, line_color=_colour(i),
                            line_shape="hv", **style))
        skipped = run.metrics[run.metrics["skipped"] == 1]
        traces.append(go.Scatter(x=skipped[x].to_numpy(), y=skipped["scale"].to_numpy(), mode="markers",
                                 name=f"{run.label} skipped", marker=dict(symbol="x", color="red", size=8),
                                 **style))
    note = WAITING if not rows else None if traces else NO_SCALER
    return _figure("scale", "GradScaler loss scale", x, "scale", traces, note, log_y=True)


def skipped_figure(runs: list[RunSeries], x: str, **_other_options: Any) -> go.Figure:
    """Cumulative skipped optimizer steps per run."""
    _check_x(x)
    traces = [_line(run.metrics, x, "skipped_total", name=run.label, line_color=_colour(i), line_shape="hv")
              for i, run in _with_rows(runs)]
    return _figure("skipped", "skipped optimizer steps (cumulative)", x, "skipped steps", traces,
                   None if traces else WAITING)


def memory_figure(runs: list[RunSeries], x: str, **_other_options: Any) -> go.Figure:
    """Allocated, reserved (CUDA only), peak and activation memory: colour per run, dash per metric."""
    _check_x(x)
    traces = []
    for i, run in _with_rows(runs):
        for column, (suffix, dash) in MEMORY_LINES.items():
            if not run.metrics[column].notna().any():
                continue  # the CPU has no reserved memory
            traces.append(_line(run.metrics, x, column, name=f"{run.label} {suffix}", legendgroup=run.run_id,
                                line=dict(color=_colour(i), dash=dash)))
    return _figure("memory", "memory", x, "MB", traces, None if traces else WAITING)


def throughput_figure(runs: list[RunSeries], x: str, **_other_options: Any) -> go.Figure:
    """Training samples per second per run."""
    _check_x(x)
    traces = [_line(run.metrics, x, "samples_per_s", name=run.label, line_color=_colour(i))
              for i, run in _with_rows(runs)]
    return _figure("throughput", "throughput", x, "samples/s", traces, None if traces else WAITING)


def _eval_points(run: RunSeries, x: str) -> pd.DataFrame:
    """The run's evals with an x column; samples_seen comes from the metrics row of the same step."""
    evals = run.evals
    if x != "samples_seen" or evals.empty:
        return evals
    seen = run.metrics[["step", "samples_seen"]].astype(float)
    return evals.assign(step=evals["step"].astype(float)).merge(seen, on="step", how="inner")


def accuracy_figure(runs: list[RunSeries], x: str, **_other_options: Any) -> go.Figure:
    """Test accuracy at each evaluation per run."""
    _check_x(x)
    rows = _with_rows(runs)
    traces = []
    for i, run in rows:
        points = _eval_points(run, x)
        if points.empty:
            continue
        traces.append(go.Scatter(x=points[x].to_numpy(), y=points["test_accuracy"].to_numpy(),
                                 mode="lines+markers", name=run.label, line_color=_colour(i)))
    note = WAITING if not rows else None if traces else NO_EVALS
    return _figure("accuracy", "test accuracy", x, "accuracy", traces, note)


CHARTS: dict[str, Callable[..., go.Figure]] = {
    "loss": loss_figure,
    "scale": scale_figure,
    "skipped": skipped_figure,
    "memory": memory_figure,
    "throughput": throughput_figure,
    "accuracy": accuracy_figure,
}


def build_figures(runs: list[RunSeries], x: str, smoothing: float) -> dict[str, go.Figure]:
    """Every chart of CHARTS for these runs, in display order."""
    return {name: builder(runs, x, smoothing=smoothing) for name, builder in CHARTS.items()}
