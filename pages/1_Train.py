"""Train: set up a run, start it, watch it live, change a setting, run again, compare."""

import streamlit as st

from controls import Controls
from gaccum_core.charts import X_AXES, build_figures
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data import DataError
from gaccum_core.engine import preflight
from gaccum_core.loopcode import render_loop
from ui import REFRESH_S, await_first_step, config_from, get_runner, progress, series, session_runs, widget

st.set_page_config(page_title="gaccum · Train", layout="wide")
st.title("Train")
runner = get_runner()
controls = Controls()
values = controls.draw()


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
        return exc.field, str(exc)
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
    problem = exc.field, str(exc)
if problem:
    controls.error(*problem)
    st.error(f"Cannot start: {problem[1]}")

mine = session_runs()
start, stop, _ = st.columns([1, 1, 6])
if start.button("Start", type="primary", key="start", disabled=config is None or problem is not None):
    try:
        mine.append(runner.submit(config))  # this same script run then draws it: no extra rerun
    except (ValueError, OSError) as exc:  # the runs directory cannot take a run (the store left none)
        st.error(f"Cannot start: {exc} (the runs directory is set by GACCUM_RUNS_DIR)")
    else:
        await_first_step(runner, mine[-1])
active = [s for s in runner.snapshots() if not s.done]
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
    """This session's runs (all, or the latest) plus any run in progress, e.g. after a reload."""
    ids = list(dict.fromkeys(mine if compare else mine[-1:]))
    ids += [s.run_id for s in runner.snapshots() if not s.done and s.run_id not in ids]
    return [runner.snapshot(run_id) for run_id in ids]


@st.fragment(run_every=REFRESH_S if active or any(not s.done for s in shown_runs()) else None)
def live() -> None:
    """Progress and charts, refreshed from the runner's snapshots while anything runs."""
    snapshots = shown_runs()
    for snapshot in snapshots:
        if not snapshot.done or snapshot.run_id == (mine[-1] if mine else None):
            progress(snapshot)
    figures = build_figures([series(s) for s in snapshots], x_axis, smoothing)
    left, right = st.columns(2)
    for i, (name, figure) in enumerate(figures.items()):
        (left if i % 2 == 0 else right).plotly_chart(figure, key=f"chart_{name}", width="stretch", theme=None)
    if snapshots and mine and runner.snapshot(mine[-1]).done:
        st.download_button("Download the latest run's metrics.csv", runner.store.metrics_csv(mine[-1]),
                           file_name=f"{mine[-1]}-metrics.csv", mime="text/csv")
    if st.session_state.get("_was_running") and not any(not s.done for s in snapshots):
        st.session_state["_was_running"] = False
        st.rerun()  # the last run ended: a full rerun turns the refresh off and re-enables Start
    st.session_state["_was_running"] = any(not s.done for s in snapshots)


live()
if config is not None:
    with st.expander("The loop you are running", expanded=False):
        st.caption("Plain PyTorch equivalent to the settings on the left, generated from the same config.")
        st.code(render_loop(config), language="python")
