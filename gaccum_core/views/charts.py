"""Plotly figures that overlay runs' metrics for the dashboard; pure: no streamlit, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from gaccum_core.train.metrics import smooth_ema

X_AXES: dict[str, str] = {"step": "optimizer step", "samples_seen": "samples seen", "tokens_seen": "tokens seen",
                          "wall_time_s": "wall time (s)"}
TOKEN_AXES = frozenset({"tokens_seen"})  # x axes only language runs have: image runs count no tokens
MAX_POINTS = 2000
PALETTE = tuple(qualitative.Plotly)
WAITING = "waiting for the first optimizer step"
NO_SCALER = "no GradScaler in these runs (amp off or bf16)"
NO_EVALS = "waiting for the first evaluation"
NO_LANGUAGE = "no language run here: perplexity is for gpt on text"
LEFT_OUT = "image runs not drawn: they count no tokens"
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


def is_language(run: RunSeries) -> bool:
    """A causal language modelling run: its steps count target tokens (an image run's, or a run
    written before token columns existed, hold none)."""
    tokens = run.metrics.get("tokens_seen")
    return tokens is not None and bool(pd.to_numeric(tokens, errors="coerce").notna().any())


@dataclass(frozen=True)
class _Axis:
    """What a chart draws against x: the axis used, the runs drawn (with their index, for colour) and
    whether runs with rows were left out because they lack that axis."""

    x: str
    requested: str
    drawn: list[tuple[int, RunSeries]]
    left_out: bool

    @property
    def fallback(self) -> bool:
        """The requested axis was replaced (no run shown has it)."""
        return self.x != self.requested


def _axis(runs: list[RunSeries], x: str) -> _Axis:
    """Resolve x for these runs: against tokens seen only language runs are drawn; when no run with
    rows counts tokens, the charts fall back to optimizer steps rather than draw nothing."""
    _check_x(x)
    rows = _with_rows(runs)
    if x not in TOKEN_AXES:
        return _Axis(x, x, rows, False)
    language = [(i, run) for i, run in rows if is_language(run)]
    if rows and not language:
        return _Axis("step", x, rows, False)
    return _Axis(x, x, language, len(language) < len(rows))


def tokens_axis_note(image_runs: list[str], language_runs: int) -> str | None:
    """What the page says under the charts when tokens seen is the x axis: which shown runs (image
    runs, by label) it leaves out, or that it fell back to optimizer steps; None when all is drawn."""
    if not image_runs:
        return None
    if not language_runs:
        return ("No run shown counts tokens (they are image runs), so the charts use optimizer steps; "
                "tokens seen is for gpt runs.")
    return (f"Not drawn against tokens seen: {', '.join(image_runs)} (image runs count no tokens). "
            "Pick optimizer step, samples seen or wall time to see every run.")


def uirevision(name: str, x: str, log_y: bool = False) -> str:
    """The chart's plotly uirevision: while it stays the same, a redraw with new points keeps the
    user's zoom, pan and hidden legend entries. It names the chart, the x axis and the y scale only:
    other units reset the view, more rows, runs or smoothing do not."""
    return f"{name}:{x}" + (":log" if log_y else "")


def _y_axis(y_title: str, log_y: bool, y_range: tuple[float, float] | None = None) -> dict[str, Any]:
    yaxis: dict[str, Any] = {"title": {"text": y_title}, "type": "log" if log_y else "linear"}
    if log_y:
        yaxis["exponentformat"] = "power"  # 2¹⁶, not 65.536k
    if y_range is not None:
        yaxis["range"] = list(y_range)
    return yaxis


def _figure(name: str, title: str, x: str | _Axis, y_title: str, traces: list[dict[str, Any]],
            note: str | None = None, log_y: bool = False, y_range: tuple[float, float] | None = None,
            y2_title: str | None = None) -> go.Figure:
    """A figure with the layout every chart shares, and a centred note when there is nothing to draw.
    Given an _Axis, its x title says when it replaced tokens seen and a small note when it left
    image runs out; y2_title adds a right-hand y axis (traces with yaxis="y2")."""
    axis = x if isinstance(x, _Axis) else _Axis(x, x, [], False)
    x = axis.x
    yaxis = _y_axis(y_title, log_y, y_range)
    x_title = X_AXES[x] + (f" ({X_AXES[axis.requested]}: no run here counts tokens)" if axis.fallback else "")
    xaxis: dict[str, Any] = {"title": {"text": x_title}}
    if x != "wall_time_s":
        xaxis["tickformat"] = ",d"  # steps, samples and tokens are whole numbers
    layout = {
        "title": {"text": title}, "template": _template(), "height": 340, "showlegend": True,
        "margin": {"l": 55, "r": 10, "t": 40, "b": 40}, "uirevision": uirevision(name, x, log_y),
        "xaxis": xaxis, "yaxis": yaxis, "hovermode": "x unified",
        # Under the plot, in rows: a legend beside it took up to 40 % of the chart's width.
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0,
                   "font": {"size": 10}},
    }
    if y2_title is not None:
        layout["yaxis2"] = {**_y_axis(y2_title, log_y), "overlaying": "y", "side": "right", "showgrid": False}
        layout["margin"] = {**layout["margin"], "r": 55}
    annotations = []
    if note:
        annotations.append({"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False})
    if axis.left_out and traces:
        annotations.append({"text": LEFT_OUT, "xref": "paper", "yref": "paper", "x": 1, "y": 1, "xanchor": "right",
                            "yanchor": "bottom", "showarrow": False, "font": {"size": 10, "color": "#888"}})
    if annotations:
        layout["annotations"] = annotations
    return go.Figure(data=traces, layout=layout, _validate=False)


def loss_figure(runs: list[RunSeries], x: str, smoothing: float, log_y: bool = False) -> go.Figure:
    """Raw (faint) and EMA-smoothed training loss per run; two traces per run. A run that coincides
    with an earlier one is drawn dashed, so the earlier one shows through it."""
    axis = _axis(runs, x)
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing={smoothing!r} is not allowed: a weight in [0, 1)")
    dashed = {later for group in coinciding(runs) for later in group.run_ids[1:]}
    traces = []
    for i, run in axis.drawn:
        # Smoothed on the full series: an EMA of the decimated points would drift from TensorBoard's.
        frame = run.metrics.assign(smoothed=smooth_ema(run.metrics["loss"].astype(float).tolist(), smoothing))
        colour = _colour(i)
        traces.append(_line(frame, axis.x, "loss", name=f"{run.label} raw", showlegend=False, opacity=0.3,
                            legendgroup=run.run_id, line={"color": colour, "width": 1}, uid=_uid(run, "loss raw"),
                            hoverinfo="skip"))
        traces.append(_line(frame, axis.x, "smoothed", name=run.label, legendgroup=run.run_id, uid=_uid(run, "loss"),
                            line={"color": colour, "width": 2,
                                  "dash": "dash" if run.run_id in dashed else "solid"}))
    return _figure("loss", "training loss", axis, "loss", traces, None if traces else WAITING, log_y)


def scale_figure(runs: list[RunSeries], x: str, log_y: bool = True, **_other_options: Any) -> go.Figure:
    """GradScaler scale per fp16 run on a log axis, skipped steps marked with a red x."""
    axis = _axis(runs, x)
    traces = []
    for i, run in axis.drawn:
        if not np.isfinite(run.metrics["scale"].to_numpy(dtype=float)).any():
            continue
        traces.append(_line(run.metrics, axis.x, "scale", name=run.label, legendgroup=run.run_id,
                            line={"color": _colour(i), "shape": "hv"}, uid=_uid(run, "scale")))
        skipped = run.metrics[run.metrics["skipped"] == 1]
        traces.append(_scatter(skipped[axis.x].to_numpy(), skipped["scale"].to_numpy(), mode="markers",
                               name=f"{run.label} skipped", legendgroup=run.run_id,
                               marker={"symbol": "x", "color": "red", "size": 8}, uid=_uid(run, "scale skipped")))
    note = WAITING if not axis.drawn else None if traces else NO_SCALER
    return _figure("scale", "GradScaler loss scale", axis, "scale", traces, note, log_y)


def _per_run_line(name: str, title: str, column: str, y_title: str, shape: str = "linear",
                  y_range: tuple[float, float] | None = None) -> Callable[..., go.Figure]:
    """A chart builder drawing one line of `column` per run."""
    def build(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
        axis = _axis(runs, x)
        traces = [_line(run.metrics, axis.x, column, name=run.label, legendgroup=run.run_id, uid=_uid(run, column),
                        line={"color": _colour(i), "shape": shape})
                  for i, run in axis.drawn]
        return _figure(name, title, axis, y_title, traces, None if traces else WAITING, log_y, y_range)

    build.__name__ = f"{name}_figure"
    build.__doc__ = f"{title} per run."
    return build


skipped_figure = _per_run_line("skipped", "skipped optimizer steps (cumulative)", "skipped_total",
                               "skipped steps", shape="hv")
grad_norm_figure = _per_run_line("grad_norm", "gradient norm (before clipping)", "grad_norm", "L2 norm")
lr_figure = _per_run_line("lr", "learning rate", "lr", "lr", shape="hv")
cache_figure = _per_run_line("cache", "cache-clearing time per step", "cache_clear_s", "seconds")


def throughput_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Samples/s per image run, tokens/s per language run (what a language model's speed is quoted
    in); with both kinds shown, tokens/s go on a right-hand axis and the legend names the unit."""
    axis = _axis(runs, x)
    language = {run.run_id for _, run in axis.drawn if is_language(run)}
    mixed = 0 < len(language) < len(axis.drawn)
    traces = []
    for i, run in axis.drawn:
        text = run.run_id in language
        column, unit = ("tokens_per_s", "tokens/s") if text else ("samples_per_s", "samples/s")
        extra = {"yaxis": "y2"} if mixed and text else {}
        traces.append(_line(run.metrics, axis.x, column, name=f"{run.label} {unit}" if mixed else run.label,
                            legendgroup=run.run_id, uid=_uid(run, column), line={"color": _colour(i)}, **extra))
    if mixed:
        return _figure("throughput", "throughput", axis, "samples/s (image runs)", traces, None, log_y,
                       y2_title="tokens/s (language runs)")
    y_title = "tokens/s" if language else "samples/s"
    return _figure("throughput", "throughput", axis, y_title, traces, None if traces else WAITING, log_y)


