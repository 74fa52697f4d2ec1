"""Plotly figures that overlay runs' metrics for the dashboard; pure: no streamlit, no I/O."""

from __future__ import annotations

import math
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


def _scatter(x: Any, y: Any, **props: Any) -> dict[str, Any]:
    """A scatter trace as plotly JSON: built as a dict, since validating go.Scatter objects cost ~10x more."""
    return {"type": "scatter", "x": x, "y": y, **props}


def _line(frame: pd.DataFrame, x: str, y: str, **props: Any) -> dict[str, Any]:
    """A downsampled line trace of frame[y] against frame[x]."""
    points = downsample(frame, x, y)
    return _scatter(points[x].to_numpy(), points[y].to_numpy(), mode="lines", **props)


def _uid(run: RunSeries, line: str) -> str:
    """A trace's plotly uid: the run and the line, so a hidden legend entry stays with its run's line
    when a redraw adds or drops traces before it (plotly matches UI state by uid, else by position)."""
    return f"{run.run_id} {line}"


def _with_rows(runs: list[RunSeries]) -> list[tuple[int, RunSeries]]:
    """(index, run) for the runs that have at least one optimizer step."""
    return [(i, run) for i, run in enumerate(runs) if len(run.metrics)]


def _check_x(x: str) -> None:
    """Reject an x axis the charts do not know."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not allowed: one of {', '.join(X_AXES)}")


def uirevision(name: str, x: str, log_y: bool = False) -> str:
    """The chart's plotly uirevision: while it stays the same, a redraw with new points keeps the
    user's zoom, pan and hidden legend entries. It names the chart, the x axis and the y scale only:
    other units reset the view, more rows, runs or smoothing do not."""
    return f"{name}:{x}" + (":log" if log_y else "")


def _figure(name: str, title: str, x: str, y_title: str, traces: list[dict[str, Any]],
            note: str | None = None, log_y: bool = False, y_range: tuple[float, float] | None = None) -> go.Figure:
    """A figure with the layout every chart shares, and a centred note when there is nothing to draw."""
    yaxis: dict[str, Any] = {"title": {"text": y_title}, "type": "log" if log_y else "linear"}
    if log_y:
        yaxis["exponentformat"] = "power"  # 2¹⁶, not 65.536k
    if y_range is not None:
        yaxis["range"] = list(y_range)
    xaxis: dict[str, Any] = {"title": {"text": X_AXES[x]}}
    if x != "wall_time_s":
        xaxis["tickformat"] = ",d"  # steps and samples are whole numbers
    layout = {
        "title": {"text": title}, "template": _template(), "height": 340, "showlegend": True,
        "margin": {"l": 55, "r": 10, "t": 40, "b": 40}, "uirevision": uirevision(name, x, log_y),
        "xaxis": xaxis, "yaxis": yaxis, "hovermode": "x unified",
        # Under the plot, in rows: a legend beside it took up to 40 % of the chart's width.
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0,
                   "font": {"size": 10}},
    }
    if note:
        layout["annotations"] = [{"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "showarrow": False}]
    return go.Figure(data=traces, layout=layout, _validate=False)


def loss_figure(runs: list[RunSeries], x: str, smoothing: float, log_y: bool = False) -> go.Figure:
    """Raw (faint) and EMA-smoothed training loss per run; two traces per run. A run that coincides
    with an earlier one is drawn dashed, so the earlier one shows through it."""
    _check_x(x)
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing={smoothing!r} is not allowed: a weight in [0, 1)")
    dashed = {later for group in coinciding(runs) for later in group.run_ids[1:]}
    traces = []
    for i, run in _with_rows(runs):
        # Smoothed on the full series: an EMA of the decimated points would drift from TensorBoard's.
        frame = run.metrics.assign(smoothed=smooth_ema(run.metrics["loss"].astype(float).tolist(), smoothing))
        colour = _colour(i)
        traces.append(_line(frame, x, "loss", name=f"{run.label} raw", showlegend=False, opacity=0.3,
                            legendgroup=run.run_id, line={"color": colour, "width": 1}, uid=_uid(run, "loss raw"),
                            hoverinfo="skip"))
        traces.append(_line(frame, x, "smoothed", name=run.label, legendgroup=run.run_id, uid=_uid(run, "loss"),
                            line={"color": colour, "width": 2,
                                  "dash": "dash" if run.run_id in dashed else "solid"}))
    return _figure("loss", "training loss", x, "loss", traces, None if traces else WAITING, log_y)


def scale_figure(runs: list[RunSeries], x: str, log_y: bool = True, **_other_options: Any) -> go.Figure:
    """GradScaler scale per fp16 run on a log axis, skipped steps marked with a red x."""
    _check_x(x)
    rows = _with_rows(runs)
    traces = []
    for i, run in rows:
        if not np.isfinite(run.metrics["scale"].to_numpy(dtype=float)).any():
            continue
        traces.append(_line(run.metrics, x, "scale", name=run.label, legendgroup=run.run_id,
                            line={"color": _colour(i), "shape": "hv"}, uid=_uid(run, "scale")))
        skipped = run.metrics[run.metrics["skipped"] == 1]
        traces.append(_scatter(skipped[x].to_numpy(), skipped["scale"].to_numpy(), mode="markers",
                               name=f"{run.label} skipped", legendgroup=run.run_id,
                               marker={"symbol": "x", "color": "red", "size": 8}, uid=_uid(run, "scale skipped")))
    note = WAITING if not rows else None if traces else NO_SCALER
    return _figure("scale", "GradScaler loss scale", x, "scale", traces, note, log_y)


def _per_run_line(name: str, title: str, column: str, y_title: str, shape: str = "linear",
                  y_range: tuple[float, float] | None = None) -> Callable[..., go.Figure]:
    """A chart builder drawing one line of `column` per run."""
    def build(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
        _check_x(x)
        traces = [_line(run.metrics, x, column, name=run.label, legendgroup=run.run_id, uid=_uid(run, column),
                        line={"color": _colour(i), "shape": shape})
                  for i, run in _with_rows(runs)]
        return _figure(name, title, x, y_title, traces, None if traces else WAITING, log_y, y_range)

    build.__name__ = f"{name}_figure"
    build.__doc__ = f"{title} per run."
    return build


skipped_figure = _per_run_line("skipped", "skipped optimizer steps (cumulative)", "skipped_total",
                               "skipped steps", shape="hv")
throughput_figure = _per_run_line("throughput", "throughput", "samples_per_s", "samples/s")
grad_norm_figure = _per_run_line("grad_norm", "gradient norm (before clipping)", "grad_norm", "L2 norm")
lr_figure = _per_run_line("lr", "learning rate", "lr", "lr", shape="hv")
cache_figure = _per_run_line("cache", "cache-clearing time per step", "cache_clear_s", "seconds")


def memory_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Allocated, reserved (CUDA only), peak and activation memory: colour per run, dash per metric."""
    _check_x(x)
    traces = []
    for i, run in _with_rows(runs):
        for column, (suffix, dash) in MEMORY_LINES.items():
            if not run.metrics[column].notna().any():
                continue  # the CPU has no reserved memory
            traces.append(_line(run.metrics, x, column, name=f"{run.label} {suffix}", legendgroup=run.run_id,
                                line={"color": _colour(i), "dash": dash}, uid=_uid(run, column)))
    return _figure("memory", "memory", x, "MB", traces, None if traces else WAITING, log_y)


