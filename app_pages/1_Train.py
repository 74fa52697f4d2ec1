"""Train: set up a run, start it, watch it live, change a setting, run again, compare."""


import streamlit as st

from dashboard import live_chart
from dashboard.checks import refusal
from dashboard.controls import LABELS, Controls, config_from
from dashboard.live import (REFRESH_S, WARM_POLL_S, await_first_step, chart_labels, live_charts, progress,
                            short_name, stepless_line)
from dashboard.messages import explain
from dashboard.server import get_runner
from dashboard.state import adopt_settings, drop_missing, kept, session_runs, widget
from gaccum_core.views.axes import LOSS_TOKENS_NOTE, TOKEN_AXES, X_AXES, tokens_axis_note
from gaccum_core.views.charts import ALL_CHARTS, CHART_TITLES, CHARTS, LOG_BY_DEFAULT
from gaccum_core.views.samples import readable_sample, sample_line
from gaccum_core.config import RECORD_DATASETS, ConfigError
from gaccum_core.plan.costs import warnings_for
from gaccum_core.train.device import resolve_device
from gaccum_core.lab.loopcode import render_loop
from gaccum_core.train.checkpoint import CheckpointError
from gaccum_core.runs.files import run_error_words
from gaccum_core.runs.integrity import DamagedRun
from gaccum_core.execution.resume import RESUMABLE, resume_refusal
from gaccum_core.runs.run_data import constant_used, constant_words, started_from
from gaccum_core.execution.runner import RunBusyError
from gaccum_core.runs.store import StoreError
from dashboard.run_picks import (OFFERED, last_stopped, offered_runs, run_choice_labels, runs_on_disk,
                                 tracked_or_disk, wrap_run_chips)
from dashboard.markdown import plain

st.set_page_config(page_title="gaccum · Train", layout="wide")
st.title("Train")
# Every message above Start goes in here: Start keeps its place in the page whatever is said, so the
# browser never shows the previous run's Start beside the new one while the page reruns.
notes = st.container()
runner = get_runner()
running = [s for s in runner.snapshots() if not s.done]
# A reload (or a new tab) mid-run starts a fresh session: its controls take the running run's settings,
# so the controls and "The loop you are running" describe what the charts show.
if running and adopt_settings(running[0].config):
    st.session_state["adopted_from"] = running[0].run_id
controls = Controls()
values = controls.draw()
if st.session_state.get("adopted_from"):
    notes.caption(f"The controls show the settings of run {plain(st.session_state['adopted_from'])}, "
                  "which was running when this page opened; change them for the next run.")


config, problem = None, controls.problem  # an hf: directory refused under its name comes first
try:
    config = config_from(values)
    with notes:  # the check's "Checking the settings…" spinner too
        problem = problem or refusal(config, LABELS)
except ConfigError as exc:
    problem = problem or (exc.field, explain(exc, LABELS))
if problem:
    controls.error(*problem)
    notes.error(f"Cannot start: {problem[1]}")
else:  # what the costly options cost here before Start (cache clearing: as this device's latest clearing run timed it)
    device = str(resolve_device(config.device))
    for field, note in warnings_for(config.clear_cache, config.amp, config.accum_steps, device,
                                    runner.snapshots()).items():
        controls.warn(field, note)
    if config.world_size > 1 and not runner.active_ids():
        runner.prepare(config)  # torchrun's ranks start up while the user reads, not after Start

mine = session_runs(runner.knows)
for gone in st.session_state.pop("deleted_elsewhere", []):  # its charts, progress and Resume go with it
    notes.info(f"Run {plain(gone)} was deleted (on the Runs page or in another tab): it is no longer shown here.")
start, stop, name_col = st.columns([1, 1, 6])
run_name = name_col.text_input("Run name (optional)", key="run_name", max_chars=40,
                               placeholder="e.g. baseline, fp16 try 2", label_visibility="collapsed")
# A one-process run goes to the warm spare worker: Start waits for it to have imported torch and loaded the data,
# so that the first point follows Start in about a second.
# (Nothing else running: a run started meanwhile would queue behind it anyway.) The watch below reruns the page
# once the worker is ready.
warming = config is not None and config.world_size == 1 and not runner.active_ids() and runner.spare_warming()
if warming:  # under the row, not above it: Start stays where it is when the line goes
    st.caption("Start is enabled in a few seconds: the worker process that trains the run is importing torch.")
if start.button("Start", type="primary", key="start", disabled=config is None or problem is not None or warming):
    try:
        mine.append(runner.submit(config, run_name.strip() or None))  # drawn by this same script run
    except (ValueError, OSError) as exc:  # the runs directory cannot take a run (the store left none)
        st.error(f"Cannot start: {exc} (the runs directory is set by GACCUM_RUNS_DIR)")
    else:
        st.session_state.pop("adopted_from", None)
        await_first_step(runner, mine[-1])
