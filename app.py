"""gaccum home: what the app is for, the device found and the latest runs."""

import streamlit as st

from gaccum_core.device import device_name, memory_info, resolve_device
from gaccum_core.store import RunStore

st.set_page_config(page_title="gaccum", layout="wide")
st.title("gaccum")
st.write(
    "Gradient accumulation imitates a large batch with small micro-batches. "
    "gaccum trains with exact accumulation and shows what each option costs and saves."
)
device = resolve_device("auto")
free, total = memory_info(device)
if device.type == "cuda":
    st.info(f"Device: {device_name(device)}: {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB")
else:
    st.info("CPU — runs train on the CPU")
st.subheader("Latest runs")
store = RunStore("runs")
runs = store.list_runs()[-10:][::-1]
if runs:
    st.table([{"run": r, "state": store.read_status(r).get("state", "?")} for r in runs])
else:
    st.write("No runs yet: start one with `python -m gaccum_core run`.")
