"""Plotly figures that overlay runs' metrics for the dashboard, one builder per chart (CHARTS), and
build_figures for a set of runs; pure: no streamlit, no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from gaccum_core.train.metrics import smooth_ema
from gaccum_core.views.axes import YScale, chart_figure, resolve_axis
from gaccum_core.views.colours import PALETTE  # noqa: F401 - where the pages and tests read it
from gaccum_core.views.coinciding import coinciding
from gaccum_core.views.collectives_chart import collectives_figure
from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries, is_language, with_rows
from gaccum_core.views.traces import WAITING, colour as _colour, key as _key, line as _line, scatter as _scatter, uid as _uid

SKIPPED_MARKER = {"symbol": "x", "color": "red", "size": 8}
NO_SCALER = "no GradScaler in these runs (amp off or bf16)"
NO_EVALS = "waiting for the first evaluation"
NO_LANGUAGE = "no language run here: perplexity is for gpt on text"


def loss_figure(runs: list[RunSeries], x: str, smoothing: float, log_y: bool = False) -> go.Figure:
    """Raw (faint) and EMA-smoothed training loss per run; two traces per run. A run that coincides
    with an earlier one is drawn dashed, so the earlier one shows through it."""
    axis = resolve_axis(runs, x)
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing={smoothing!r} is not allowed: a weight in [0, 1)")
    dashed = {later for group in coinciding(runs) for later in group.run_ids[1:]}
    traces = []
    for i, run in axis.drawn:
        # Smoothed on the full series: an EMA of the decimated points would drift from TensorBoard's.
        frame = run.metrics.assign(smoothed=smooth_ema(run.metrics["loss"].astype(float).tolist(), smoothing))
        colour = _colour(i, run)
        traces.append(_line(frame, axis.x, "loss", name=f"{run.label} raw", showlegend=False, opacity=0.3,
                            legendgroup=run.run_id, line={"color": colour, "width": 1}, uid=_uid(run, "loss raw"),
                            hoverinfo="skip"))
        traces.append(_line(frame, axis.x, "smoothed", name=run.label, legendgroup=run.run_id, uid=_uid(run, "loss"),
                            line={"color": colour, "width": 2,
                                  "dash": "dash" if run.run_id in dashed else "solid"}))
    return chart_figure("loss", "training loss", axis, "loss", traces, None if traces else WAITING, log_y,
                        scale=YScale(clip=True))


def scale_figure(runs: list[RunSeries], x: str, log_y: bool = True, **_other_options: Any) -> go.Figure:
    """GradScaler scale per fp16 run on a log axis, skipped steps marked with a red x."""
    axis = resolve_axis(runs, x)
    traces = []
    for i, run in axis.drawn:
        if not np.isfinite(run.metrics["scale"].to_numpy(dtype=float)).any():
            continue
        traces.append(_line(run.metrics, axis.x, "scale", name=run.label, legendgroup=run.run_id,
                            line={"color": _colour(i, run), "shape": "hv"}, uid=_uid(run, "scale")))
        skipped = run.metrics[run.metrics["skipped"] == 1]
        traces.append(_scatter(skipped[axis.x].to_numpy(), skipped["scale"].to_numpy(), mode="markers",
                               name=f"{run.label} skipped", legendgroup=run.run_id, showlegend=False,
                               marker=SKIPPED_MARKER, uid=_uid(run, "scale skipped")))
    if traces:  # one legend entry per run, and one that says what the red x is
        traces.append(_key("skipped step", mode="markers", marker=SKIPPED_MARKER))
    note = WAITING if not axis.drawn else None if traces else NO_SCALER
    return chart_figure("scale", "GradScaler loss scale", axis, "scale", traces, note, log_y,
                        scale=YScale(rangemode="nonnegative"))


def _per_run_line(name: str, title: str, column: str, y_title: str, shape: str = "linear",
                  scale: YScale = YScale(rangemode="nonnegative")) -> Callable[..., go.Figure]:
    """A chart builder drawing one line of `column` per run."""
    def build(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
        axis = resolve_axis(runs, x)
        traces = [_line(run.metrics, axis.x, column, name=run.label, legendgroup=run.run_id, uid=_uid(run, column),
                        line={"color": _colour(i, run), "shape": shape})
                  for i, run in axis.drawn]
        return chart_figure(name, title, axis, y_title, traces, None if traces else WAITING, log_y, scale=scale)

    build.__name__ = f"{name}_figure"
    build.__doc__ = f"{title} per run."
    return build


skipped_figure = _per_run_line("skipped", "skipped optimizer steps (cumulative)", "skipped_total",
                               "skipped steps", shape="hv", scale=YScale(rangemode="nonnegative", integer=True))
grad_norm_figure = _per_run_line("grad_norm", "gradient norm (before clipping)", "grad_norm", "L2 norm",
                                 scale=YScale(clip=True, rangemode="nonnegative"))
lr_figure = _per_run_line("lr", "learning rate", "lr", "lr", shape="hv")
cache_figure = _per_run_line("cache", "cache-clearing time per step", "cache_clear_s", "seconds")


def throughput_figure(runs: list[RunSeries], x: str, smoothing: float = 0.0, log_y: bool = False,
                      **_other_options: Any) -> go.Figure:
    """Samples/s per image run, tokens/s per language run (what a language model's speed is quoted
    in), EMA-smoothed like the loss over a faint raw line; with both kinds shown, tokens/s go on a
    right-hand axis and the legend names the unit."""
    axis = resolve_axis(runs, x)
    language = {run.run_id for _, run in axis.drawn if is_language(run)}
    mixed = 0 < len(language) < len(axis.drawn)
    traces = []
    for i, run in axis.drawn:
        text = run.run_id in language
        column, unit = ("tokens_per_s", "tokens/s") if text else ("samples_per_s", "samples/s")
        extra = {"yaxis": "y2"} if mixed and text else {}
        frame = run.metrics.assign(smoothed=smooth_ema(run.metrics[column].astype(float).tolist(), smoothing))
        colour = _colour(i, run)
        if smoothing:  # one step's speed jumps with evaluations and the machine's load
            traces.append(_line(frame, axis.x, column, name=f"{run.label} raw", showlegend=False, opacity=0.3,
                                legendgroup=run.run_id, uid=_uid(run, f"{column} raw"), hoverinfo="skip",
                                line={"color": colour, "width": 1}, **extra))
        traces.append(_line(frame, axis.x, "smoothed", name=f"{run.label} {unit}" if mixed else run.label,
                            legendgroup=run.run_id, uid=_uid(run, column), line={"color": colour}, **extra))
    if mixed:
        return chart_figure("throughput", "throughput", axis, "samples/s (image runs)", traces, None, log_y,
                            y2_title="tokens/s (language runs)", scale=YScale(rangemode="tozero"))
    y_title = "tokens/s" if language else "samples/s"
    return chart_figure("throughput", "throughput", axis, y_title, traces, None if traces else WAITING, log_y,
                        scale=YScale(rangemode="tozero"))


def _eval_points(run: RunSeries, x: str) -> pd.DataFrame:
    """The run's evals with an x column; samples or tokens seen come from the metrics row of the same step."""
    evals = run.evals
    if x not in ("samples_seen", "tokens_seen") or evals.empty:
        return evals
    seen = run.metrics[["step", x]].astype(float)
    return evals.assign(step=evals["step"].astype(float)).merge(seen, on="step", how="inner")


