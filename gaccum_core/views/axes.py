"""What every run chart shares: the x axes it offers, which runs an axis can draw (Axis), the y axes,
and the layout (chart_figure) with its trimmed template and uirevision."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from gaccum_core.views.ranges import clip, constant_range, finite_values, unit_ticks
from gaccum_core.views.series import RunSeries, is_language, with_rows

X_AXES: dict[str, str] = {"step": "optimizer step", "samples_seen": "samples seen", "tokens_seen": "tokens seen",
                          "wall_time_s": "wall time (s)"}
TOKEN_AXES = frozenset({"tokens_seen"})  # x axes only language runs have: image runs count no tokens
LEFT_OUT = "image runs not drawn: they count no tokens"
# What a records run's token figures count, said under its charts.
LOSS_TOKENS_NOTE = ("sft and pg: tokens seen and tokens/s count loss tokens, each record's completion tokens and "
                    "its end (not its prompt, nor padding); the validation loss is the mean over the held-out "
                    "records' loss tokens (pg's without advantages).")

_TEMPLATE_KEYS = ("autotypenumbers", "colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor",
                  "plot_bgcolor", "xaxis", "yaxis", "title")


@cache
def _template() -> go.layout.Template:
    """plotly_white cut down to what cartesian line charts read."""
    # The full template holds defaults for every trace type and polar/geo/3-D axes; validating and
    # serialising it took ~35 ms per figure, most of the server-side draw of a 50k-step run.
    white = pio.templates["plotly_white"]
    layout = {key: value for key, value in white.layout.to_plotly_json().items() if key in _TEMPLATE_KEYS}
    return go.layout.Template(layout=layout, data={"scatter": white.data.scatter})


def _check_x(x: str) -> None:
    """Reject an x axis the charts do not know."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not allowed: one of {', '.join(X_AXES)}")


@dataclass(frozen=True)
class Axis:
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


def resolve_axis(runs: list[RunSeries], x: str) -> Axis:
    """Resolve x for these runs: against tokens seen only language runs are drawn; when no run with
    rows counts tokens, the charts fall back to optimizer steps rather than draw nothing."""
    _check_x(x)
    rows = with_rows(runs)
    if x not in TOKEN_AXES:
        return Axis(x, x, rows, False)
    language = [(i, run) for i, run in rows if is_language(run)]
    if rows and not language:
        return Axis("step", x, rows, False)
    return Axis(x, x, language, len(language) < len(rows))


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


@dataclass(frozen=True)
class YScale:
    """How a chart's y axis follows its data: clip runs gone wild out of the range (saying so), never
    go below zero (counts) or always show zero (sizes), tick whole numbers only."""

    clip: bool = False
    rangemode: str | None = None  # "nonnegative" (counts, rates) or "tozero" (sizes: memory)
    integer: bool = False


def _fitted_y(yaxis: dict[str, Any], traces: list[dict[str, Any]], scale: YScale, log_y: bool) -> str | None:
    """Set yaxis's range and ticks from the data (unless a range is given); the clip note, if any."""
    if scale.rangemode and not log_y:
        yaxis["rangemode"] = scale.rangemode
    values = finite_values(traces, axis="y")
    if scale.integer:
        yaxis.update(unit_ticks(values))
    if "range" in yaxis:
        return None
    constant = constant_range(values, log_y)
    if constant is not None:
        yaxis["range"] = [max(constant[0], 0.0) if scale.rangemode and not log_y else constant[0], constant[1]]
        if log_y:
            yaxis["dtick"] = 1  # the decades only: on two decades plotly labels every digit between them
        return None
    clipped = clip([t for t in traces if t.get("yaxis", "y") == "y"]) if scale.clip and not log_y else None
    if clipped is None:
        return None
    yaxis["range"] = [clipped.low, clipped.high]
    return clipped.note()


