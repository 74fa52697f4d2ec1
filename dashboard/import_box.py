"""The Runs page's Import box: a folder of another tool's TensorBoard event files read into imported runs, which
are then selected, so that their charts overlay the runs already picked."""

from __future__ import annotations

import streamlit as st

from dashboard.markdown import plain
from gaccum_core.words import plural
from gaccum_core.tensorboard.event_files import EventFilesError
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.tensorboard.importing import import_runs

FOLDER = "import_folder"
_SAID = "_import_said"  # what the last Import did: [(st function name, text)], said once under the box


def import_box(store: RunStore, selected_key: str) -> None:
    """A folder and an Import button in a closed expander, and under it what the last Import did."""
    with st.expander("Import TensorBoard runs (Lightning, Hugging Face Trainer, SummaryWriter)"):
        st.caption("Each folder of event files (events.out.tfevents.*) at or under this one becomes a read-only run "
                   "of state imported: its loss, lr, grad norm and evaluations as gaccum's columns, its hparams as "
                   "settings where they name gaccum's.")
        st.text_input("Folder of event files (on this server's machine)", key=FOLDER,
                      placeholder="e.g. lightning_logs, or a Trainer's output_dir/runs")
        st.button("Import", key="import_runs", on_click=_import, args=(store, selected_key))
    for kind, text in st.session_state.pop(_SAID, []):
        getattr(st, kind)(text)


def _import(store: RunStore, selected_key: str) -> None:
    """Import the folder typed (a button callback, before the table is drawn again: it lists the new runs)."""
    folder = st.session_state.get(FOLDER, "").strip()
    if not folder:
        st.session_state[_SAID] = [("error", "Cannot import: type the folder of the event files first.")]
        return
    try:
        runs, left_out = import_runs(store, folder)
    except (EventFilesError, StoreError) as exc:
        st.session_state[_SAID] = [("error", plain(f"Cannot import: {exc}"))]
        return
    except OSError as exc:  # the runs directory cannot be written
        st.session_state[_SAID] = [("error", plain(f"Cannot import: {exc.strerror or exc} ({exc.filename})"))]
        return
    ids = [run.run_id for run in runs]
    st.session_state[selected_key] = [*st.session_state.get(selected_key, []), *ids]
    said = [("success", plain(f"Imported {plural(len(runs), 'run')}, now selected: "
                              + "; ".join(f"{run.run_id} ({run.summary()})" for run in runs)))]
    st.session_state[_SAID] = said + [("info", plain(line)) for line in left_out]
