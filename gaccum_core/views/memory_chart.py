"""The memory chart: the training memory the planner counts (weights + gradients + optimizer state +
activations saved for backward) as its main figure on every device, the CUDA allocator's figures beside
it on CUDA, and the process's resident memory only as a faint line on a right-hand axis.

On the CPU the resident memory is mostly the interpreter and libraries (~800 MB), so drawn as the main
figure it hid what accumulation saves (0.1 MB of activations at b=8 against 0.4 MB at b=32). Each axis ending
just above its own largest value, the faint resident-memory line lay under the thick training line: the left
axis keeps the training memory in the plot's lower part, the right one the resident memory in its upper part.

With a run of several processes shown, the figures are per rank (the largest rank's), and each run's gradient
memory kept between micro-batches (grad_kept_mb) is a line of its own: what sharding saves (fsdp_sync every
keeps 1/N of the gradient, last and DDP all of it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from gaccum_core.views.axes import YScale, chart_figure, resolve_axis
from gaccum_core.views.ranges import band, finite_values
from gaccum_core.views.series import RunSeries, downsample
from gaccum_core.views.traces import WAITING, colour, key, line, scatter, uid

TITLE = "training memory"
SUBTITLE = "weights + gradients + optimizer state + activations saved for backward"
Y_TITLE = "training memory (MB)"
# Title, subtitle and y title with several processes shown; short, for a half-page chart with a right axis.
PER_RANK = ("training memory per rank", "largest rank: weights + grads + optimizer + activations", "MB per rank")
GRAD_KEPT = "gradients kept between micro-batches"
RSS = "process memory (RSS)"
RSS_TITLE = "process RSS (MB)"  # short: a vertical title longer than a small plot runs off it
PARTS = ("weights_mb", "gradients_mb", "optimizer_mb", "activation_mb")
# The CUDA allocator's figures: column -> (legend suffix, dash). Colour tells the runs apart.
CUDA_LINES = {"mem_allocated_mb": ("allocated (CUDA)", "dash"), "mem_reserved_mb": ("reserved (CUDA)", "dot"),
              "mem_peak_mb": ("peak (CUDA)", "longdash")}
# Where each axis draws its lines, as fractions of the plot's height from its bottom: apart whatever their values.
TRAINING_BAND, RSS_BAND = (0.05, 0.6), (0.72, 0.94)
_HOVER = ("%{y:.4g} MB = weights %{customdata[0]:.3g} + gradients %{customdata[1]:.3g}"
          " + optimizer state %{customdata[2]:.3g} + activations %{customdata[3]:.3g}")


def _has(run: RunSeries, column: str) -> bool:
    values = run.metrics.get(column)
    return values is not None and bool(np.isfinite(values.to_numpy(dtype=float)).any())


def _training_line(run: RunSeries, x: str, colour_: str) -> dict[str, Any]:
    """The run's training memory, its parts in the hover."""
    points = downsample(run.metrics, x, "train_mem_mb")
    return scatter(points[x].to_numpy(), points["train_mem_mb"].to_numpy(), mode="lines", name=run.label,
                   legendgroup=run.run_id, uid=uid(run, "train_mem_mb"), line={"color": colour_, "width": 2.5},
                   customdata=points[list(PARTS)].to_numpy(dtype=float), hovertemplate=_HOVER)


