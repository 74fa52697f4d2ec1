"""Runs: every run on disk, live; filter and tag them; click rows to overlay, compare, export, delete,
resume or stop them."""

import streamlit as st

from gaccum_core.words import plural
from gaccum_core.runs.catalog import run_table, settings_table, unstepped
from gaccum_core.runs.labels import run_labels
from gaccum_core.runs.run_data import read_runs, tables_csv
from gaccum_core.train.checkpoint import CheckpointError
from gaccum_core.views.axes import X_AXES
from gaccum_core.views.applicable import not_applicable
from gaccum_core.views.charts import build_figures
from gaccum_core.views.coinciding import coinciding
from gaccum_core.views.colours import run_colours
from gaccum_core.views.series import RunSeries
from gaccum_core.runs.files import run_error_words
from gaccum_core.runs.integrity import DamagedRun
from gaccum_core.execution.resume import RESUMABLE, resume_refusal
from gaccum_core.execution.runner import RunBusyError
from gaccum_core.states import RunState
from gaccum_core.runs.store import StoreError, validate_run_id
from gaccum_core.tensorboard.importing import NOT_RESUMABLE
from gaccum_core.views.run_table import damaged, going, pick_words, running_elsewhere, states as run_states
from dashboard.runs_table import (SELECTED, RunFilter, draw_filter, draw_table, progress_with_stop, sync_selection,
                                  tags_editor)
from dashboard.import_box import import_box
from dashboard.indexing import indexing_progress
from dashboard.markdown import plain
from dashboard.run_picks import OFFERED, offered_runs, wrap_run_chips
from dashboard.live import REFRESH_S, stepless_line
from dashboard.server import chart_cache, get_runner
from dashboard.state import widget

st.set_page_config(page_title="gaccum · Runs", layout="wide")
st.title("Runs")
runner = get_runner()
store = runner.store
if "deleted" in st.session_state:
    st.success(plain(f"Deleted {', '.join(st.session_state.pop('deleted'))}."))


def live_ids() -> list[str]:
    """The runs this server's runner has queued or running."""
    return [s.run_id for s in runner.snapshots() if not s.done]


live = live_ids()
table = run_table(store, live, progress=indexing_progress(store))  # a bar while many runs are read into the index
if table.empty:
    st.info(f"No runs in {store.root.resolve()} yet: start one on the Train page, or import TensorBoard runs.")
    import_box(store, SELECTED)
    st.stop()

# Why a run cannot be read, and where a run is trained, said above the fold (the message column is far right).
for message in damaged(table):
    st.warning(plain(f"Damaged: {message}. Delete the run, or repair the file by hand."))
for run_id, where in running_elsewhere(table, live):
    st.info(plain(f"{run_id} is {where}: stop it there (it cannot be resumed or deleted from here meanwhile)."))
linked = st.query_params.get_all("run")
if linked and SELECTED not in st.session_state:
    try:  # ?run=<id> links to a run, ?run=<id>,<id> or ?run=<id>&run=<id> to several; each id checked before any path
        ids = list(dict.fromkeys(validate_run_id(run_id) for text in linked for run_id in text.split(",")))
        st.session_state[SELECTED] = [run_id for run_id in ids if run_id in set(table["run_id"])]
        for missing in (run_id for run_id in ids if run_id not in set(table["run_id"])):
            st.warning(plain(f"No run {missing!r} in {store.root.resolve()}."))
    except StoreError as exc:
        st.error(plain(str(exc)))
states = run_states(table)
labels = pick_words(table)


def say_removed(run_ids: list[str]) -> None:
    """Say, once per run, that a selected run was deleted (in another tab, session or process) as this page drew."""
    told = st.session_state.setdefault("_runs_removed_told", set())
    if any(r not in told for r in run_ids):
        st.info(f"No longer shown, removed meanwhile (deleted in another tab, session or process): "
                f"{plain(', '.join(run_ids))}.")
    told.update(run_ids)


# Runs deleted since this session picked them leave the selection.
if SELECTED in st.session_state:
    say_removed([r for r in st.session_state[SELECTED] if r not in labels])
    st.session_state[SELECTED] = [r for r in st.session_state[SELECTED] if r in labels]
run_filter = draw_filter(table)