active = [s for s in runner.snapshots() if not s.done]
# A run going on this device, started in another tab or session, is followed here as this tab's own:
# once it ends it stays drawn, with its progress and downloads.
mine.extend(s.run_id for s in active if s.run_id not in mine)
st.session_state["_drawn_active"] = runner.active_ids()  # what Start, Stop and the charts were drawn for
drawn_runs = runs_on_disk(runner)  # a run deleted or added elsewhere redraws the page
if stop.button("Stop", key="stop", disabled=not active):
    for snapshot in active:
        runner.stop(snapshot.run_id)
latest_id = mine[-1] if mine else last_stopped(runner)  # a tab with no run of its own: the newest stopped one
latest = tracked_or_disk(runner, latest_id) if latest_id else None
resumable = latest is not None and latest.state in RESUMABLE and not active
refused = resumable and resume_refusal(runner.store, latest.run_id)
if refused:  # no checkpoint.pt, or a config.json that does not read: said instead of a Resume that cannot work
    st.caption(plain(refused))
elif resumable and st.button(f"Resume {plain(short_name(latest))} from its checkpoint", key="resume",
                             help="goes on exactly where it stopped, in the same run directory (Runs page: any run)"):
    try:  # what checkpoint.pt holds is checked now: a refusal says why
        runner.resume(latest.run_id)
    except (CheckpointError, DamagedRun, RunBusyError, StoreError, OSError) as exc:
        st.error(f"Cannot resume: {run_error_words(runner.store.path(latest.run_id), exc)}")
    else:
        st.rerun()

# Tokens seen is offered while a language run is set up or among this session's runs: image runs count none.
language = ((config is not None and config.is_text) or any(runner.config(r).is_text for r in mine)
            or (latest is not None and latest.config.is_text))
x_col, smooth_col = st.columns([2, 2])
with x_col:
    x_axis = widget(st.radio, "x axis", "chart_x", "step", options=[x for x in X_AXES if language or x not in TOKEN_AXES],
                    format_func=X_AXES.get, horizontal=True)
with smooth_col:
    smoothing = widget(st.slider, "Smoothing (loss, throughput)", "chart_smoothing", 0.6, min_value=0.0, max_value=0.99)
# Every run on disk, newest first, in the legends' words; the runs drawn (those picked, the latest, those going)
# by what tells them apart from one another: a picked run's chip says what its legend says.
labels_of = run_choice_labels(runner.store, [*kept("chart_overlay", []), latest_id, *(s.run_id for s in active)])
earlier = [r for r in labels_of if r != latest_id]
overlay_col, log_col = st.columns([3, 2])
with overlay_col:
    # The latest run is always drawn; any other run on disk (this tab's, another tab's, an earlier
    # server's or a command line's) only when picked. Runs deleted meanwhile leave the pick.
    drop_missing("chart_overlay", earlier)
    wrap_run_chips("chart_overlay")
    offered = offered_runs(earlier, kept("chart_overlay", []))  # the newest runs, and those picked
    overlaid = widget(st.multiselect, "Other runs to overlay", "chart_overlay", [], options=offered,
                      format_func=labels_of.get, placeholder="any run on disk") if earlier else []
    if len(earlier) > OFFERED:
        st.caption(f"The newest {OFFERED:,} of {len(earlier):,} runs are offered here; the Runs page lists them all.")
with log_col:
    # A multiselect wraps and lists every chart: a row of pills scrolled sideways out of reach at 1280 px.
    log_y = widget(st.multiselect, "Log y axis", "chart_log", sorted(LOG_BY_DEFAULT),
                   options=list(ALL_CHARTS if language else CHARTS), format_func=lambda name: CHART_TITLES.get(name, name))


def shown_runs():
    """The picked runs, this session's latest and any run in progress (e.g. after a reload); runs
    deleted meanwhile (on the Runs page, in any session) are left out."""
    ids = [r for r in overlaid if r in earlier] + ([latest_id] if latest_id else [])
    ids += [s.run_id for s in runner.snapshots() if not s.done and s.run_id not in ids]
    snapshots = []
    for run_id in dict.fromkeys(ids):
        snapshot = tracked_or_disk(runner, run_id)
        if snapshot is not None:
            snapshots.append(snapshot)
    return snapshots


def tokens_note(snapshots) -> None:
    """Against tokens seen, say which shown runs are left out (image runs) or that steps are used instead."""
    if x_axis not in TOKEN_AXES:
        return
    drawn = [(s, label) for s, label in zip(snapshots, chart_labels(snapshots)) if s.metrics]
    note = tokens_axis_note([label for s, label in drawn if not s.config.is_text],
                            sum(s.config.is_text for s, _ in drawn))
    if note:
        st.caption(plain(note))