def _x_axis(axis: Axis, traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The x axis: its title (saying when it replaced tokens seen) and whole-number ticks for counts."""
    x_title = X_AXES[axis.x] + (f" ({X_AXES[axis.requested]}: no run here counts tokens)" if axis.fallback else "")
    xaxis: dict[str, Any] = {"title": {"text": x_title}}
    if axis.x != "wall_time_s":
        xaxis["tickformat"] = ",d"  # steps, samples and tokens are whole numbers
        xaxis.update(unit_ticks(finite_values(traces, "x")))
    return xaxis


# The legend sits under the plot, in rows: beside it, it took up to 40 % of the chart's width. Its rows
# are estimated from its text (10 px font: about 6.5 px a character, 45 px for the line sample and gap)
# on a chart about 520 px wide (half of a 1280 px page), and the bottom margin grows by as many rows, so
# the legend never covers the x title however many runs are shown.
LEGEND_ROW_PX, LEGEND_WIDTH_PX, BOTTOM_PX, HEIGHT_PX = 20, 520, 50, 340


def legend_rows(traces: list[dict[str, Any]]) -> int:
    """How many rows the legend of these traces takes under the plot."""
    names = [str(t.get("name", "")) for t in traces if t.get("showlegend", True) is not False]
    rows, used = 0, LEGEND_WIDTH_PX
    for name in names:
        width = 45 + 6.5 * len(name)
        if used + width > LEGEND_WIDTH_PX:
            rows, used = rows + 1, 0
        used += width
    return rows


def chart_figure(name: str, title: str, x: str | Axis, y_title: str, traces: list[dict[str, Any]],
                 note: str | None = None, log_y: bool = False, y_range: tuple[float, float] | None = None,
                 y2_title: str | None = None, scale: YScale = YScale(), subtitle: str | None = None,
                 y2_range: tuple[float, float] | None = None) -> go.Figure:
    """A figure with the layout every chart shares, and a centred note when there is nothing to draw.
    Given an Axis, its x title says when it replaced tokens seen and a small note when it left
    image runs out; y2_title adds a right-hand y axis (traces with yaxis="y2"), on y2_range if given. The
    y range follows the data (scale) unless given: a constant series around its value, runs gone wild
    clipped out with a note."""
    axis = x if isinstance(x, Axis) else Axis(x, x, [], False)
    yaxis = _y_axis(y_title, log_y, y_range)
    clipped = _fitted_y(yaxis, traces, scale, log_y)
    rows = legend_rows(traces)
    layout = {
        "title": {"text": title}, "template": _template(), "height": HEIGHT_PX + LEGEND_ROW_PX * rows,
        "showlegend": True, "margin": {"l": 55, "r": 10, "t": 40, "b": BOTTOM_PX + LEGEND_ROW_PX * rows},
        "uirevision": uirevision(name, axis.x, log_y), "xaxis": _x_axis(axis, traces), "yaxis": yaxis,
        "hovermode": "x unified",
        "legend": {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0, "xanchor": "left",
                   "x": 0, "font": {"size": 10}},
    }
    if clipped:  # the clip note sits above the plot, under the title
        layout["margin"]["t"] += 16
    if subtitle:  # what the title's quantity is made of, in small type under it
        layout["title"]["subtitle"] = {"text": subtitle, "font": {"size": 11}}
        layout["margin"]["t"] += 18
    if y2_title is not None:
        layout["yaxis2"] = {**_y_axis(y2_title, log_y, y2_range), "overlaying": "y", "side": "right", "showgrid": False}
        if scale.rangemode and not log_y:
            layout["yaxis2"]["rangemode"] = scale.rangemode
        layout["margin"] = {**layout["margin"], "r": 55}
    for name_ in ("xaxis", "yaxis", "yaxis2"):
        if name_ in layout:
            _say_autorange(layout[name_])
    layout["annotations"] = _annotations(note, axis.left_out and bool(traces), clipped)
    if not layout["annotations"]:
        del layout["annotations"]
    return go.Figure(data=traces, layout=layout, _validate=False)


def _say_autorange(axis: dict[str, Any]) -> None:
    """State autorange on every figure, true unless the figure sets a range. Under a kept uirevision
    plotly.js keeps an attribute the app leaves as it was: after a figure with a range (one point, a
    constant lr) had turned autorange off, the next figures kept it off and showed plotly's empty
    [-1, 4] (the loss of a run on a stuck axis, its throughput off the chart)."""
    axis["autorange"] = "range" not in axis


def _annotations(note: str | None, left_out: bool, clipped: str | None) -> list[dict[str, Any]]:
    """The centred note, the image runs left out (top right) and the clip note (top left)."""
    small = {"xref": "paper", "yref": "paper", "y": 1, "yanchor": "bottom", "showarrow": False,
             "font": {"size": 10, "color": "#888"}}
    annotations = []
    if note:
        annotations.append({"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False})
    if left_out:
        annotations.append({"text": LEFT_OUT, "x": 1, "xanchor": "right", **small})
    if clipped:
        annotations.append({"text": clipped, "x": 0, "xanchor": "left", **{**small, "font": {"size": 10,
                                                                                           "color": "#b45309"}}})
    return annotations
