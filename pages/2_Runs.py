"""Runs: every run on disk; overlay the selected ones, export them as CSV, delete one."""

import streamlit as st

from gaccum_core.catalog import combined_csv, run_label, run_table
from gaccum_core.charts import X_AXES, RunSeries, build_figures
from gaccum_core.states import RunState
from gaccum_core.store import StoreError, validate_run_id
from ui import get_runner, widget

st.set_page_config(page_title="gaccum · Runs", layout="wide")
st.title("Runs")
runner = get_runner()
store = runner.store
live = [s.run_id for s in runner.snapshots() if not s.done]
table = run_table(store, live)
if table.empty:
    st.info(f"No runs in {store.root.resolve()} yet: start one on the Train page.")
    st.stop()

columns = ["run_id", "state", "label", "effective_batch", "steps", "final_loss", "test_accuracy",
           "peak_mem_mb", "samples_per_s", "skipped", "lr", "optimizer", "created", "message"]
shown = table[[c for c in columns if c in table.columns]]
st.dataframe(shown, hide_index=True, width="stretch",
             column_config={"final_loss": st.column_config.NumberColumn(format="%.4f"),
                            "test_accuracy": st.column_config.NumberColumn(format="%.3f"),
                            "peak_mem_mb": st.column_config.NumberColumn(format="%.0f"),
                            "samples_per_s": st.column_config.NumberColumn(format="%.0f")})
linked = st.query_params.get("run")
if linked is not None and "runs_selected" not in st.session_state:
    try:  # ?run=<id> links to one run; the id is checked before any path is built from it
        if validate_run_id(linked) in set(table["run_id"]):
            st.session_state["runs_selected"] = [linked]
        else:
            st.warning(f"No run {linked!r} in {store.root.resolve()}.")
    except StoreError as exc:
        st.error(str(exc))
labels = dict(zip(table["run_id"], table["state"] + " · " + table.get("label", table["state"]).fillna("")))
selected = st.multiselect("Runs to compare, export or delete", list(table["run_id"]), key="runs_selected",
                          format_func=lambda r: f"{r} ({labels[r]})")
readable = [r for r in selected if table.set_index("run_id").loc[r, "state"] != RunState.DAMAGED]
if not selected:
    st.caption("Pick runs above to overlay them, export them or delete one.")
    st.stop()

if readable:
    export_one, export_all = st.columns(2)
    first = readable[0]
    export_one.download_button(f"Download {first} metrics.csv", store.metrics_csv(first),
                               file_name=f"{first}-metrics.csv", mime="text/csv")
    export_all.download_button(f"Download the {len(readable)} selected runs as one CSV",
                               combined_csv(store, readable), file_name="gaccum-runs.csv", mime="text/csv")
    x_axis = widget(st.radio, "x axis", "runs_x", "step", options=list(X_AXES), format_func=X_AXES.get,
                    horizontal=True)
    smoothing = widget(st.slider, "Loss smoothing", "runs_smoothing", 0.6, min_value=0.0, max_value=0.99)
    runs = [RunSeries(r, f"{run_label(store.read_config(r))} · {r[-6:]}", store.read_metrics(r),
                      store.read_evals(r)) for r in readable]
    left, right = st.columns(2)
    for i, (name, figure) in enumerate(build_figures(runs, x_axis, smoothing).items()):
        (left if i % 2 == 0 else right).plotly_chart(figure, key=f"runs_chart_{name}", width="stretch", theme=None)



def delete(run_id: str) -> None:
    """Delete a run (a button callback: it runs before the widgets it changes are drawn)."""
    try:
        store.delete(run_id)
    except (StoreError, OSError) as exc:
        st.session_state["delete_error"] = str(exc)
        return
    st.session_state["runs_selected"] = [r for r in st.session_state["runs_selected"] if r != run_id]
    st.session_state["confirm_delete"] = False


with st.expander(f"Delete {selected[0]}"):
    if selected[0] in live:
        st.warning("This run is still going: stop it on the Train page first.")
    elif st.checkbox(f"Yes, delete {selected[0]} and all its files", key="confirm_delete"):
        st.button("Delete", type="primary", key="delete_run", on_click=delete, args=(selected[0],))
    if "delete_error" in st.session_state:
        st.error(st.session_state.pop("delete_error"))
