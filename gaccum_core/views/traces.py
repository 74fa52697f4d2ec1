"""The pieces every run chart's traces are made of: a run's colour, a scatter trace as plotly JSON, a
downsampled line, a trace uid that follows its run. Pure: no I/O."""

from __future__ import annotations

import html
import re
from typing import Any

import pandas as pd

from gaccum_core.views.colours import colour_at
from gaccum_core.views.series import RunSeries, downsample

WAITING = "waiting for the first optimizer step"
KEY_COLOUR = "#666"  # legend entries that explain a line style, not a run


def colour(index: int, run: RunSeries) -> str:
    """The run's own colour (the same on every page), else the one of its place among the runs shown."""
    return run.colour or colour_at(index)


def scatter(x: Any, y: Any, **props: Any) -> dict[str, Any]:
    """A scatter trace as plotly JSON: built as a dict, since validating go.Scatter objects cost ~10x more.
    Its name is a run's name as typed: plotly draws HTML in legends (links included), so it is escaped."""
    if "name" in props:
        props["name"] = html.escape(props["name"], quote=False)
    return {"type": "scatter", "x": x, "y": y, **props}


def line(frame: pd.DataFrame, x: str, y: str, **props: Any) -> dict[str, Any]:
    """A downsampled line trace of frame[y] against frame[x]; a single point is drawn as a marker (a
    line through one point shows nothing)."""
    points = downsample(frame, x, y)
    return scatter(points[x].to_numpy(), points[y].to_numpy(), mode="lines" if len(points) > 1 else "lines+markers",
                   **props)


_NOT_CSS = re.compile(r"[^A-Za-z0-9_-]")


def key(name: str, **style: Any) -> dict[str, Any]:
    """A legend entry with no data that says what a line style means ("activations" for dotted lines),
    so that each run needs one entry only: horizontal legends stack a run's several entries in a column."""
    style = {"mode": "lines", **style}
    if "lines" in style["mode"]:
        style["line"] = {"color": KEY_COLOUR, **style.get("line", {})}
    return scatter([None], [None], name=name, legendgroup=f"key {name}", uid=css_safe(f"key-{name}"), hoverinfo="skip",
                   showlegend=True, **style)


def css_safe(text: str) -> str:
    """Text usable in a CSS class name: plotly.js builds selectors from uids ('.cbkey' + uid), and a space
    or a bracket there threw in Plotly.purge and Plotly.react ("not a valid selector")."""
    return _NOT_CSS.sub("_", text)


def uid(run: RunSeries, line: str) -> str:
    """A trace's plotly uid: the run and the line (run id--line), so a hidden legend entry stays with its
    run's line when a redraw adds or drops traces before it (plotly matches UI state by uid, else by position)."""
    return css_safe(f"{run.run_id}--{line}")
