"""Plotly figures and words for the Plan page: peak memory and samples/s against the micro-batch size
per option combination, samples/s against peak memory coloured by the memory lever (activation checkpointing),
the table (also the CLI's, as text), the progress line. Pure: no streamlit, no measuring."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.colors import qualitative

from gaccum_core.train.metrics import time_left_words
from gaccum_core.plan.search import FITS, UNAVAILABLE, Candidate, Options, mb
from gaccum_core.views.point_labels import label_places

if TYPE_CHECKING:
    import pandas as pd

    from gaccum_core.plan.planner import Plan

PALETTE = tuple(qualitative.Plotly)
BUDGET_COLOUR, MARGIN_COLOUR = "#222222", "#7f7f7f"  # apart from PALETTE's colours
_LAYOUT = dict(template="plotly_white", height=360, margin=dict(l=55, r=10, t=40, b=40),
               legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0, font=dict(size=10)))
# A trace's `meta` says what it draws, for tests and anyone reading the figure's JSON.
OPTION, UNMEASURED, BUDGET, MARGIN_LINE, RECOMMENDED = "option", "no peak", "budget", "margin", "recommended"
LEVER = "lever"  # the trade-off chart's points of one checkpointing setting
EN = "\u2002"  # an en space
# The trade-off chart: a colour per activation-checkpointing setting, a marker per precision.
LEVER_COLOURS = {"off": PALETTE[0], "selective": PALETTE[2], "full": PALETTE[1]}
PRECISION_SYMBOLS = {"off": "circle", "bf16": "diamond", "fp16": "square"}
# Plan.rows() columns in the tables, in order: the page's heading (named for reading), the terminal's
# (terse; None: the CLI leaves the column out) and the printf format of its numbers (None: as they are).
TABLE_COLUMNS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("options", "options", "options", None),
    ("micro_batch_size", "micro-batch b", "b", None),
    ("accum_steps", "accumulation k", "k", None),
    ("status", "status", "status", None),
    ("peak_mb", "peak MB", "peak MB", "%.3g"),  # megabytes to 3 significant digits; per rank with N ranks
    ("weights_mb", "weights MB", "weights", "%.3g"),
    ("gradients_mb", "gradients MB", "grads", "%.3g"),
    ("optimizer_mb", "optimizer MB", "optim", "%.3g"),
    ("activations_mb", "activations MB", "activations MB", "%.3g"),
    ("gathered_mb", "gathered weights MB", "gathered", "%.3g"),  # fsdp: the largest units while they compute
    ("speed", "samples/s (± 95% interval)", "samples/s", None),  # '1530 ± 40', as Candidate.speed_words
    ("timed_steps", "timed steps", "steps", "%.0f"),
    ("tokens_per_s", "tokens/s", "tokens/s", "%.0f"),
    ("step_time_s", "s per step", "s/step", "%.3f"),  # seconds to the millisecond
    ("message", "message", None, None),
)


# Line styles by (sharding mode, cache clearing on): a sharded mode's line stays apart from ddp's where they meet.
_DASHES = {("ddp", False): "solid", ("ddp", True): "dash", ("fsdp/every", False): "dot",
           ("fsdp/every", True): "longdash", ("fsdp/last", False): "dashdot", ("fsdp/last", True): "longdashdot"}


def _line(index: int, options: Options) -> dict[str, Any]:
    """The option combination's line, the same in both charts: colour by its position, dotted by sharding mode,
    dashed with cache clearing (which leaves the counted memory as it is: the plain line shows through)."""
    return dict(color=PALETTE[index % len(PALETTE)], dash=_DASHES[options.sharding, options.clear_cache != "off"])


def _measured(plan: Plan) -> list[tuple[int, Options, list[Candidate]]]:
    """(colour index, options, candidates by b) per combination with a measured (b > 0) candidate."""
    groups = []
    for i, options in enumerate(plan.request.options):
        mine = sorted((c for c in plan.candidates if c.options == options and c.status != UNAVAILABLE),
                      key=lambda c: c.micro_batch_size)
        if mine:
            groups.append((i, options, mine))
    return groups


def _sizes_axis(plan: Plan) -> dict[str, Any]:
    """A log2 x axis for b: ticks at the sizes measured, written as whole numbers."""
    sizes = sorted({c.micro_batch_size for c in plan.candidates if c.micro_batch_size > 0})
    return dict(title=dict(text="micro-batch size b (log₂)"), type="log", tickvals=sizes,
                ticktext=[str(b) for b in sizes])


def _figure(name: str, title: str, y_title: str, plan: Plan, traces: list[dict[str, Any]],
            note: str | None = None) -> go.Figure:
    """A figure with the layout both plan charts share."""
    figure = go.Figure(data=traces)
    figure.update_layout(title=title, xaxis=_sizes_axis(plan), yaxis=dict(title=dict(text=y_title)),
                         uirevision=name, **_LAYOUT)
    if note:
        figure.add_annotation(text=note, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    return figure


def candidate_words(candidate: Candidate) -> str:
    """'fp32 b=64 fits (12.3 MB, 1500 ± 40 samples/s)': one candidate in a few words."""
    figures = []
    if candidate.peak_mb is not None:
        figures.append(mb(candidate.peak_mb))
    if candidate.samples_per_s is not None:
        figures.append(candidate.speed_words())
    if candidate.status == UNAVAILABLE:
        return f"{candidate.options.label()} unavailable"
    text = f"{candidate.options.label()} b={candidate.micro_batch_size} {candidate.status}"
    return text + (f" ({', '.join(figures)})" if figures else "")


def _hover(candidate: Candidate) -> str:
    """A point's hover text: the candidate, k, and the message of a candidate that has no peak."""
    text = f"{candidate_words(candidate)}<br>k={candidate.accum_steps}"
    message = candidate.detail.get("message")
    return text + (f"<br>{message[:120]}" if message and candidate.peak_mb is None else "")


