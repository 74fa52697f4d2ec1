"""Which runs a page can draw: every run on disk by its label, and a run's snapshot whether this server
tracks it or not (None once it was deleted, in another tab, session or process)."""

from __future__ import annotations

import streamlit as st

from gaccum_core.runs.catalog import run_labels
from gaccum_core.runs.integrity import checked_status
from gaccum_core.runs.runner import Runner
from gaccum_core.runs.snapshot import RunSnapshot, disk_snapshot
from gaccum_core.runs.store import RunStore, StoreError


def runs_on_disk(runner: Runner) -> tuple[str, ...]:
    """The ids of the runs in the runs directory, oldest first: cheap enough to poll every second."""
    return tuple(runner.store.list_runs())


def run_choice_labels(store: RunStore) -> dict[str, str]:
    """Every readable run on disk, newest first, labelled as in the charts' legends (what tells it apart
    from the others, its name, when it was created)."""
    readable = {}
    for run_id in reversed(store.list_runs()):
        try:
            readable[run_id] = store.read_config(run_id), checked_status(store.read_status(run_id)).get("name", "")
        except (OSError, StoreError, ValueError):  # damaged, or deleted meanwhile: the Runs page says why
            continue
    ids = list(readable)
    return dict(zip(ids, run_labels([c for c, _ in readable.values()], [n for _, n in readable.values()], ids)))


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