def _coverage(run: RunSeries, points: pd.DataFrame, y_format: str) -> dict[str, Any]:
    """A hover saying what each evaluation covered ('0.412 over 6,400 target tokens'); nothing for a run
    written before eval.csv counted it."""
    column, unit = ("eval_tokens", "target tokens") if is_language(run) else ("eval_samples", "test images")
    covered = pd.to_numeric(points.get(column, pd.Series(dtype=float)), errors="coerce").to_numpy(dtype=float)
    if len(covered) != len(points) or not np.isfinite(covered).all():
        return {}
    return {"customdata": covered, "hovertemplate": f"%{{y:{y_format}}} over %{{customdata:,.0f}} {unit}"}


def _eval_traces(drawn: list[tuple[int, RunSeries]], x: str, column: str, suffix: Callable[[RunSeries], str],
                 y_format: str = ".3f") -> list[dict[str, Any]]:
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
                               name=run.label + suffix(run), legendgroup=run.run_id, line={"color": _colour(i, run)},
                               uid=_uid(run, column), **_coverage(run, points, y_format)))
    return traces


def accuracy_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Test accuracy at each evaluation per run, on a 0 to 1 axis: per image, or for a language run
    per validation target token (the next byte predicted right)."""
    axis = resolve_axis(runs, x)
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
    return chart_figure("accuracy", title, axis, y_title, traces, note, log_y, None if log_y else (0.0, 1.0))


def perplexity_figure(runs: list[RunSeries], x: str, log_y: bool = True, **_other_options: Any) -> go.Figure:
    """Validation perplexity (exp of the mean validation loss per target token) at each evaluation of
    each language run; on a log axis by default, since it falls from about the vocabulary size (256)."""
    axis = resolve_axis(runs, x)
    language = [(i, run) for i, run in axis.drawn if is_language(run)]
    traces = _eval_traces(language, axis.x, "perplexity", lambda run: "", ".4g")
    note = WAITING if not axis.drawn else NO_LANGUAGE if not language else None if traces else NO_EVALS
    # Image runs are never drawn here, whatever the x axis: no note about leaving them out.
    return chart_figure("perplexity", "validation perplexity", replace(axis, left_out=False), "perplexity",
                        traces, note, log_y)


CHARTS: dict[str, Callable[..., go.Figure]] = {  # every set of runs gets these, in this order
    "loss": loss_figure,
    "accuracy": accuracy_figure,
    "scale": scale_figure,
    "skipped": skipped_figure,
    "grad_norm": grad_norm_figure,
    "lr": lr_figure,
    "memory": memory_figure,
    "collectives": collectives_figure,
    "throughput": throughput_figure,
    "cache": cache_figure,
}
# Charts drawn only when a language run is shown, each placed after the chart named.
LANGUAGE_CHARTS: dict[str, tuple[str, Callable[..., go.Figure]]] = {"perplexity": ("accuracy", perplexity_figure)}
# Every chart name, in display order (a language run shown): what a per-chart option offers.
ALL_CHARTS = tuple(name for chart in CHARTS
                   for name in (chart, *(extra for extra, (after, _) in LANGUAGE_CHARTS.items() if after == chart)))
LOG_BY_DEFAULT = frozenset({"scale", "perplexity"})
# Each chart's name in words, where a page offers a choice of charts (a log y axis per chart).
CHART_TITLES = {"loss": "loss", "accuracy": "accuracy", "perplexity": "perplexity", "scale": "loss scale",
                "skipped": "skipped steps", "grad_norm": "gradient norm", "lr": "learning rate", "memory": "memory",
                "collectives": "collectives", "throughput": "throughput", "cache": "cache clearing"}


def chart_builders(runs: list[RunSeries]) -> dict[str, Callable[..., go.Figure]]:
    """The charts these runs get, in display order: CHARTS, and the LANGUAGE_CHARTS when a language run is among them."""
    language = any(is_language(run) for _, run in with_rows(runs))
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