def _run_traces(run: RunSeries, x: str, colour_: str, per_rank: bool) -> list[dict[str, Any]]:
    """Training memory and activations (per rank: the gradients kept between micro-batches too); the
    allocator's figures (CUDA) or the resident memory (CPU). A run written before training memory was
    recorded draws its activations and the rest."""
    traces = []
    if _has(run, "train_mem_mb"):
        traces.append(_training_line(run, x, colour_))
    if per_rank and _has(run, "grad_kept_mb"):
        traces.append(line(run.metrics, x, "grad_kept_mb", name=f"{run.label} {GRAD_KEPT}", legendgroup=run.run_id,
                           uid=uid(run, "grad_kept_mb"), line={"color": colour_, "width": 1.5, "dash": "dashdot"}))
    if _has(run, "activation_mb"):
        traces.append(line(run.metrics, x, "activation_mb", name=f"{run.label} activations", legendgroup=run.run_id,
                           uid=uid(run, "activation_mb"), line={"color": colour_, "width": 1, "dash": "dot"}))
    if _has(run, "mem_reserved_mb"):  # only the CUDA allocator reserves
        traces += [line(run.metrics, x, column, name=f"{run.label} {suffix}", legendgroup=run.run_id,
                        uid=uid(run, column), line={"color": colour_, "width": 1.5, "dash": dash})
                   for column, (suffix, dash) in CUDA_LINES.items() if _has(run, column)]
    elif _has(run, "mem_allocated_mb"):
        traces.append(line(run.metrics, x, "mem_allocated_mb", name=f"{run.label} {RSS}", legendgroup=run.run_id,
                           uid=uid(run, "rss"), yaxis="y2", opacity=0.35, line={"color": colour_, "width": 1}))
    return traces


def _keys(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Legend entries for the line styles drawn: each run has one entry (its colour), these say what
    its thick, dotted, dashed and faint lines are."""
    drawn = {trace["uid"].rsplit("--", 1)[-1] for trace in traces}
    keys = [key("training memory", line={"width": 2.5})] if "train_mem_mb" in drawn else []
    keys += [key("activations", line={"width": 1, "dash": "dot"})] if "activation_mb" in drawn else []
    keys += [key(GRAD_KEPT, line={"width": 1.5, "dash": "dashdot"})] if "grad_kept_mb" in drawn else []
    keys += [key(suffix, line={"width": 1.5, "dash": dash}) for column, (suffix, dash) in CUDA_LINES.items()
             if column in drawn]
    keys += [key(f"{RSS}, right axis", opacity=0.35, line={"width": 1})] if "rss" in drawn else []
    return keys


def memory_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Training memory per run (thick; parts in the hover), its activations (thin dotted), the CUDA
    allocator's figures on CUDA, and the process's resident memory (CPU) faint on the right axis. The
    legend has one entry per run, and one per line style. With a run of several processes among them, the
    figures are per rank (the title says so) and the gradients kept between micro-batches are drawn."""
    axis = resolve_axis(runs, x)
    per_rank = any(_several_processes(run) for _, run in axis.drawn)
    traces = []
    for i, run in axis.drawn:
        lines = _run_traces(run, axis.x, colour(i, run), per_rank)
        traces += [{**trace, "showlegend": n == 0} for n, trace in enumerate(lines)]
    rss = any(trace.get("yaxis") == "y2" for trace in traces)
    title, subtitle, y_title = PER_RANK if per_rank else (TITLE, SUBTITLE, Y_TITLE)
    y_range, y2_range = _apart(traces, log_y) if rss else (None, None)
    return chart_figure("memory", title, axis, y_title, traces + _keys(traces), None if traces else WAITING, log_y,
                        y_range=y_range, y2_title=RSS_TITLE if rss else None, scale=YScale(rangemode="tozero"),
                        subtitle=subtitle, y2_range=y2_range)


def _apart(traces: list[dict[str, Any]], log_y: bool) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The left and right y ranges that draw the training memory (from zero on a linear axis) below the
    resident memory, so that neither line hides the other; None for an axis without values."""
    training = band(finite_values(traces, axis="y"), TRAINING_BAND[0] if log_y else 0.0, TRAINING_BAND[1], log_y)
    return training, band(finite_values(traces, axis="y2"), *RSS_BAND, log_y)


def _several_processes(run: RunSeries) -> bool:
    """A run of a data-parallel job (its rows say world_size > 1): its memory figures are per rank."""
    sizes = run.metrics.get("world_size")
    return sizes is not None and bool((sizes.to_numpy(dtype=float) > 1).any())
