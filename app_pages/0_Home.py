"""gaccum home: what the app is for, the device found, the runs in progress and the latest runs.

Drawn without torch: the device line fills in when the server's warm-up (started at the end of this
page) has found it, and the runs come from the runs directory until the runner is up. Each visit looks at
the devices again (every GPU's free memory, the run on it): the line redraws when that look is back."""

import streamlit as st

from dashboard import server
from dashboard.markdown import plain
from dashboard.nav import PAGES
from dashboard.indexing import indexing_progress
from dashboard.prefetch import prefetch_train_page
from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.index_place import describe as describe_index
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState
from gaccum_core.views.run_table import COLUMN_HELP

REFRESH_S = 1.0
LOOK_WAIT_S = 0.2

st.set_page_config(page_title="gaccum", layout="wide")
st.title("gaccum")
st.write(
    "Gradient accumulation imitates a large batch with small micro-batches, at the memory cost of one "
    "micro-batch. gaccum trains with exact accumulation, checked against the one-big-batch update, and "
    "measures what mixed precision, cache clearing and torch.compile cost and save."
)
for entry in PAGES[1:]:
    st.page_link(entry.script, label=f"{entry.title}: {entry.blurb}", icon=entry.icon)


def _active(runner) -> list:
    return [s for s in runner.snapshots() if not s.done] if runner is not None else []


def _watching(runner) -> bool:
    """Whether the status redraws itself: during the warm-up, a look at the devices or a run."""
    return not server.ready() or server.devices_looking() or bool(_active(runner))


def _device_line(active: list) -> str:
    """Each device on a line of its own, with the run on it; 'checking…' until the warm-up has looked."""
    runs = {device: s.name or s.run_id for s in active if s.state == RunState.RUNNING for device in s.devices}
    lines = server.device_lines(runs)
    return "  \n".join(map(plain, lines)) if lines else "Device: checking… (the server is loading torch)"


def _latest_runs(store: RunStore, active_ids: list[str]) -> None:
    st.subheader("Latest runs")
    st.caption(f"Runs index: {plain(describe_index(store.root))}")
    # Runs ended before a step say nothing here; a bar while many runs are read into the runs index.
    table = run_table(store, active_ids, hide_unstepped=True, progress=indexing_progress(store))
    if table.empty:
        st.write("No runs yet: start one on the Train page.")
        return
    columns = [c for c in ("name", "state", "label", "dataset", "steps", "final_loss", "test_accuracy", "run_id")
               if c in table]
    # Each run links to itself on the Runs page (whose ?run= is validated there): first, so that the link
    # is in view at 1280 px; the long id last.
    latest = table[columns].head(10)
    latest.insert(0, "open", "Runs?run=" + latest["run_id"])
    st.dataframe(latest, hide_index=True, width="stretch",
                 column_config={"open": st.column_config.LinkColumn("open", display_text="open on Runs"),
                                "final_loss": st.column_config.NumberColumn(format="%.4f",
                                                                            help=COLUMN_HELP["final_loss"]),
                                "test_accuracy": st.column_config.NumberColumn(format="%.3f")})


# Each visit looks at the devices again: back at once on the CPU, and in tens of ms from nvidia-smi; a slower
# look is drawn when it comes (the status redraws itself meanwhile).
server.refresh_devices(wait_s=LOOK_WAIT_S)
runner = server.runner_if_ready()
watching = _watching(runner)


@st.fragment(run_every=REFRESH_S if watching else None)
def status() -> None:
    """The devices, the runs in progress (with their progress) and the latest runs; live while the warm-up
    goes on, the devices are looked at or a run trains, then drawn once (each end reruns the page)."""
    now = server.runner_if_ready()
    active = _active(now)
    if _watching(now) != watching or (now is None) != (runner is None):
        st.rerun()  # the warm-up, the look or the last run ended: redraw with (or without) the refresh
    server.refresh_devices()  # while a run trains, its GPU's free memory follows it
    st.info(_device_line(active))
    if now is not None and (warm := now.warm_text()):  # the spare worker, a torchrun job and when it ends
        st.caption(warm)
    for snapshot in active:
        st.success(f"In progress: {plain(snapshot.name or snapshot.run_id)} ({snapshot.state}, step "
                   f"{snapshot.steps_done} of {snapshot.total_steps or '?'})")
    _latest_runs(now.store if now is not None else RunStore(server.runs_dir()), [s.run_id for s in active])


status()
prefetch_train_page()  # the browser loads the Train page's widget code while this page is read
server.start()  # after the page's drawing: torch and the runner load while the page is read