def _eval_points(run: RunSeries, x: str) -> pd.DataFrame:
    """The run's evals with an x column; samples_seen comes from the metrics row of the same step."""
    evals = run.evals
    if x != "samples_seen" or evals.empty:
        return evals
    seen = run.metrics[["step", "samples_seen"]].astype(float)
    return evals.assign(step=evals["step"].astype(float)).merge(seen, on="step", how="inner")


def accuracy_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Test accuracy at each evaluation per run, on a 0 to 1 axis."""
    _check_x(x)
    rows = _with_rows(runs)
    traces = []
    for i, run in rows:
        points = _eval_points(run, x)
        if points.empty:
            continue
        traces.append(_scatter(points[x].to_numpy(), points["test_accuracy"].to_numpy(), mode="lines+markers",
                               name=run.label, legendgroup=run.run_id, line={"color": _colour(i)},
                               uid=_uid(run, "accuracy")))
    note = WAITING if not rows else None if traces else NO_EVALS
    return _figure("accuracy", "test accuracy", x, "accuracy", traces, note, log_y,
                   None if log_y else (0.0, 1.0))


CHARTS: dict[str, Callable[..., go.Figure]] = {
    "loss": loss_figure,
    "accuracy": accuracy_figure,
    "scale": scale_figure,
    "skipped": skipped_figure,
    "grad_norm": grad_norm_figure,
    "lr": lr_figure,
    "memory": memory_figure,
    "throughput": throughput_figure,
    "cache": cache_figure,
}
LOG_BY_DEFAULT = frozenset({"scale"})


def build_figures(runs: list[RunSeries], x: str, smoothing: float,
                  log_y: frozenset[str] | None = None) -> dict[str, go.Figure]:
    """Every chart of CHARTS for these runs, in display order; log_y names the charts with a log y axis."""
    log_y = LOG_BY_DEFAULT if log_y is None else log_y
    return {name: builder(runs, x, smoothing=smoothing, log_y=name in log_y) for name, builder in CHARTS.items()}


@dataclass(frozen=True)
class Coincidence:
    """Runs whose training losses agree at every step to within max_diff (relative)."""

    run_ids: tuple[str, ...]
    labels: tuple[str, ...]
    steps: int
    max_diff: float


def coinciding(runs: list[RunSeries], tolerance: float = 1e-5) -> list[Coincidence]:
    """Groups of runs with the same steps whose losses differ by at most `tolerance` relative: what
    exact accumulation promises for b·k = b'·k', and what one colour drawn over another would hide."""
    groups: list[list[tuple[RunSeries, np.ndarray]]] = []
    for _, run in _with_rows(runs):
        loss = run.metrics["loss"].to_numpy(dtype=float)
        for group in groups:
            if _relative_gap(group[0][1], loss) <= tolerance:
                group.append((run, loss))
                break
        else:
            groups.append([(run, loss)])
    return [Coincidence(tuple(r.run_id for r, _ in group), tuple(r.label for r, _ in group), len(group[0][1]),
                        max(_relative_gap(group[0][1], loss) for _, loss in group[1:]))
            for group in groups if len(group) > 1]


def _relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |a|, over equally long finite series; inf when they cannot be compared."""
    if len(a) != len(b) or len(a) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
