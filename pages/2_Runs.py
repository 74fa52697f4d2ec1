"""Runs: every run on disk; overlay the selected ones, compare their settings, export them, delete them."""

import streamlit as st

from gaccum_core.runs.catalog import combined_csv, run_labels, run_table, settings_table
from gaccum_core.train.checkpoint import CheckpointError
from gaccum_core.views.axes import X_AXES
from gaccum_core.views.charts import build_figures
from gaccum_core.views.series import RunSeries
from gaccum_core.runs.integrity import DamagedRun
from gaccum_core.runs.runner import RunBusyError
from gaccum_core.states import RunState
from gaccum_core.runs.store import StoreError, validate_run_id
from dashboard.ui import chart_cache, get_runner, plain, widget

st.set_page_config(page_title="gaccum · Runs", layout="wide")
st.title("Runs")
RESUMABLE = (RunState.STOPPED, RunState.INTERRUPTED, RunState.FAILED)
runner = get_runner()
store = runner.store
if "deleted" in st.session_state:
    st.success(f"Deleted {', '.join(st.session_state.pop('deleted'))}.")
live = [s.run_id for s in runner.snapshots() if not s.done]
table = run_table(store, live)
if table.empty:
    st.info(f"No runs in {store.root.resolve()} yet: start one on the Train page.")
    st.stop()

columns = ["run_id", "name", "state", "label", "dataset", "world_size", "effective_batch", "steps", "final_loss",
           "test_accuracy", "perplexity", "peak_mem_mb", "samples_per_s", "tokens_per_s", "skipped", "lr", "optimizer",
           "created", "message"]
# Language-run columns only when a language run is listed: empty columns for image-only tables say nothing.
text_only = [c for c in ("perplexity", "tokens_per_s") if c in table.columns and table[c].isna().all()]
shown = table[[c for c in columns if c in table.columns and c not in text_only]]
st.dataframe(shown, hide_index=True, width="stretch",
             column_config={"final_loss": st.column_config.NumberColumn(format="%.4f"),
                            "test_accuracy": st.column_config.NumberColumn(format="%.3f"),
                            "peak_mem_mb": st.column_config.NumberColumn(format="%.0f"),
                            "samples_per_s": st.column_config.NumberColumn(format="%.0f"),
                            "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
                            "perplexity": st.column_config.NumberColumn(format="%.2f"),
                            "world_size": st.column_config.NumberColumn(
                                "processes", help="data-parallel processes (DDP world size)")})
# Why a run cannot be read, and where a run is trained, said above the fold (the message column is far right).
for _, row in table[table["state"] == RunState.DAMAGED].iterrows():
    st.warning(plain(f"Damaged: {row['message']}. Delete the run, or repair the file by hand."))
if "message" in table.columns:
    elsewhere = table[(table["state"] == RunState.RUNNING) & ~table["run_id"].isin(live)]
    for _, row in elsewhere.iterrows():
        st.info(plain(f"{row['run_id']} is {row['message']}: stop it there (it cannot be resumed or deleted "
                      "from here meanwhile)."))
linked = st.query_params.get("run")
if linked is not None and "runs_selected" not in st.session_state:
    try:  # ?run=<id> links to one run; the id is checked before any path is built from it
        if validate_run_id(linked) in set(table["run_id"]):
            st.session_state["runs_selected"] = [linked]
        else:
            st.warning(f"No run {linked!r} in {store.root.resolve()}.")
    except StoreError as exc:
        st.error(str(exc))
states = table.set_index("run_id")["state"]
labels = dict(zip(table["run_id"], table["state"] + " · " + table.get("label", table["state"]).fillna("")))
# Runs deleted in another session since this one picked them are dropped from the selection.
if "runs_selected" in st.session_state:
    st.session_state["runs_selected"] = [r for r in st.session_state["runs_selected"] if r in labels]
selected = st.multiselect("Runs to compare, export or delete", list(table["run_id"]), key="runs_selected",
                          format_func=lambda r: f"{r} ({labels[r]})")
readable = [r for r in selected if states[r] != RunState.DAMAGED]
if not selected:
    st.caption("Pick runs above to overlay them, compare their settings, export or delete them.")
    st.stop()

