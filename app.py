"""gaccum home: what the app is for, the device found, the run in progress and the latest runs."""

import streamlit as st

from gaccum_core.runs.catalog import run_table
from gaccum_core.train.device import device_name, memory_info, resolve_device
from dashboard.ui import get_runner

st.set_page_config(page_title="gaccum", layout="wide")
st.title("gaccum")
st.write(
    "Gradient accumulation imitates a large batch with small micro-batches, at the memory cost of one "
    "micro-batch. gaccum trains with exact accumulation, checked against the one-big-batch update, and "
    "measures what mixed precision, cache clearing and torch.compile cost and save."
)
device = resolve_device("auto")
if device.type == "cuda":
    free, total = memory_info(device)
    st.info(f"Device: {device_name(device)} · {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB")
else:
    st.info("CPU — runs train on the CPU")

runner = get_runner()
active = [s for s in runner.snapshots() if not s.done]
for snapshot in active:
    st.success(f"In progress: {snapshot.run_id} ({snapshot.state}, step {snapshot.steps_done} of "
               f"{snapshot.total_steps or '?'})")
st.page_link("pages/1_Train.py", label="Train: configure and watch a run", icon="▶️")
st.page_link("pages/2_Runs.py", label="Runs: compare, export, delete", icon="📊")
st.page_link("pages/3_Equivalence.py", label="Equivalence: accumulated vs one big batch, on your model", icon="⚖️")
st.page_link("pages/4_Pitfalls.py", label="Pitfalls: the classic accumulation bugs, side by side", icon="🐞")
st.page_link("pages/5_Plan.py", label="Plan: the largest micro-batch that fits a memory budget", icon="📐")

st.subheader("Latest runs")
table = run_table(runner.store, [s.run_id for s in active])
if table.empty:
    st.write("No runs yet.")
else:
    columns = [c for c in ("run_id", "state", "label", "dataset", "steps", "final_loss", "test_accuracy")
               if c in table]
    # Each run links to itself on the Runs page (whose ?run= is validated there).
    latest = table[columns].head(10).assign(open=lambda t: "Runs?run=" + t["run_id"])
    st.dataframe(latest, hide_index=True, width="stretch",
                 column_config={"open": st.column_config.LinkColumn("open", display_text="open on Runs")})
