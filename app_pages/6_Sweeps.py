"""Sweeps: a grid of settings × repeats, started with one button and followed live; then each cell's
figures with 95 % intervals, whether b/k cells coincide, and the charts."""

import streamlit as st

from dashboard import sweep_controls
from dashboard.sweep_jobs import sweep_jobs
from dashboard.markdown import plain
from dashboard.live import REFRESH_S, progress
from dashboard.messages import explain
from dashboard.server import get_runner
from dashboard.state import kept, set_kept, widget
from gaccum_core.config import ConfigError
from gaccum_core.runs.claim import RunBusyError
from gaccum_core.sweeps.devices import lanes_words
from gaccum_core.sweeps.files import list_sweeps, read_spec
from gaccum_core.train.metrics import time_left_words
from gaccum_core.sweeps.labels import describe_sweep
from gaccum_core.sweeps.summary import summarize
from gaccum_core.views.sweep_charts import loss_band_figure, parallel_figure, speed_memory_figure
from gaccum_core.views.sweep_table import display_table

st.set_page_config(page_title="gaccum · Sweeps", layout="wide")
st.title("Sweeps")
st.caption("Cross the options on the left at one effective batch; each combination (a cell) runs as ordinary "
           "runs, once per repeat with the seeds seed, seed+1, …. Cells that differ only in b and k must train "
           "the same losses under the exact mean: the summary says whether they do.")
runner = get_runner()
jobs = sweep_jobs()
common, lists, options = sweep_controls.draw()
spec, problem = None, None
try:
    spec = sweep_controls.spec_from(common, lists, options)
    problem = sweep_controls.refusal(spec)
except ConfigError as exc:
    problem = explain(exc, sweep_controls.SWEEP_LABELS)
going = jobs.going()
if problem:
    st.error(f"Cannot start: {problem}")
elif spec is not None:
    st.caption(f"{plain(describe_sweep(spec))}, {lanes_words()} · sweep {spec.sweep_id} (runs a previous "
               "start finished are skipped)")


def start(sweep) -> None:
    """Start the sweep (its runs done before are skipped) and show it below; a refusal in one line."""
    try:
        set_kept("sweep_pick", jobs.start(sweep).sweep_id)  # the sweep shown below: this one
    except OSError as exc:  # the runs directory cannot take the sweep's spec
        st.error(f"Cannot start: {exc} (the runs directory is set by GACCUM_RUNS_DIR)")
    except RunBusyError as exc:  # the same sweep going in another server or command line
        st.error(f"Cannot start: {plain(str(exc))}")
    else:
        st.rerun()


if st.button("Start sweep", type="primary", key="sweep_start", disabled=spec is None or bool(problem) or bool(going)):
    start(spec)


def runs_ended(sweeps_going) -> tuple:
    """Which sweeps go and how many of their runs have ended: when it changes, the page is drawn again."""
    return tuple((job.sweep_id, job.progress().done, job.progress().failed) for job in sweeps_going)


st.session_state["_sweep_drawn"] = runs_ended(going)


@st.fragment(run_every=REFRESH_S if going else None)
def live() -> None:
    """Each sweep going: runs done of all, the time left, the run training; the page (its table and charts)
    is drawn again whenever a run ends and when the sweep does."""
    now = jobs.going()
    if runs_ended(now) != st.session_state.get("_sweep_drawn"):
        st.rerun()
    for job in now:
        state = job.progress()
        left = f" · {time_left_words(state.eta_s)}" if state.eta_s is not None else ""
        done = f" ({state.skipped} done before)" if state.skipped else ""
        failed = f" · {state.failed} failed" if state.failed else ""
        st.progress(state.done / state.total, text=f"Sweep {job.sweep_id}: {state.done} of {state.total} runs "
                                                    f"done{done}{failed}{left}")
        for snapshot in state.current:
            progress(snapshot)
        if st.button("Stop the sweep", key=f"sweep_stop_{job.sweep_id}"):
            job.stop()


live()
sweeps = list_sweeps(runner.store.root)
if not sweeps:
    st.info("No sweep yet: pick the values to cross on the left and press Start sweep.")
    st.stop()
if kept("sweep_pick") not in sweeps:  # none yet, or its folder deleted since
    set_kept("sweep_pick", sweeps[0])


def sweep_words(sweep_id: str) -> str:
    """'sweep 1a2b… · cnn on digits, E=64: b × reduction, 2 repeats (8 runs)', and whether it is going."""
    try:
        words = describe_sweep(read_spec(runner.store.root, sweep_id))
    except (OSError, ConfigError):
        words = "spec.json cannot be read"
    return f"sweep {sweep_id} · {words}" + (" · going" if jobs.get(sweep_id) in going else "")


shown = widget(st.selectbox, "Sweep shown", "sweep_pick", sweeps[0], options=sweeps, format_func=sweep_words)
try:
    summary = summarize(runner.store, read_spec(runner.store.root, shown))
except (OSError, ConfigError) as exc:
    st.error(plain(f"Sweep {shown} cannot be read: {exc}"))
    st.stop()
table = summary.table
st.subheader("Cells")
unfinished = summary.unfinished()
if unfinished:  # a failed run named, its cell's figures marked as from fewer runs; the rerun trains only it
    st.warning("\n\n".join(plain(line) for line in summary.incomplete_words()))
    if st.button(f"Rerun the {len(unfinished)} unfinished run{'s' if len(unfinished) > 1 else ''} (the done runs "
                 "are kept)", key=f"sweep_rerun_{shown}", disabled=bool(going)):
        start(summary.spec)
for verdict in summary.verdicts:
    say = st.success if verdict.coincide and verdict.expected else st.info if not verdict.expected else st.warning
    say(plain(verdict.text()))
st.dataframe(display_table(table), hide_index=True, width="stretch")
st.caption("± is the 95% interval over a cell's repeats (Student's t), said when it is wider than the value, with "
           "about how many repeats would narrow it; 'from 1 of 2 runs': the cell's figures come from fewer "
           "runs than asked (one failed, or not run yet). final loss: the training loss over each "
           "run's last epoch (its steps weighted by their samples). samples/s: each run's median after its "
           "first tenth of steps (warm-up); peak MB: the training memory the planner counts (weights, gradients, "
           "optimizer state, activations); skipped steps are shown where fp16's GradScaler skipped some. coincides: "
           "the largest relative loss difference to the first cell (ref.) of its b/k group, at the same seed.")
st.download_button("Download summary.csv", table.to_csv(index=False), file_name=f"sweep-{shown}-summary.csv",
                   mime="text/csv", key="sweep_csv")
if not summary.any_runs:
    st.stop()
st.plotly_chart(parallel_figure(table, list(summary.spec.fields)), key="sweep_parallel")
left, right = st.columns(2)
left.plotly_chart(speed_memory_figure(table), key="sweep_speed")
right.plotly_chart(loss_band_figure(summary.curves, summary.x_axis), key="sweep_bands")
st.subheader("A cell's runs")
cell = st.selectbox("Cell", list(table["cell"]), format_func=dict(zip(table["cell"], table["label"])).get,
                    key="sweep_cell")
runs = summary.cell_runs(cell)
st.markdown(f"[Open the cell's {len(runs)} runs on the Runs page](Runs?run={','.join(runs['run_id'])}), "
            "compared there: settings, charts, CSV.")
runs.insert(0, "open", "Runs?run=" + runs["run_id"])
st.dataframe(runs, hide_index=True, width="stretch",
             column_config={"open": st.column_config.LinkColumn("open", display_text="open on Runs")})
