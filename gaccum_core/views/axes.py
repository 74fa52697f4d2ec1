"""What every run chart shares: the x axes it offers, which runs an axis can draw (Axis), the y axes,
and the layout (chart_figure) with its trimmed template and uirevision."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from gaccum_core.views.series import RunSeries, is_language, with_rows

X_AXES: dict[str, str] = {"step": "optimizer step", "samples_seen": "samples seen", "tokens_seen": "tokens seen",
                          "wall_time_s": "wall time (s)"}
TOKEN_AXES = frozenset({"tokens_seen"})  # x axes only language runs have: image runs count no tokens
LEFT_OUT = "image runs not drawn: they count no tokens"

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


def chart_figure(name: str, title: str, x: str | Axis, y_title: str, traces: list[dict[str, Any]],
                 note: str | None = None, log_y: bool = False, y_range: tuple[float, float] | None = None,
                 y2_title: str | None = None) -> go.Figure:
    """A figure with the layout every chart shares, and a centred note when there is nothing to draw.
    Given an Axis, its x title says when it replaced tokens seen and a small note when it left
    image runs out; y2_title adds a right-hand y axis (traces with yaxis="y2")."""
    axis = x if isinstance(x, Axis) else Axis(x, x, [], False)
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