def _horizontal(y: float, x: tuple[float, float], name: str, meta: str, **line: Any) -> dict[str, Any]:
    """A horizontal line across the measured sizes, as a trace (so its name is in the legend)."""
    return dict(type="scatter", x=list(x), y=[y, y], mode="lines", name=name, meta=meta, hoverinfo="name",
                line=dict(width=2, **line))


def memory_figure(plan: Plan) -> go.Figure:
    """Peak memory (MB) against b on a log2 axis: one line per option combination, an x where a
    candidate went over the budget or ran out of memory (drawn at the budget: it has no peak), the
    budget and the budget less the recommendation's margin as horizontal lines."""
    budget, margin = plan.request.budget_mb, plan.request.margin
    groups = _measured(plan)
    traces: list[dict[str, Any]] = []
    for i, options, candidates in groups:
        peaks = [c for c in candidates if c.peak_mb is not None]
        traces.append(dict(
            type="scatter", x=[c.micro_batch_size for c in peaks], y=[c.peak_mb for c in peaks],
            mode="lines+markers", name=options.label(), legendgroup=options.label(), meta=OPTION,
            line=_line(i, options), text=[_hover(c) for c in peaks], hoverinfo="text",
            marker=dict(size=[9 if c.status == FITS else 12 for c in peaks],
                        symbol=["circle" if c.status == FITS else "x" for c in peaks])))
        unmeasured = [c for c in candidates if c.peak_mb is None]
        if unmeasured:  # out of memory (or failed): no peak, an x at the budget
            traces.append(dict(
                type="scatter", x=[c.micro_batch_size for c in unmeasured], y=[budget] * len(unmeasured),
                mode="markers", name=f"{options.label()} · {unmeasured[0].status}", legendgroup=options.label(),
                showlegend=False, meta=UNMEASURED, text=[_hover(c) for c in unmeasured], hoverinfo="text",
                marker=dict(symbol="x", size=12, color=_line(i, options)["color"],
                            line=dict(width=1, color=BUDGET_COLOUR))))
    sizes = [c.micro_batch_size for _, _, group in groups for c in group]
    if sizes:
        span = (min(sizes), max(sizes)) if min(sizes) < max(sizes) else (sizes[0] / 1.5, sizes[0] * 1.5)
        traces.append(_horizontal(budget, span, f"budget {mb(budget)}", BUDGET, color=BUDGET_COLOUR))
        traces.append(_horizontal((1 - margin) * budget, span, f"budget less {margin:.0%} margin "
                                  f"({mb((1 - margin) * budget)})", MARGIN_LINE, color=MARGIN_COLOUR, dash="dot"))
    per_rank = " per rank" if plan.request.world_size > 1 else ""
    return _figure("plan_memory", f"peak memory{per_rank} per micro-batch size", f"peak MB{per_rank}", plan, traces,
                   None if sizes else "nothing was measured")


def _error_bars(candidates: list[Candidate]) -> dict[str, Any]:
    """Each speed's 95% interval as an error bar (none where one step gave no interval)."""
    errors = [c.samples_per_s_error if c.samples_per_s_error is not None and math.isfinite(c.samples_per_s_error)
              else 0.0 for c in candidates]
    return dict(type="data", array=errors, visible=True, thickness=1.5, width=4)


