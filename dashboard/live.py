"""Runs as they go, on any page: a progress bar naming its run (steps, time left, its warning), the wait for the
warm spare worker and for a new run's first step, and the live charts of several runs labelled by what differs
between them."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import streamlit as st

from dashboard import server
from dashboard.markdown import plain
from gaccum_core.data.tokenising import TOKENISING
from gaccum_core.runs.labels import created_text, run_label, run_labels
from gaccum_core.states import FAILURE_STATES, RunState, state_line
from gaccum_core.train.metrics import time_left_words
from gaccum_core.views.chart_cache import ChartInput, ChartSet
from gaccum_core.views.colours import run_colours

if TYPE_CHECKING:
    from gaccum_core.execution.runner import Runner
    from gaccum_core.execution.snapshot import RunSnapshot

REFRESH_S = float(os.environ.get("GACCUM_REFRESH_S", "1.0"))  # how often a page follows runs going


def chart_labels(snapshots: list[RunSnapshot]) -> list[str]:
    """Each run's legend text in the live charts: what differs between these runs, its name if it has one,
    and for runs that would still read the same, when each was created."""
    return run_labels([s.config for s in snapshots], [s.name for s in snapshots], [s.run_id for s in snapshots],
                      [s.known for s in snapshots])


def live_charts(snapshots: list[RunSnapshot], x: str, smoothing: float, log_y: frozenset[str]) -> ChartSet:
    """The charts of these runs, labelled by what differs between them and coloured by creation order on
    disk (the same on every page); built once for all sessions."""
    colour = run_colours(server.get_runner().store.list_runs())
    runs = [ChartInput(s.run_id, label, s.metrics, s.evals, colour.get(s.run_id))
            for s, label in zip(snapshots, chart_labels(snapshots))]
    return server.chart_cache().charts(runs, x, smoothing, log_y)


# How often a page whose Start waits for the warm spare worker looks whether it is ready (its one watch
# fragment, at this pace instead of REFRESH_S meanwhile).
WARM_POLL_S = 0.25


def await_first_step(runner: Runner, run_id: str, timeout_s: float = 1.5) -> None:
    """Wait briefly for a new run's first optimizer step, so the page's first draw already plots it
    instead of an empty chart that the next refresh replaces."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = runner.snapshot(run_id)
        behind_another = any(s.state == RunState.RUNNING and s.run_id != run_id for s in runner.snapshots())
        if snapshot.steps_done or snapshot.done or behind_another:
            return
        time.sleep(0.02)


def short_name(snapshot: RunSnapshot) -> str:
    """The run's name if it has one, else when it was created ("run of 14:03:05")."""
    return snapshot.name or created_text(snapshot.run_id)


def _progress_text(snapshot: RunSnapshot) -> str:
    name = plain(f"{run_label(snapshot.config)} · {short_name(snapshot)}")
    config = snapshot.config
    starting = snapshot.state == RunState.RUNNING and not snapshot.steps_done
    if snapshot.state == RunState.QUEUED:
        waits = f", waiting for {plain(snapshot.waiting_for)}" if snapshot.waiting_for else ""
        return f"{name} — queued: position {snapshot.queue_position} on {', '.join(snapshot.devices)}{waits}"
    if starting and snapshot.message.startswith(TOKENISING):
        return f"{name} — {plain(snapshot.message)}"
    if starting and config.compile != "off":
        return f"{name} — compiling the model (torch.compile, mode {config.compile})…"
    if starting and config.world_size > 1:
        return f"{name} — starting {config.world_size} processes (torchrun, {config.sharding.upper()})…"
    if snapshot.state == RunState.RUNNING and not snapshot.total_steps:
        return f"{name} — starting its worker process…"
    text = f"{name} — {snapshot.state}: step {snapshot.steps_done} of {snapshot.total_steps or '?'}"
    return text + (f" · {time_left_words(snapshot.eta_s)}" if snapshot.eta_s is not None else "")


def stepless_line(label: str, state: str, message: str) -> str:
    """What a page says, once, in place of the charts of a run that ended before its first optimizer step."""
    return f"{label}: no charts, it ended before its first optimizer step ({state_line(state, message)})."


def progress(snapshot: RunSnapshot) -> None:
    """A progress bar naming its run, with steps done of total and the time left; the run's warning."""
    st.progress(min(snapshot.steps_done / max(snapshot.total_steps, 1), 1.0), text=_progress_text(snapshot))
    if snapshot.state in FAILURE_STATES:
        st.error(state_line(snapshot.state, snapshot.message))
    elif snapshot.state == RunState.FINISHED and snapshot.message:
        st.warning(f"finished, but {snapshot.message}")