def memory_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Allocated, reserved (CUDA only), peak and activation memory: colour per run, dash per metric."""
    axis = _axis(runs, x)
    traces = []
    for i, run in axis.drawn:
        for column, (suffix, dash) in MEMORY_LINES.items():
            if not run.metrics[column].notna().any():
                continue  # the CPU has no reserved memory
            traces.append(_line(run.metrics, axis.x, column, name=f"{run.label} {suffix}", legendgroup=run.run_id,
                                line={"color": _colour(i), "dash": dash}, uid=_uid(run, column)))
    return _figure("memory", "memory", axis, "MB", traces, None if traces else WAITING, log_y)


def _eval_points(run: RunSeries, x: str) -> pd.DataFrame:
    """The run's evals with an x column; samples or tokens seen come from the metrics row of the same step."""
    evals = run.evals
    if x not in ("samples_seen", "tokens_seen") or evals.empty:
        return evals
    seen = run.metrics[["step", x]].astype(float)
    return evals.assign(step=evals["step"].astype(float)).merge(seen, on="step", how="inner")


def _eval_traces(drawn: list[tuple[int, RunSeries]], x: str, column: str, suffix: Callable[[RunSeries], str]
                 ) -> list[dict[str, Any]]:
    """One lines+markers trace of an evals column per run that has evaluations with a value there."""
    traces = []
    for i, run in drawn:
        points = _eval_points(run, x)
        if points.empty or column not in points:
            continue
        ys = pd.to_numeric(points[column], errors="coerce").to_numpy(dtype=float)
        if not np.isfinite(ys).any():
            continue
        traces.append(_scatter(points[x].to_numpy(dtype=float), ys, mode="lines+markers",
                               name=run.label + suffix(run), legendgroup=run.run_id, line={"color": _colour(i)},
                               uid=_uid(run, column)))
    return traces


