"""Train: set up a run, start it, watch it live, change a setting, run again, compare."""

import streamlit as st

from controls import Controls
from gaccum_core.catalog import run_labels
from gaccum_core.charts import X_AXES, build_figures
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data import DataError
from gaccum_core.engine import preflight
from gaccum_core.loopcode import render_loop
from gaccum_core.store import StoreError
from ui import (REFRESH_S, adopt_settings, await_first_step, config_from, get_runner, progress, series,
                session_runs, widget)

st.set_page_config(page_title="gaccum · Train", layout="wide")
st.title("Train")
runner = get_runner()
running = [s for s in runner.snapshots() if not s.done]
# A reload (or a new tab) mid-run starts a fresh session: its controls take the running run's settings,
# so the controls and "The loop you are running" describe what the charts show.
if running and adopt_settings(running[0].config):
    st.session_state["adopted_from"] = running[0].run_id
controls = Controls()
values = controls.draw()
if st.session_state.get("adopted_from"):
    st.caption(f"The controls show the settings of run {st.session_state['adopted_from']}, "
               "which was running when this page opened; change them for the next run.")


@st.cache_data(show_spinner="Checking the settings…", max_entries=64)
def _preflight(config_json: str) -> None:
    """preflight, remembered for settings that pass; a failure is not cached, so data placed in the
    data directory after the error shows is seen on the next rerun."""
    preflight(RunConfig.from_json(config_json))


def check(config: RunConfig) -> tuple[str, str] | None:
    """(field, message) for settings that cannot run here, or None: model, data, device, batch."""
    try:
        _preflight(config.to_json())
    except ConfigError as exc:
        return exc.field, controls.explain(exc)
    except DataError as exc:  # data set missing or unreadable: shown under the data directory
        return "data_dir", str(exc)
    except ValueError as exc:  # the model cannot take the images
        return "image_size", str(exc)
    return None


config, problem = None, None
try:
    config = config_from(values)
    problem = check(config)
except ConfigError as exc:
    problem = exc.field, controls.explain(exc)
if problem:
    controls.error(*problem)
    st.error(f"Cannot start: {problem[1]}")

mine = session_runs(runner)
start, stop, _ = st.columns([1, 1, 6])
if start.button("Start", type="primary", key="start", disabled=config is None or problem is not None):
    try:
        mine.append(runner.submit(config))  # this same script run then draws it: no extra rerun
    except (ValueError, OSError) as exc:  # the runs directory cannot take a run (the store left none)
        st.error(f"Cannot start: {exc} (the runs directory is set by GACCUM_RUNS_DIR)")
    else:
        st.session_state.pop("adopted_from", None)
        await_first_step(runner, mine[-1])
active = [s for s in runner.snapshots() if not s.done]
st.session_state["_was_running"] = bool(active)  # what Start and Stop were drawn for
if stop.button("Stop", key="stop", disabled=not active):
    for snapshot in active:
        runner.stop(snapshot.run_id)

x_col, smooth_col, compare_col = st.columns([2, 2, 1])
with x_col:
    x_axis = widget(st.radio, "x axis", "chart_x", "step", options=list(X_AXES), format_func=X_AXES.get,
                    horizontal=True)
with smooth_col:
    smoothing = widget(st.slider, "Loss smoothing", "chart_smoothing", 0.6, min_value=0.0, max_value=0.99)
with compare_col:
    compare = widget(st.toggle, "Overlay earlier runs", "chart_compare", True)


def shown_runs():
    """This session's runs (all, or the latest) plus any run in progress, e.g. after a reload;
    runs deleted meanwhile (on the Runs page, in any session) are left out."""
    ids = list(dict.fromkeys(session_runs(runner) if compare else session_runs(runner)[-1:]))
    ids += [s.run_id for s in runner.snapshots() if not s.done and s.run_id not in ids]
    snapshots = []
    for run_id in ids:
        try:
            snapshots.append(runner.snapshot(run_id))
        except KeyError:  # deleted between the two lines above
            continue
    return snapshots


def latest_download(run_id: str) -> None:
    """The latest run's metrics.csv as a download, unless it was deleted meanwhile."""
    try:
        data = runner.store.metrics_csv(run_id)
    except (OSError, StoreError):
        return
    st.download_button("Download the latest run's metrics.csv", data, file_name=f"{run_id}-metrics.csv",
                       mime="text/csv")


@st.fragment(run_every=REFRESH_S)
def live() -> None:
    """Progress and charts, refreshed from the runner's snapshots. It polls even when nothing runs,
    so a run started in another tab or session shows up here too."""
    snapshots = shown_runs()
    for snapshot in snapshots:
        if not snapshot.done or snapshot.run_id == (mine[-1] if mine else None):
            progress(snapshot)
    if snapshots:
        labels = run_labels([s.config for s in snapshots])
        figures = build_figures([series(s, label) for s, label in zip(snapshots, labels)], x_axis, smoothing)
        left, right = st.columns(2)
        for i, (name, figure) in enumerate(figures.items()):
            (left if i % 2 == 0 else right).plotly_chart(figure, key=f"chart_{name}", width="stretch", theme=None)
    else:
        st.info("No run yet: set up a run on the left and press Start.")
    if snapshots and mine and runner.knows(mine[-1]) and runner.snapshot(mine[-1]).done:
        latest_download(mine[-1])
    if st.session_state.get("_was_running", False) != any(not s.done for s in snapshots):
        st.rerun()  # a run started or ended elsewhere: a full rerun redraws Start and Stop for it


live()
if config is not None:
    with st.expander("The loop you are running", expanded=False):
        st.caption("Plain PyTorch equivalent to the settings on the left, generated from the same config.")
        st.code(render_loop(config), language="python")