@st.fragment(run_every=REFRESH_S if going(table) or live else None)
def runs_now(first: list, shown_filter: RunFilter) -> None:
    """The table, and under it a progress bar with Stop for each run this server trains, refreshed while runs
    go. first holds the page's table for its first draw; each refresh reads the runs again. What a selection
    adds goes under the table: above it, it would move the rows as they are clicked."""
    now = first.pop() if first else run_table(store, live_ids())
    shown = shown_filter.apply(now)
    clicked = sync_selection(list(shown["run_id"]))
    draw_table(shown)
    progress_with_stop(runner, set(st.session_state.get(SELECTED, [])) & set(now["run_id"]))
    # A click, or a run that started or ended, changes what the rest of the page shows: draw it all again.
    if clicked or going(now) != st.session_state.get("_runs_going"):
        st.rerun()


@st.fragment(run_every=REFRESH_S)
def watch() -> None:
    """Every second: when a run starts or ends in this server (another tab, another page), draw the page again."""
    if runner.active_ids() != st.session_state.get("_runs_active"):
        st.rerun()


st.session_state["_runs_going"], st.session_state["_runs_active"] = going(table), runner.active_ids()
runs_now([table], run_filter)
watch()
import_box(store, SELECTED)  # under the table: its rows never move
wrap_run_chips(SELECTED)
in_table = list(table["run_id"])
# Streamlit sends every option to the browser on each draw: the table's first OFFERED runs, and any picked.
selected = st.multiselect("Runs to compare, export or delete (or click their rows)",
                          offered_runs(in_table, st.session_state.get(SELECTED, [])), key=SELECTED,
                          format_func=lambda r: f"{r} ({labels[r]})")
if len(in_table) > OFFERED:
    st.caption(f"The table's first {OFFERED:,} of {len(in_table):,} runs are offered here; click a row of the table "
               "(its filter finds any run) to pick another.")
# Each selected run's files are read once here: one deleted while the page draws is said removed, the rest drawn.
runs_data, removed = read_runs(store, [r for r in selected if states[r] != RunState.DAMAGED])
say_removed(removed)
selected = [r for r in selected if r not in removed]
readable = list(runs_data)
if not selected:
    st.caption("Click rows of the table (or pick runs above) to overlay them, compare their settings, tag, "
               "export or delete them.")
    st.stop()

if readable:
    st.subheader("Tags")
    tags_editor(store, {r: tags for r, tags in zip(table["run_id"], table["tags"]) if r in readable})

    configs = {r: runs_data[r].config for r in readable}
    known = {r: runs_data[r].known for r in readable}  # an imported run's settings: only those its hparams named
    settings, differing = settings_table(configs, {r: runs_data[r].weights for r in readable},  # and where each began
                                         known, {r: runs_data[r].norm_c for r in readable})  # and its C
    st.subheader("Settings")
    st.caption(f"Highlighted: the {len(differing)} settings in which the selected runs differ."
               if len(readable) > 1 and differing else "Every setting of the selected runs.")
    st.dataframe(settings.astype(str).style.apply(
        lambda row: ["background-color: #ffe8cc" if row.name in differing else "" for _ in row], axis=1),
        width="stretch")

    st.subheader("Charts")
    # Named as on the Train page (what differs, the run's name, when made), coloured by creation order on disk.
    names = dict(zip(table["run_id"], table["name"].fillna("")))
    legends = run_labels(list(configs.values()), [names[r] for r in readable], readable, list(known.values()))
    colour = run_colours(store.list_runs())
    runs = [RunSeries(r, legend, runs_data[r].metrics, runs_data[r].evals, colour.get(r))
            for r, legend in zip(readable, legends)]
    ended_stepless = table.loc[unstepped(table)].set_index("run_id")["message"].fillna("")
    for run in (r for r in runs if r.run_id in ended_stepless):  # said once, instead of charts that wait forever
        why = "" if runner.knows(run.run_id) else ended_stepless[run.run_id]  # else its progress, above, says why
        st.caption(stepless_line(plain(run.label), states[run.run_id], why))
    runs = [r for r in runs if r.run_id not in ended_stepless]
    if runs:
        x_axis = widget(st.radio, "x axis", "runs_x", "step", options=list(X_AXES), format_func=X_AXES.get,
                        horizontal=True)
        smoothing = widget(st.slider, "Smoothing (loss, throughput)", "runs_smoothing", 0.6, min_value=0.0,
                           max_value=0.99)
        figures = build_figures(runs, x_axis, smoothing)
        for group in coinciding(runs):  # as the Train page says it
            st.caption(group.sentence([plain(label) for label in group.labels]))
        skipped = not_applicable(runs, tuple(figures))  # said in a line each, as on the Train page
        left, right = st.columns(2)
        for i, (name, figure) in enumerate((n, f) for n, f in figures.items() if n not in skipped):
            (left if i % 2 == 0 else right).plotly_chart(figure, key=f"runs_chart_{name}", width="stretch", theme=None)
        for line in skipped.values():
            st.caption(line)

    st.subheader("Export")
    export_all, export_evals = st.columns(2)
    export_all.download_button(f"Download the metrics of the {plural(len(readable), 'selected run')} as one CSV",
                               tables_csv({r: (runs_data[r].config, runs_data[r].metrics) for r in readable}),
                               file_name="gaccum-runs.csv", mime="text/csv")
    export_evals.download_button(f"Download the evaluations of the {plural(len(readable), 'selected run')} as one CSV",
                                 tables_csv({r: (runs_data[r].config, runs_data[r].evals) for r in readable}),
                                 file_name="gaccum-evals.csv",
                                 mime="text/csv")
    for run_id in readable:
        metrics_col, evals_col = st.columns(2)
        metrics_col.download_button(plain(f"{run_id} metrics.csv"), runs_data[run_id].metrics_csv,
                                    file_name=f"{run_id}-metrics.csv", mime="text/csv", key=f"dl_m_{run_id}")
        evals_col.download_button(plain(f"{run_id} eval.csv"), runs_data[run_id].evals_csv,
                                  file_name=f"{run_id}-eval.csv", mime="text/csv", key=f"dl_e_{run_id}")