def generated_text(snapshots) -> None:
    """Under the charts, for each language run shown: its latest generated sample and every sample by
    step (one per evaluation: a greedy continuation of the same prompt, so the steps compare)."""
    for snapshot, label in zip(snapshots, chart_labels(snapshots)):
        if not snapshot.config.is_text:
            continue
        try:
            samples = runner.store.samples(snapshot.run_id)
        except (OSError, StoreError, ValueError):  # deleted meanwhile, or a line being written
            samples = []
        st.markdown("**Generated text** · " + plain(label))  # a run's name is shown as typed
        if not samples:
            when = (f"every {snapshot.config.eval_every} steps" if snapshot.config.eval_every
                    else "at the end of each epoch")
            st.caption(f"No sample yet: the model continues a prompt at each evaluation ({when}).")
            continue
        latest = samples[-1]
        st.caption(f"Latest sample, step {latest['step']}: the model's greedy continuation of the prompt")
        st.code(f"step {latest['step']}: {readable_sample(latest['text'])}", language=None, wrap_lines=True)
        with st.expander("Every sample of this run, by step"):
            width = len(str(samples[-1]["step"]))
            # One line per evaluation (line breaks in the text shown as ↵), so the steps read as a column.
            st.code("\n".join(sample_line(s["step"], s["text"], width) for s in samples), language=None)


def latest_download(run_id: str) -> None:
    """The latest run's metrics.csv and eval.csv as downloads, unless it was deleted meanwhile."""
    try:
        metrics, evals = runner.store.metrics_csv(run_id), runner.store.evals_csv(run_id)
        text = runner.config(run_id).is_text
    except (OSError, StoreError, KeyError):
        return
    left, right = st.columns(2)
    left.download_button("Download the latest run's metrics.csv", metrics, file_name=f"{run_id}-metrics.csv",
                         mime="text/csv")
    what = "validation loss, token accuracy, perplexity" if text else "test accuracy"
    right.download_button(f"Download the latest run's eval.csv ({what})", evals,
                          file_name=f"{run_id}-eval.csv", mime="text/csv")


@st.fragment(run_every=REFRESH_S if active else None)
def live() -> None:
    """Progress and charts, refreshed from the runner's snapshots while a run is going."""
    snapshots = shown_runs()
    for snapshot in snapshots:
        if not snapshot.done or snapshot.run_id == latest_id:
            progress(snapshot)  # with how it ended, and why
        if snapshot.run_id == latest_id and (weights := started_from(runner.store, latest_id)):
            st.caption(plain(f"Initial weights: {weights}"))
        if snapshot.run_id == latest_id and (used := constant_used(runner.store, latest_id)) is not None:
            st.caption(f"seq-mean-token-sum-norm divides by {constant_words(snapshot.config, used)}.")
    if not snapshots:
        st.info("No run yet: set up a run on the left and press Start.")
        live_chart.preload(st.container())  # plotly.js loads (~1 s) while the user sets up, not after Start
        return
    for snapshot, label in zip(snapshots, chart_labels(snapshots)):  # the latest's end is said by its progress
        if snapshot.done and not snapshot.metrics and snapshot.run_id != latest_id:
            st.caption(stepless_line(plain(label), snapshot.state, snapshot.message))
    snapshots = [s for s in snapshots if s.metrics or not s.done]  # nothing to draw of a run that ended stepless
    if not snapshots:
        return
    charts = live_charts(snapshots, x_axis, smoothing, frozenset(log_y or ()))
    for group in charts.coincidences:  # the Runs page says the same of the same runs
        st.caption(group.sentence([plain(label) for label in group.labels]))
    tokens_note(snapshots)
    if any(s.config.dataset in RECORD_DATASETS for s in snapshots):
        st.caption(LOSS_TOKENS_NOTE)
    left, right = st.columns(2)
    for i, (name, spec) in enumerate(charts.applicable().items()):
        live_chart.plotly_chart(left if i % 2 == 0 else right, spec, key=f"chart_{name}")
    for line in charts.not_applicable.values():  # a line each instead of an empty frame
        st.caption(line)
    generated_text(snapshots)
    if mine and runner.knows(mine[-1]) and runner.snapshot(mine[-1]).done:
        latest_download(mine[-1])


@st.fragment(run_every=WARM_POLL_S if warming else REFRESH_S)
def watch() -> None:
    """Every second, in every tab: when a run starts or ends anywhere (another tab, another session), or
    one is deleted or added, rerun the page so Start, Stop, the pick of runs and the charts follow it; while
    Start waits for the warm worker, four times a second until it is ready. Idle, this reads a few states
    and lists the runs directory."""
    if (runner.active_ids() != st.session_state.get("_drawn_active") or runs_on_disk(runner) != drawn_runs
            or (warming and not runner.spare_warming())):
        st.rerun()


live()
watch()
if config is not None:
    with st.expander("The loop you are running", expanded=False):
        st.caption("Plain PyTorch equivalent to the settings on the left, generated from the same config.")
        st.code(render_loop(config), language="python")
