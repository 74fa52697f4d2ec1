"""The Runs page's table: filters, rows clicked to select runs (kept in step with the multiselect and the
?run= link), the progress and Stop of the runs going, and the tags of the selected runs.

The selection lives in st.session_state["runs_selected"] (the multiselect's key). A click in the table
changes the table's own state ("runs_table"); each draw turns a click into runs_selected, then draws the
table with runs_selected's rows selected, so either widget can change the selection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import streamlit as st

from gaccum_core.runs.catalog import all_tags
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore, StoreError, parse_tags
from gaccum_core.views.run_table import COLUMN_HELP, COLUMN_TITLES, shown_columns, shown_rows, unstepped_note
from dashboard.markdown import plain
from dashboard.live import progress

if TYPE_CHECKING:
    import pandas as pd

SELECTED, TABLE = "runs_selected", "runs_table"  # the multiselect's key and the table's
COLUMN_CONFIG = {
    "progress": st.column_config.ProgressColumn("progress", help="steps done of the run's total", format="percent",
                                                min_value=0.0, max_value=1.0),
    "tags": st.column_config.ListColumn("tags", help="your tags: set them under Tags when the run is selected",
                                        width="medium"),
    "final_loss": st.column_config.NumberColumn(format="%.4f", help=COLUMN_HELP["final_loss"]),
    "test_accuracy": st.column_config.NumberColumn(format="%.3f"),
    "peak_train_mem_mb": st.column_config.NumberColumn(COLUMN_TITLES["peak_train_mem_mb"], format="%.3g",
                                                       help=COLUMN_HELP["peak_train_mem_mb"]),
    "samples_per_s": st.column_config.NumberColumn(format="%.0f"),
    "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
    "perplexity": st.column_config.NumberColumn(format="%.2f"),
    "world_size": st.column_config.NumberColumn("processes", help="data-parallel processes (DDP world size)"),
}


@dataclass(frozen=True)
class RunFilter:
    """What the table is narrowed to: text in a run's id, name, label, tags or message; states; tags."""

    text: str = ""
    states: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def apply(self, table: pd.DataFrame) -> pd.DataFrame:
        """The runs that pass, newest first, those that ended before their first step last."""
        return shown_rows(table, self.text, self.states, self.tags)


def draw_filter(table: pd.DataFrame) -> RunFilter:
    """A row of filter widgets (text, state, tag) over the runs in the table."""
    text_col, state_col, tag_col = st.columns([2, 1, 1])
    text = text_col.text_input("Filter runs", key="runs_filter_text", placeholder="id, name, settings, tag, message")
    states = state_col.multiselect("State", sorted(set(table["state"])), key="runs_filter_states")
    tags = tag_col.multiselect("Tags (every one)", all_tags(table), key="runs_filter_tags")
    return RunFilter(text, tuple(states), tuple(tags))


def picked_runs(selected: Sequence[str], shown: Sequence[str], rows: Sequence[int]) -> list[str]:
    """The selection after a click left `rows` of the table `shown` selected: the runs the filter hides
    stay selected, the shown ones are those clicked."""
    hidden = [r for r in selected if r not in set(shown)]
    return hidden + [shown[i] for i in sorted(rows) if 0 <= i < len(shown)]


def rows_of(selected: Sequence[str], shown: Sequence[str]) -> list[int]:
    """The rows of the table `shown` that hold selected runs."""
    chosen = set(selected)
    return [i for i, run_id in enumerate(shown) if run_id in chosen]


def _rows(state: object) -> list[int] | None:
    """The rows a table's state selects; None when the table has no state (not drawn since a page switch)."""
    if not isinstance(state, Mapping):
        return None
    selection = state.get("selection")
    return sorted(selection.get("rows", [])) if isinstance(selection, Mapping) else []


def sync_selection(shown: list[str]) -> bool:
    """Take a click in the table since its last draw into the selection, then select the selection's
    rows in the table about to be drawn; True when a click changed the selection."""
    state = st.session_state
    drawn, drawn_rows = state.get("_runs_table_ids", []), state.get("_runs_table_rows")
    clicked = _rows(state.get(TABLE))
    changed = clicked is not None and drawn_rows is not None and clicked != drawn_rows
    if changed:  # the rows refer to the table as it was drawn, which a refresh may have changed since
        state[SELECTED] = picked_runs(state.get(SELECTED, []), drawn, clicked)
    rows = rows_of(state.get(SELECTED, []), shown)
    state[TABLE] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    state["_runs_table_ids"], state["_runs_table_rows"] = shown, rows
    return changed


def draw_table(shown: pd.DataFrame) -> None:
    """The runs as a table whose rows select runs when clicked."""
    st.dataframe(shown[shown_columns(shown)], hide_index=True, width="stretch", column_config=COLUMN_CONFIG, key=TABLE,
                 on_select="rerun", selection_mode="multi-row")
    note = unstepped_note(shown)
    if note:
        st.caption(note)


def _stop(runner: Runner, run_id: str) -> None:
    """Ask a run to stop (a button callback): it ends within a micro-batch, or at once if not yet started."""
    try:
        runner.stop(run_id)
    except KeyError:  # deleted meanwhile, in another session
        pass


def progress_with_stop(runner: Runner, selected: set[str]) -> None:
    """A progress bar (steps, time left) for each run the runner has going, with its Stop button, and for
    each selected run it ran here, which says how it ended."""
    for snapshot in runner.snapshots():
        if snapshot.done and snapshot.run_id not in selected:
            continue
        bar, button = st.columns([6, 1], vertical_alignment="bottom")
        with bar:
            progress(snapshot)
        if not snapshot.done:
            button.button("Stop", key=f"stop_{snapshot.run_id}", on_click=_stop, args=(runner, snapshot.run_id))


def _save_tags(store: RunStore, run_id: str) -> None:
    """Write the tags typed for a run (a text box's callback); a refused tag is said under the box."""
    try:
        store.write_tags(run_id, parse_tags(st.session_state[f"tags_{run_id}"]))
    except (StoreError, OSError) as exc:
        st.session_state[f"tags_error_{run_id}"] = plain(f"Tags of {run_id} not saved: {exc}")


def tags_editor(store: RunStore, tags: Mapping[str, Sequence[str]]) -> None:
    """A text box per run with its tags, comma-separated; each saved as it is changed."""
    for run_id, own in tags.items():
        key = f"tags_{run_id}"
        if key not in st.session_state:
            st.session_state[key] = ", ".join(own)
        st.text_input(plain(f"Tags of {run_id}"), key=key, on_change=_save_tags, args=(store, run_id),
                      placeholder="e.g. baseline, fp16", help="comma-separated; letters, digits and _ . : + = -")
        error = st.session_state.pop(f"tags_error_{run_id}", None)
        if error:
            st.error(error)