def resume(run_id: str) -> None:
    """Queue a run to go on from its checkpoint (a button callback); the message says why it cannot."""
    try:
        runner.resume(run_id)
    except (CheckpointError, DamagedRun, RunBusyError, StoreError, OSError) as exc:
        words = run_error_words(runner.store.path(run_id), exc)
        st.session_state["resume_error"] = f"Cannot resume {plain(run_id)}: {words}"
    else:
        st.session_state["resumed"] = run_id


resumable = [r for r in readable if states[r] in RESUMABLE and r not in live]
if resumable:
    st.subheader("Resume")
    st.caption("A resumed run goes on from its checkpoint.pt in its own directory, exactly as if it had never "
               "stopped (its gradients of a half-done window included); rows after the checkpoint are dropped.")
    for run_id in resumable:  # Resume where checkpoint.pt is there and config.json reads; else why not
        refused = resume_refusal(store, run_id)
        if refused:
            st.caption(plain(refused))
        else:
            st.button(f"Resume {plain(run_id)} ({states[run_id]})", key=f"resume_{run_id}", on_click=resume,
                      args=(run_id,))
for run_id in (r for r in readable if states[r] == RunState.IMPORTED):  # no Resume: said why instead
    st.caption(plain(f"{run_id} {NOT_RESUMABLE}."))
if "resume_error" in st.session_state:
    st.error(st.session_state.pop("resume_error"))
if "resumed" in st.session_state:
    st.success(f"Resumed {plain(st.session_state.pop('resumed'))}: its progress is shown under the table; the "
               "[Train page](Train) draws its charts live.")


def delete(run_ids: list[str]) -> None:
    """Delete runs (a button callback: it runs before the widgets it changes are drawn)."""
    deleted, errors = [], []
    for run_id in run_ids:
        try:
            runner.delete(run_id)
            deleted.append(run_id)
        except (RunBusyError, StoreError, OSError) as exc:
            errors.append(str(exc))
    chart_cache().forget(deleted)  # the Train page's live charts of these runs, shared by every session
    st.session_state["runs_selected"] = [r for r in st.session_state["runs_selected"] if r not in deleted]
    st.session_state["confirm_delete"] = False
    if deleted:
        st.session_state["deleted"] = deleted
    if errors:
        st.session_state["delete_error"] = "; ".join(errors)


unstopped = [r for r in selected if r in live]
deletable = [r for r in selected if r not in live]
with st.expander(f"Delete the {len(selected)} selected run{'s' if len(selected) > 1 else ''}"):
    if unstopped:
        st.warning(f"Still going, so not deleted: {plain(', '.join(unstopped))}. Stop them first (Stop, under the "
                   "table).")
    confirm = f"Yes, delete {plain(', '.join(deletable))} and all their files"
    if deletable and st.checkbox(confirm, key="confirm_delete"):
        st.button(f"Delete {len(deletable)} run{'s' if len(deletable) > 1 else ''}", type="primary",
                  key="delete_run", on_click=delete, args=(deletable,))
    if "delete_error" in st.session_state:
        st.error(st.session_state.pop("delete_error"))