def speed_figure(plan: Plan) -> go.Figure:
    """Samples/s against b on a log2 axis for the timed candidates, with their 95% intervals, one line
    per option combination; the recommended setting is a star."""
    traces: list[dict[str, Any]] = []
    for i, options, candidates in _measured(plan):
        fitting = [c for c in candidates if c.fits and c.samples_per_s is not None]
        if fitting:
            traces.append(dict(
                type="scatter", x=[c.micro_batch_size for c in fitting], y=[c.samples_per_s for c in fitting],
                error_y=_error_bars(fitting), mode="lines+markers", name=options.label(),
                legendgroup=options.label(), meta=OPTION, line=_line(i, options),
                text=[_hover(c) for c in fitting], hoverinfo="text"))
    choice = plan.recommended
    if choice is not None and choice.samples_per_s is not None:  # a sharded mode is counted, not timed
        traces.append(dict(
            type="scatter", x=[choice.micro_batch_size], y=[choice.samples_per_s], mode="markers",
            name=f"recommended: {choice.options.label()} b={choice.micro_batch_size}", meta=RECOMMENDED,
            text=[_hover(choice)], hoverinfo="text",
            marker=dict(symbol="star", size=18, color="gold", line=dict(width=1.5, color="black"))))
    untimed = any(c.fits and c.options.sharding != "ddp" for c in plan.candidates)
    note = None if traces else "fsdp modes are counted, not timed" if untimed else "nothing fits the budget"
    figure = _figure("plan_speed", "throughput of the sizes timed (± 95% interval)", "samples/s", plan, traces, note)
    return figure.update_yaxes(rangemode="nonnegative")  # a wide interval's bar never draws a speed below 0


