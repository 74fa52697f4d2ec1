"""A progress bar while many runs are read into the runs index (gaccum_core.runs.index): once for a runs
directory never indexed (or indexed by another version of gaccum), or when many runs were copied in."""

from __future__ import annotations

from typing import Callable

import streamlit as st

from gaccum_core.runs.store import RunStore

SHOWN_FROM = 200  # runs to read (about half a second and more) before a bar is worth showing


def indexing_progress(store: RunStore) -> Callable[[int, int], None]:
    """A run_table progress callback that draws a bar here when there are SHOWN_FROM runs or more to read,
    with runs read / to read, and takes it away when the last is read."""
    bar = None

    def report(done: int, total: int) -> None:
        nonlocal bar
        if total < SHOWN_FROM:
            return
        if bar is None:
            bar = st.empty()
        if done >= total:
            bar.empty()
            return
        bar.progress(done / total, text=f"Indexing the runs in {store.root.resolve()}: {done:,} of {total:,} read. "
                                        "Only this once: later visits read only the runs that change.")

    return report
