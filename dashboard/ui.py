"""Streamlit glue shared by the pages: the per-process runner, persistent widgets, the run controls.

Pages stay thin: they read state, call gaccum_core, draw. Nothing here trains or measures.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any, Callable, Mapping

import streamlit as st

from dashboard import warm
from dashboard.markdown import plain
from gaccum_core.runs.catalog import created_text, run_label, run_labels
from gaccum_core.views.chart_cache import ChartCache, ChartInput, ChartSet
from gaccum_core.views.colours import run_colours
from gaccum_core.config import RunConfig
from gaccum_core.field_help import FIELD_HELP
from gaccum_core.runs.runner import Runner
from gaccum_core.runs.snapshot import RunSnapshot
from gaccum_core.states import FAILURE_STATES, RunState, state_line

REFRESH_S = float(os.environ.get("GACCUM_REFRESH_S", "1.0"))
CHART_TITLES = {"loss": "loss", "accuracy": "accuracy", "perplexity": "perplexity", "scale": "loss scale",
                "skipped": "skipped steps", "grad_norm": "gradient norm", "lr": "learning rate", "memory": "memory",
                "collectives": "collectives", "throughput": "throughput", "cache": "cache clearing"}


# Training runs in a thread of this server. Each torch op releases the GIL, and taking it back waits
# up to the switch interval whenever a page is being drawn: at Python's 5 ms, 150 ms of drawing per
# second made a small model train 3x slower (measured); at 0.5 ms, 1.4x.
TRAINING_SWITCH_INTERVAL_S = 0.0005


@st.cache_resource
def _runner(runs_dir: str, executor: str) -> Runner:
    sys.setswitchinterval(TRAINING_SWITCH_INTERVAL_S)
    return Runner(runs_dir, executor=executor, confined=True)  # your own code: only in workers, only GACCUM_USER_CODE's


def get_runner() -> Runner:
    """One runner per server process and runs directory (GACCUM_RUNS_DIR, default ./runs): every
    browser session and tab sees the same runs. Runs train in worker processes unless
    GACCUM_EXECUTOR=thread (then in this server's threads)."""
    return _runner(warm.runs_dir(), warm.executor())


def keep(key: str, default: Any) -> None:
    """Restore a widget's value from a permanent key: Streamlit deletes widget keys on page switches."""
    permanent = f"_keep_{key}"
    if permanent not in st.session_state:
        st.session_state[permanent] = default
    st.session_state[key] = st.session_state[permanent]


def _store(key: str) -> None:
    st.session_state[f"_keep_{key}"] = st.session_state[key]


# sprintf-js's %g without a precision prints the number itself (0.9999, 1e-7, 1000): a number box shows
# what runs, where Streamlit's default %0.2f shows momentum 0.9999 as 1.00.
EXACT_FORMAT = "%g"


def _whole(value: Any) -> Any:
    """A whole number typed into a float box as an int (1e3 is 1000); anything else as it came, for the
    page's check to refuse by name."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def _number_box(default: Any, kwargs: dict[str, Any]) -> bool:
    """Set a number box to show its value exactly; True for an integer one, which is drawn as a float box
    because the browser reads an integer box with parseInt ("1e3" would be 1)."""
    kwargs.setdefault("format", EXACT_FORMAT)
    whole = isinstance(default, int) and not isinstance(default, bool)
    if whole:
        for name in ("step", "min_value", "max_value"):
            if kwargs.get(name) is not None:
                kwargs[name] = float(kwargs[name])
        kwargs.setdefault("step", 1.0)
    return whole


def widget(draw: Callable[..., Any], label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """Draw a widget whose value survives reruns and page switches; help text from FIELD_HELP. A number
    box shows its value exactly, and an integer one takes 1e3 as 1000 (2.5 comes back as 2.5, to refuse)."""
    whole = draw is st.number_input and _number_box(default, kwargs)
    keep(key, default)
    kwargs.setdefault("help", FIELD_HELP.get(key.removeprefix("cfg_")))
    value = draw(label, key=key, on_change=_store, args=(key,), **kwargs)
    return _whole(value) if whole else value


class FieldWidgets:
    """Widgets named by a field (a RunConfig field or a page's own), each followed by an empty slot for
    the message that refuses its value; keys are prefix + field. A widget's default is the one given,
    else the field's value in `defaults`; its help is FIELD_HELP's text unless the page has its own words."""

    def __init__(self, prefix: str, labels: Mapping[str, str], defaults: Any = None) -> None:
        self.prefix, self.labels, self.defaults = prefix, labels, defaults
        self.values: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}

    def add(self, field: str, draw: Callable[..., Any], default: Any = None, **kwargs: Any) -> Any:
        """One widget for `field`, kept across reruns and page switches, then its (empty) message slot."""
        if default is None:
            default = getattr(self.defaults, field)
        kwargs.setdefault("help", FIELD_HELP.get(field))
        self.values[field] = widget(draw, self.labels[field], self.prefix + field, default, **kwargs)
        self.slots[field] = st.empty()
        return self.values[field]

    def error(self, field: str, message: str) -> None:
        """Show a message under the widget of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).error(message)

    def warn(self, field: str, message: str) -> None:
        """Show a warning under the widget of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).warning(message)


def session_runs(runner: Runner) -> list[str]:
    """Run ids started from this browser session, oldest first; runs deleted since are dropped, and
    named once in session_state["deleted_elsewhere"] for the page to say so."""
    runs = st.session_state.setdefault("session_runs", [])
    gone = [run_id for run_id in runs if not runner.knows(run_id)]
    if gone:
        st.session_state.setdefault("deleted_elsewhere", []).extend(gone)
        runs[:] = [run_id for run_id in runs if run_id not in gone]
    return runs


def adopt_settings(config: RunConfig, prefix: str = "cfg_") -> bool:
    """Give a fresh session's controls the settings of `config` (a run in progress); False if the
    session already has its own settings, which are then left alone."""
    fields = dataclasses.asdict(config)
    if any(f"_keep_{prefix}{name}" in st.session_state for name in fields):
        return False
    for name, value in fields.items():
        st.session_state[f"_keep_{prefix}{name}"] = value
    return True


@st.cache_resource
def chart_cache() -> ChartCache:
    """One chart cache per server process: every session and tab shares the charts it builds."""
    return ChartCache()


def chart_labels(snapshots: list[RunSnapshot]) -> list[str]:
    """Each run's legend text in the live charts: what differs between these runs, its name if it has one,
    and for runs that would still read the same, when each was created."""
    return run_labels([s.config for s in snapshots], [s.name for s in snapshots], [s.run_id for s in snapshots])


def colours() -> dict[str, str]:
    """Each run's colour from its creation order among the runs on disk: the same on every page."""
    return run_colours(get_runner().store.list_runs())


def live_charts(snapshots: list[RunSnapshot], x: str, smoothing: float, log_y: frozenset[str]) -> ChartSet:
    """The charts of these runs, labelled by what differs between them; built once for all sessions."""
    colour = colours()
    runs = [ChartInput(s.run_id, label, s.metrics, s.evals, colour.get(s.run_id))
            for s, label in zip(snapshots, chart_labels(snapshots))]
    return chart_cache().charts(runs, x, smoothing, log_y)


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


def format_eta(seconds: float | None) -> str:
    """'1 min 05 s left', or an empty string before there is an estimate."""
    if seconds is None:
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s left" if minutes else f"{secs} s left"


def progress(snapshot: RunSnapshot) -> None:
    """A progress bar naming its run, with steps done of total and the time left; the run's warning."""
    total = max(snapshot.total_steps, 1)
    name = plain(f"{run_label(snapshot.config)} · {short_name(snapshot)}")
    text = f"{name} — {snapshot.state}: step {snapshot.steps_done} of {snapshot.total_steps or '?'}"
    if snapshot.state == RunState.QUEUED:
        text = f"{name} — queued: position {snapshot.queue_position} on this device"
    elif snapshot.state == RunState.RUNNING and not snapshot.steps_done and snapshot.config.compile != "off":
        text = f"{name} — compiling the model (torch.compile, mode {snapshot.config.compile})…"
    elif snapshot.state == RunState.RUNNING and not snapshot.steps_done and snapshot.config.world_size > 1:
        text = (f"{name} — starting {snapshot.config.world_size} processes "
                f"(torchrun, {snapshot.config.sharding.upper()})…")
    elif snapshot.state == RunState.RUNNING and not snapshot.total_steps:
        text = f"{name} — starting its worker process…"
    elif snapshot.eta_s is not None:
        text += f" · {format_eta(snapshot.eta_s)}"
    st.progress(min(snapshot.steps_done / total, 1.0), text=text)
    if snapshot.state in FAILURE_STATES:
        st.error(state_line(snapshot.state, snapshot.message))
    elif snapshot.state == RunState.FINISHED and snapshot.message:
        st.warning(f"finished, but {snapshot.message}")


def config_from(values: dict[str, Any]) -> RunConfig:
    """A RunConfig from the page's widget values (keys without the cfg_ prefix)."""
    return RunConfig(**values)
