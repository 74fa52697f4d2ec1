"""Which runs a page can draw: every run on disk by its label, and a run's snapshot whether this server
tracks it or not (None once it was deleted, in another tab, session or process)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import streamlit as st

from dashboard.indexing import indexing_progress
from gaccum_core.runs.catalog import choice_labels, run_choices, run_table
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import RunSnapshot, disk_snapshot
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.states import RunState


# Runs a multiselect offers: Streamlit sends every option to the browser on each draw of the page.
OFFERED = 1_000


def runs_on_disk(runner: Runner) -> tuple[str, ...]:
    """The ids of the runs in the runs directory, oldest first: cheap enough to poll every second."""
    return tuple(runner.store.list_runs())


def last_stopped(runner: Runner) -> str | None:
    """The newest run on disk that was stopped (by the user, or by its server's end) after a step or more: what a
    Train tab with no run of its own offers to resume; None when there is none. Looked for once per session (the
    runs table takes ~0.15 s per 1,000 runs): a run stopped later in another tab is this tab's own already."""
    if "_last_stopped" not in st.session_state:
        table = run_table(runner.store, runner.active_ids(), hide_unstepped=True)
        stopped = table[table["state"].isin([RunState.STOPPED, RunState.INTERRUPTED])] if not table.empty else table
        st.session_state["_last_stopped"] = None if stopped.empty else str(stopped["run_id"].iloc[0])
    return st.session_state["_last_stopped"]


def run_choice_labels(store: RunStore, drawn: Collection[str] = ()) -> dict[str, str]:
    """Every readable run on disk, newest first, labelled as in the charts' legends (what differs and applies, its
    name, when it was created): the runs drawn together (a picked run's chip) by what tells them apart from one
    another, as their legends say it; the others by what tells each apart from every run on disk. From the runs
    index, with a bar while many runs are read into it."""
    choices = run_choices(store, indexing_progress(store))
    labels = dict(zip((choice.run_id for choice in choices), choice_labels(choices)))
    drawn = set(drawn)
    together = tuple(choice for choice in choices if choice.run_id in drawn)
    return labels | dict(zip((choice.run_id for choice in together), choice_labels(together)))


def offered_runs(run_ids: Sequence[str], picked: Iterable[str]) -> list[str]:
    """The first OFFERED of run_ids, in their order (newest first, as the pages list them), then any later one
    already picked."""
    picked = set(picked)
    return [*run_ids[:OFFERED], *(run_id for run_id in run_ids[OFFERED:] if run_id in picked)]


# Streamlit's multiselect keeps its chips on one row that scrolls sideways (the first ones faded out of view) and
# cuts a long chip with an ellipsis: a run's label is what tells it apart, so its chips wrap onto rows, whole.
_WRAPPED_CHIPS = """
.st-key-{key} .react-aria-ComboBox > [role="group"] {{ max-height: none; height: auto; }}
.st-key-{key} [data-testid="stMultiSelectTagsContainer"] {{ flex-wrap: wrap; row-gap: 4px; overflow: visible;
    mask-image: none; padding-top: 4px; padding-bottom: 4px; }}
.st-key-{key} [data-tag] {{ height: auto; min-height: 1.75rem; white-space: normal; }}
.st-key-{key} [data-tag] > span {{ white-space: normal; overflow-wrap: anywhere; text-overflow: clip; }}
"""


def wrap_run_chips(key: str) -> None:
    """Let the chips of the runs picked in the multiselect `key` wrap onto rows, each label whole (a style, which
    takes no room on the page)."""
    st.html(f"<style>{_WRAPPED_CHIPS.format(key=key)}</style>")


def tracked_or_disk(runner: Runner, run_id: str) -> RunSnapshot | None:
    """The run's snapshot from the runner when it tracks it, else from its files; None when it was
    deleted or cannot be read."""
    try:
        return runner.snapshot(run_id)
    except KeyError:
        pass
    try:
        return _disk_snapshot(runner.store, run_id, _stamp(runner.store, run_id))
    except (OSError, StoreError, ValueError):
        return None


def _stamp(store: RunStore, run_id: str) -> tuple[int, ...]:
    """The run's files' versions: a cached snapshot is read again when a file changed."""
    run_dir = store.path(run_id)
    stats = [(run_dir / name).stat() for name in ("status.json", "metrics.csv", "eval.csv")]
    return tuple(v for s in stats for v in (s.st_mtime_ns, s.st_size))


@st.cache_resource(max_entries=64, show_spinner=False)
def _disk_snapshot(_store: RunStore, run_id: str, stamp: tuple[int, ...]) -> RunSnapshot:
    """disk_snapshot, read once per version of the run's files (a finished run's, once)."""
    return disk_snapshot(_store, run_id)