def tradeoff_figure(plan: Plan) -> go.Figure:
    """Samples/s against peak memory for every timed candidate: one colour per activation-checkpointing setting
    (the lever that buys memory with recompute), a marker per precision, each point labelled b and k where the label
    overlaps nothing (else in its hover); both axes from 0; the budget and its margin as vertical lines, the
    recommendation a star. Where checkpointing moves a point left (less
    memory) and down (recompute), and accumulation (a smaller b, a larger k) moves it left too."""
    budget, margin = plan.request.budget_mb, plan.request.margin
    timed = [c for c in plan.candidates if c.samples_per_s is not None and c.peak_mb is not None]
    x_range, y_range = _tradeoff_ranges(timed, budget)
    choice = plan.recommended
    starred = next((c for c in timed if c == choice), None)  # the recommendation, when timed: a star
    labels = _labels(timed, starred, x_range, y_range)
    traces: list[dict[str, Any]] = []
    for lever, colour in LEVER_COLOURS.items():
        mine = [c for c in timed if c.options.activation_checkpointing == lever]
        if mine:
            traces.append(dict(
                type="scatter", x=[c.peak_mb for c in mine], y=[c.samples_per_s for c in mine],
                error_y=_error_bars(mine), mode="markers+text", meta=LEVER, name=f"checkpointing {lever}",
                text=["" if c is starred else labels[id(c)][0] for c in mine],  # the star says its own
                textposition=[labels[id(c)][1] for c in mine],
                textfont=dict(size=10, color=colour),
                hovertext=[_hover(c) for c in mine], hoverinfo="text",
                marker=dict(size=11, color=colour, symbol=[PRECISION_SYMBOLS[c.options.amp] for c in mine],
                            line=dict(width=1, color="white"))))
    if starred is not None:
        text, place = labels[id(starred)]
        traces.append(dict(
            type="scatter", x=[choice.peak_mb], y=[choice.samples_per_s], mode="markers+text", meta=RECOMMENDED,
            name=f"recommended: {choice.options.label()} b={choice.micro_batch_size}", hovertext=[_hover(choice)],
            text=[text], textposition=place, textfont=dict(size=10, color=BUDGET_COLOUR),
            hoverinfo="text", marker=dict(symbol="star", size=18, color="gold", line=dict(width=1.5, color="black"))))
    figure = go.Figure(data=traces)
    per_rank = " per rank" if plan.request.world_size > 1 else ""
    figure.update_layout(title="speed against memory, by lever (colour: activation checkpointing)",
                         xaxis=dict(title=dict(text=f"peak MB{per_rank}"), range=list(x_range)),
                         yaxis=dict(title=dict(text="samples/s"), range=list(y_range)), uirevision="plan_tradeoff",
                         **_LAYOUT)
    if traces:
        figure.add_vline(x=budget, line=dict(color=BUDGET_COLOUR, width=2),
                         annotation_text=f"budget {mb(budget)}", annotation_position="top left")
        figure.add_vline(x=(1 - margin) * budget, line=dict(color=MARGIN_COLOUR, width=1.5, dash="dot"),
                         annotation_text=f"less {margin:.0%}", annotation_position="bottom left")
    else:
        figure.add_annotation(text="no size was timed", xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    return figure


def _tradeoff_ranges(timed: list[Candidate], budget: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The trade-off chart's axes, from 0: to past the budget and the largest peak, and past the top of the
    highest error bar (a wide interval's bar is cut at 0: no speed is below it)."""
    errors = _error_bars(timed)["array"]
    top = max((c.samples_per_s + e for c, e in zip(timed, errors)), default=1.0)
    right = max([budget, *(c.peak_mb for c in timed)])
    return (0.0, right * 1.08), (0.0, top * 1.1)


def _labels(timed: list[Candidate], starred: Candidate | None, x_range: tuple[float, float],
            y_range: tuple[float, float]) -> dict[int, tuple[str, str]]:
    """Each point's label 'b=16 k=4' and its place, the recommendation's first, then the fastest first; '' where it
    would overlap (its hover says it)."""
    ordered = sorted(timed, key=lambda c: (c is not starred, -c.samples_per_s))
    # The star reaches past the offset plotly gives its text: an en space each side keeps its label off it.
    words = [f"{EN * (c is starred)}b={c.micro_batch_size} k={c.accum_steps}{EN * (c is starred)}" for c in ordered]
    places = label_places([(c.peak_mb, c.samples_per_s) for c in ordered], words, x_range, y_range)
    return {id(c): (text if place else "", place or "middle right") for c, text, place in zip(ordered, words, places)}


def _headings(terse: bool) -> dict[str, str]:
    """Plan.rows() column -> heading, for the page's table or (terse) the terminal's."""
    return {column: terse_heading if terse else heading for column, heading, terse_heading, _ in TABLE_COLUMNS
            if not terse or terse_heading is not None}


def plan_table(plan: Plan, terse: bool = False) -> pd.DataFrame:
    """The candidates in the order measured, with readable column names (terse: the terminal's)."""
    import pandas as pd  # on use: every command line imports this module (0.5 s), few print a plan

    frame = pd.DataFrame(plan.rows())
    if "speed" in frame:  # a text column: "None" would read as a value
        frame["speed"] = frame["speed"].fillna("-" if terse else "not timed")
    for column, _, _, fmt in TABLE_COLUMNS:  # numbers with gaps (untimed sizes) as floats: a gap shows empty
        if fmt is not None and column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    headings = {column: heading for column, heading in _headings(terse).items() if column in frame}
    return frame[list(headings)].rename(columns=headings)


def table_formats(terse: bool = False) -> dict[str, str]:
    """printf format of the numbers per heading of plan_table (terse: of its terminal table)."""
    formats = {column: fmt for column, _, _, fmt in TABLE_COLUMNS if fmt is not None}
    return {heading: formats[column] for column, heading in _headings(terse).items() if column in formats}


def format_table(plan: Plan) -> str:
    """The candidates as an aligned text table for a terminal, in the order measured ("-": no value)."""
    frame = plan_table(plan, terse=True)
    formats = {heading: fmt for heading, fmt in table_formats(terse=True).items() if heading in frame}
    return frame.to_string(index=False, na_rep="-",
                           formatters={heading: lambda value, fmt=fmt: fmt % value for heading, fmt in formats.items()})


def plan_csv(plan: Plan) -> str:
    """Every column of every candidate (memory parts, allocator figures, messages) as CSV."""
    import pandas as pd  # on use, as in plan_table

    return pd.DataFrame(plan.rows()).to_csv(index=False)


def progress_text(done: int, about: int, candidate: Candidate | None, seconds: float) -> str:
    """'step 3 of about 40 (memory probes, then timed steps) · about 9 s left · last: fp32 b=4 fits
    (0.3 MB)'."""
    text = f"step {done} of about {about} (memory probes, then timed steps)"
    if done:
        text += f" · about {time_left_words(seconds / done * max(about - done, 0))}"
    return text + (f" · last: {candidate_words(candidate)}" if candidate is not None else "")


def recommendation_words(candidate: Candidate, world_size: int = 1) -> str:
    """'micro-batch size b=32, accumulation steps k=8, mixed precision bf16, cache clearing off, torch.compile off,
    activation checkpointing off' (', sharding fsdp/every over 2 ranks' with several)."""
    o = candidate.options
    text = (f"micro-batch size b={candidate.micro_batch_size}, accumulation steps k={candidate.accum_steps}, "
            f"mixed precision {o.amp}, cache clearing {o.clear_cache}, torch.compile {o.compile}, "
            f"activation checkpointing {o.activation_checkpointing}")
    return text + (f", sharding {o.sharding} over {world_size} ranks" if world_size > 1 else "")