def accuracy_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Test accuracy at each evaluation per run, on a 0 to 1 axis: per image, or for a language run
    per validation target token (the next byte predicted right)."""
    axis = _axis(runs, x)
    language = {run.run_id for _, run in axis.drawn if is_language(run)}
    mixed = 0 < len(language) < len(axis.drawn)
    traces = _eval_traces(axis.drawn, axis.x, "test_accuracy",
                          lambda run: " (tokens)" if mixed and run.run_id in language else "")
    if mixed:
        title, y_title = "test accuracy · validation token accuracy (language runs)", "accuracy"
    elif language:
        title, y_title = "validation token accuracy", "token accuracy"
    else:
        title, y_title = "test accuracy", "accuracy"
    note = WAITING if not axis.drawn else None if traces else NO_EVALS
    return _figure("accuracy", title, axis, y_title, traces, note, log_y, None if log_y else (0.0, 1.0))


def perplexity_figure(runs: list[RunSeries], x: str, log_y: bool = True, **_other_options: Any) -> go.Figure:
    """Validation perplexity (exp of the mean validation loss per target token) at each evaluation of
    each language run; on a log axis by default, since it falls from about the vocabulary size (256)."""
    axis = _axis(runs, x)
    language = [(i, run) for i, run in axis.drawn if is_language(run)]
    traces = _eval_traces(language, axis.x, "perplexity", lambda run: "")
    note = WAITING if not axis.drawn else NO_LANGUAGE if not language else None if traces else NO_EVALS
    # Image runs are never drawn here, whatever the x axis: no note about leaving them out.
    return _figure("perplexity", "validation perplexity", replace(axis, left_out=False), "perplexity", traces,
                   note, log_y)


CHARTS: dict[str, Callable[..., go.Figure]] = {  # every set of runs gets these, in this order
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
# Charts drawn only when a language run is shown, each placed after the chart named.
LANGUAGE_CHARTS: dict[str, tuple[str, Callable[..., go.Figure]]] = {"perplexity": ("accuracy", perplexity_figure)}
# Every chart name, in display order (a language run shown): what a per-chart option offers.
ALL_CHARTS = tuple(name for chart in CHARTS
                   for name in (chart, *(extra for extra, (after, _) in LANGUAGE_CHARTS.items() if after == chart)))
LOG_BY_DEFAULT = frozenset({"scale", "perplexity"})


def chart_builders(runs: list[RunSeries]) -> dict[str, Callable[..., go.Figure]]:
    """The charts these runs get, in display order: CHARTS, and the LANGUAGE_CHARTS when a language run is among them."""
    language = any(is_language(run) for _, run in _with_rows(runs))
    builders: dict[str, Callable[..., go.Figure]] = {}
    for name, builder in CHARTS.items():
        builders[name] = builder
        builders.update({extra: b for extra, (after, b) in LANGUAGE_CHARTS.items() if after == name and language})
    return builders


def build_figures(runs: list[RunSeries], x: str, smoothing: float,
                  log_y: frozenset[str] | None = None) -> dict[str, go.Figure]:
    """Every chart these runs get (chart_builders), in display order; log_y names the charts with a log y axis."""
    log_y = LOG_BY_DEFAULT if log_y is None else log_y
    return {name: builder(runs, x, smoothing=smoothing, log_y=name in log_y)
            for name, builder in chart_builders(runs).items()}


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