if readable:
    configs = {r: store.read_config(r) for r in readable}
    settings, differing = settings_table(configs)
    st.subheader("Settings")
    st.caption(f"Highlighted: the {len(differing)} settings in which the selected runs differ."
               if len(readable) > 1 and differing else "Every setting of the selected runs.")
    st.dataframe(settings.astype(str).style.apply(
        lambda row: ["background-color: #ffe8cc" if row.name in differing else "" for _ in row], axis=1),
        width="stretch")

    st.subheader("Charts")
    x_axis = widget(st.radio, "x axis", "runs_x", "step", options=list(X_AXES), format_func=X_AXES.get,
                    horizontal=True)
    smoothing = widget(st.slider, "Loss smoothing", "runs_smoothing", 0.6, min_value=0.0, max_value=0.99)
    names = run_labels(list(configs.values()))
    runs = [RunSeries(r, f"{name} · {r[-6:]}", store.read_metrics(r), store.read_evals(r))
            for r, name in zip(readable, names)]
    left, right = st.columns(2)
    for i, (name, figure) in enumerate(build_figures(runs, x_axis, smoothing).items()):
        (left if i % 2 == 0 else right).plotly_chart(figure, key=f"runs_chart_{name}", width="stretch", theme=None)

    st.subheader("Export")
    export_all, export_evals = st.columns(2)
    export_all.download_button(f"Download the metrics of the {len(readable)} selected runs as one CSV",
                               combined_csv(store, readable), file_name="gaccum-runs.csv", mime="text/csv")
    export_evals.download_button(f"Download the evaluations of the {len(readable)} selected runs as one CSV",
                                 combined_csv(store, readable, "evals"), file_name="gaccum-evals.csv",
                                 mime="text/csv")
    for run_id in readable:
        metrics_col, evals_col = st.columns(2)
        metrics_col.download_button(f"{run_id} metrics.csv", store.metrics_csv(run_id),
                                    file_name=f"{run_id}-metrics.csv", mime="text/csv", key=f"dl_m_{run_id}")
        evals_col.download_button(f"{run_id} eval.csv", store.evals_csv(run_id),
                                  file_name=f"{run_id}-eval.csv", mime="text/csv", key=f"dl_e_{run_id}")


def resume(run_id: str) -> None:
    """Queue a run to go on from its checkpoint (a button callback); the message says why it cannot."""
    try:
        runner.resume(run_id)
    except (CheckpointError, DamagedRun, RunBusyError, StoreError, OSError) as exc:
        st.session_state["resume_error"] = f"Cannot resume {run_id}: {exc}"
    else:
        st.session_state["resumed"] = run_id


resumable = [r for r in readable if states[r] in RESUMABLE and r not in live]
if resumable:
    st.subheader("Resume")
    st.caption("A resumed run goes on from its checkpoint.pt in its own directory, exactly as if it had never "
               "stopped (its gradients of a half-done window included); rows after the checkpoint are dropped.")
    for run_id in resumable:
        st.button(f"Resume {run_id} ({states[run_id]})", key=f"resume_{run_id}", on_click=resume, args=(run_id,))
if "resume_error" in st.session_state:
    st.error(st.session_state.pop("resume_error"))
if "resumed" in st.session_state:
    st.success(f"Resumed {st.session_state.pop('resumed')}: it is drawn live on the [Train page](Train).")


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


going = [r for r in selected if r in live]
deletable = [r for r in selected if r not in live]
with st.expander(f"Delete the {len(selected)} selected run{'s' if len(selected) > 1 else ''}"):
    if going:
        st.warning(f"Still going, so not deleted: {', '.join(going)}. Stop them on the Train page first.")
    if deletable and st.checkbox(f"Yes, delete {', '.join(deletable)} and all their files", key="confirm_delete"):
        st.button(f"Delete {len(deletable)} run{'s' if len(deletable) > 1 else ''}", type="primary",
                  key="delete_run", on_click=delete, args=(deletable,))
    if "delete_error" in st.session_state:
        st.error(st.session_state.pop("delete_error"))
