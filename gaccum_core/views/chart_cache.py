"""Live chart specs built once per new batch of rows and shared by every page that shows them.

A live page redraws every second in every open tab. Without sharing, each tab would turn the same
rows into DataFrames and figures again: work that grows with the number of tabs and, in the server
process that also trains, slows the training. Here each run's rows become DataFrame rows once
(appended as they arrive), and each (runs, rows, x axis, smoothing) figure set is built and
serialised to JSON once; every later ask for the same set is a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.io.json import to_json_plotly

from gaccum_core.views.applicable import not_applicable
from gaccum_core.views.charts import build_figures
from gaccum_core.views.coinciding import Coincidence, coinciding
from gaccum_core.views.series import RunSeries



def figure_json(figure: go.Figure) -> str:
    """The figure as plotly.js JSON with each trace's uid kept: pio.to_json drops uids, and plotly.js
    keeps a hidden legend entry with its line by uid (by position without one, so a trace added before
    it hid another run's line)."""
    return to_json_plotly(figure.to_plotly_json())

@dataclass(frozen=True)
class ChartInput:
    """One run as a live page knows it: its id, legend label and rows so far, and its colour
    (views.colours.run_colours; None: by its place among the runs shown)."""

    run_id: str
    label: str
    metrics: Sequence[Mapping[str, Any]]
    evals: Sequence[Mapping[str, Any]]
    colour: str | None = None


def grown_frame(frame: pd.DataFrame | None, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """frame with the rows it does not have yet appended: only new rows are converted."""
    if frame is None or len(frame) > len(rows):
        return pd.DataFrame([dict(r) for r in rows])
    if len(frame) == len(rows):
        return frame
    return pd.concat([frame, pd.DataFrame([dict(r) for r in rows[len(frame):]])], ignore_index=True)


@dataclass(frozen=True)
class ChartSet:
    """The charts of a set of runs, ready to send: plotly JSON per chart, which runs coincide, and the
    charts that do not apply to these runs with the line to show instead (views.applicable)."""

    specs: dict[str, str]
    coincidences: list[Coincidence]
    not_applicable: dict[str, str] = field(default_factory=dict)

    def applicable(self) -> dict[str, str]:
        """The specs of the charts that apply, in display order: what a page draws."""
        return {name: spec for name, spec in self.specs.items() if name not in self.not_applicable}


class ChartCache:
    """Chart JSON per chart name for a set of runs, shared across sessions; thread-safe."""

    def __init__(self, max_sets: int = 32) -> None:
        self._lock = threading.Lock()
        self._frames: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
        self._specs: OrderedDict[tuple, ChartSet] = OrderedDict()
        self._max_sets = max_sets
        self.builds = 0  # figure sets built so far: what sharing saves shows here

    def charts(self, runs: Sequence[ChartInput], x: str, smoothing: float,
               log_y: frozenset[str] | None = None) -> ChartSet:
        """The charts of these runs; built only when some run has new rows or an option changed."""
        key = (tuple((r.run_id, r.label, len(r.metrics), len(r.evals), r.colour) for r in runs), x, smoothing, log_y)
        with self._lock:
            cached = self._specs.get(key)
            if cached is not None:
                self._specs.move_to_end(key)
                return cached
            series = [self._series(run) for run in runs]
            figures = build_figures(series, x, smoothing, log_y)
            specs = ChartSet({name: figure_json(figure) for name, figure in figures.items()},
                             coinciding(series), not_applicable(series, tuple(figures)))
            self._specs[key] = specs
            self.builds += 1
            while len(self._specs) > self._max_sets:
                self._specs.popitem(last=False)
            return specs

    def forget(self, run_ids: Sequence[str]) -> None:
        """Drop everything built from these runs (they were deleted): their frames and chart sets."""
        gone = set(run_ids)
        with self._lock:
            for run_id in gone & set(self._frames):
                del self._frames[run_id]
            for key in [key for key in self._specs if gone & {run[0] for run in key[0]}]:
                del self._specs[key]

    def _series(self, run: ChartInput) -> RunSeries:
        metrics, evals = self._frames.get(run.run_id, (None, None))
        metrics, evals = grown_frame(metrics, run.metrics), grown_frame(evals, run.evals)
        self._frames[run.run_id] = (metrics, evals)
        return RunSeries(run.run_id, run.label, metrics, evals, run.colour)
