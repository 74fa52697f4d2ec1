"""The collectives chart: per optimizer step, the gradient collectives a rank called (FSDP's reduce-scatters and
all-gathers, DDP's all-reduces), a line per run and kind (colour: the run; dash: the kind), the MB each carried
in the hover. What fsdp_sync last saves shows here: k times fewer reduce-scatters than every."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from gaccum_core.views.axes import YScale, chart_figure, resolve_axis
from gaccum_core.views.series import RunSeries, downsample
from gaccum_core.views.traces import WAITING, colour, key, scatter, uid

TITLE = "collectives per optimizer step"
SUBTITLE = "calls per rank; the MB they carried in the hover"
Y_TITLE = "calls per step"
# column prefix -> (what one call is, its dash); the columns are <prefix>_calls and <prefix>_bytes
KINDS = {"reduce_scatter": ("reduce-scatter", "solid"), "all_gather": ("all-gather", "dash"),
         "allreduce": ("all-reduce", "dot")}
NOT_APPLICABLE = ("Collectives per step: not applicable, every run here trains in one process "
                  "(nothing to all-reduce or shard).")
NO_COLLECTIVES = "no collectives: these runs train in one process"  # the figure's note; pages show NOT_APPLICABLE
MB = 1024 * 1024


def calls(run: RunSeries, kind: str) -> bool:
    """Whether the run called this collective at some step."""
    values = run.metrics.get(f"{kind}_calls")
    return values is not None and bool((values.to_numpy(dtype=float) > 0).any())


def has_collectives(run: RunSeries) -> bool:
    """Whether the run called any gradient collective (a data-parallel run of several processes)."""
    return any(calls(run, kind) for kind in KINDS)


def _trace(run: RunSeries, x: str, kind: str, colour_: str, width: float) -> dict[str, Any]:
    """One collective of one run: its calls per step, the MB they carried in the hover."""
    name, dash = KINDS[kind]
    points = downsample(run.metrics, x, f"{kind}_calls")
    sent = points.get(f"{kind}_bytes")
    mb = np.zeros(len(points)) if sent is None else sent.to_numpy(dtype=float) / MB
    return scatter(points[x].to_numpy(), points[f"{kind}_calls"].to_numpy(dtype=float),
                   mode="lines" if len(points) > 1 else "lines+markers", name=run.label, legendgroup=run.run_id,
                   uid=uid(run, kind), line={"color": colour_, "dash": dash, "width": width, "shape": "hv"},
                   customdata=mb, hovertemplate=f"%{{y:d}} {name}s, %{{customdata:.3g}} MB")


def _covered_by(run: RunSeries, kind: str, later: list[RunSeries]) -> int:
    """How many later runs call this collective exactly as often at every step: their lines are drawn on top of
    this one, which is drawn wider by as many so that every run's colour still shows (fsdp every and last
    all-gather alike)."""
    column = f"{kind}_calls"
    counts = run.metrics[column].tolist()
    return sum(1 for other in later if column in other.metrics and other.metrics[column].tolist() == counts)


def collectives_figure(runs: list[RunSeries], x: str, log_y: bool = False, **_other_options: Any) -> go.Figure:
    """Each run's reduce-scatters (solid), all-gathers (dashed) and all-reduces (dotted) per optimizer step, on
    one rank; one legend entry per run and one per kind drawn."""
    axis = resolve_axis(runs, x)
    traces, drawn = [], []
    shown = [run for _, run in axis.drawn]
    for n, (i, run) in enumerate(axis.drawn):
        kinds = [kind for kind in KINDS if calls(run, kind)]
        drawn += [kind for kind in kinds if kind not in drawn]
        traces += [{**_trace(run, axis.x, kind, colour(i, run), 2 + 2 * _covered_by(run, kind, shown[n + 1:])),
                    "showlegend": False} for kind in kinds]
        if kinds:  # the run's legend entry: a plain line in its colour (whichever kinds it called)
            traces.append(scatter([None], [None], mode="lines", name=run.label, legendgroup=run.run_id,
                                  uid=uid(run, "legend"), line={"color": colour(i, run), "width": 2},
                                  hoverinfo="skip", showlegend=True))
    keys = [key(KINDS[kind][0], line={"width": 2, "dash": KINDS[kind][1]}) for kind in KINDS if kind in drawn]
    note = WAITING if not axis.drawn else None if traces else NO_COLLECTIVES
    return chart_figure("collectives", TITLE, axis, Y_TITLE, traces + keys, note, log_y,
                        scale=YScale(rangemode="tozero", integer=True), subtitle=SUBTITLE)
