"""Streamlit AppTest for every page: controls, a tiny run started from the page, charts, downloads."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from dashboard import server

from page_charts import live_figures

from gaccum_core.views.charts import CHARTS
from gaccum_core.config import DEFAULT_RUN, RunConfig
from gaccum_core.train.metrics import STEP_COLUMNS

HEADER = ",".join(STEP_COLUMNS)
ROOT = Path(__file__).resolve().parents[2]


def runner():
    from dashboard import server

    return server.get_runner()


def test_home_page_shows_the_device_and_latest_runs(runs_dir):
    run_id = runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2))
    runner().wait(run_id, timeout=60)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert "Device: checking" in at.info[0].value or server.ready()  # drawn before torch is loaded
    assert server.wait(60)  # the warm-up the page started has ended; the page shows what it found
    at.run()
    assert "CPU — runs train on the CPU" in at.info[0].value
    table = at.dataframe[0].value.set_index("run_id")
    assert table.loc[run_id, "open"] == f"Runs?run={run_id}"  # a link to that run on the Runs page


def test_train_page_runs_a_tiny_run_and_draws_its_charts(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    assert not at.exception
    for key in ("cfg_model", "cfg_dataset", "cfg_clear_cache", "cfg_compile", "cfg_optimizer", "cfg_device"):
        assert at.selectbox(key=key).value == getattr(DEFAULT_RUN, key.removeprefix("cfg_"))  # the page's defaults
    assert at.number_input(key="cfg_micro_batch_size").value == 32 and at.number_input(key="cfg_accum_steps").value == 4
    assert at.metric[0].value == "128"
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_micro_batch_size").set_value(16)
    at.number_input(key="cfg_max_steps").set_value(3)
    at.radio(key="cfg_amp").set_value("fp16")
    at.run()
    assert at.metric[0].value == "64"
    assert "GradScaler" in at.code[0].value
    at.button[0].click().run()
    assert not at.exception
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=120).state == "finished"
    at.run()
    assert not at.exception
    figures = live_figures(at)
    # cache clearing is off and one process communicates nothing: one line each says so instead of an empty
    # chart (fp16: the loss scale is drawn)
    assert sorted(figures) == sorted(set(CHARTS) - {"cache", "collectives"})
    assert any("cache" in c.value and "no run" in c.value.lower() for c in at.caption), [c.value for c in at.caption]
    assert len(figures["loss"]["data"]) == 2  # raw and smoothed
    csv = downloads[f"{run_id}-metrics.csv"]
    assert csv.decode().splitlines()[0] == HEADER and len(csv.decode().splitlines()) == 4


def test_train_page_explains_a_setting_that_cannot_run_before_start(runs_dir):
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    at.selectbox(key="cfg_model").select("vit_b_16")
    at.run()
    assert any("multiple of 16" in e.value for e in at.sidebar.error)
    assert at.button[0].disabled


def test_settings_survive_a_page_switch(runs_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("app_pages/1_Train.py").run()
    at.number_input(key="cfg_accum_steps").set_value(8).run()
    at.switch_page("app_pages/2_Runs.py").run()
    at.switch_page("app_pages/1_Train.py").run()
    assert at.number_input(key="cfg_accum_steps").value == 8


def test_runs_page_lists_overlays_exports_and_deletes(runs_dir, downloads):
    ids = [runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2, accum_steps=k)) for k in (1, 2)]
    for run_id in ids:
        runner().wait(run_id, timeout=60)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60).run()
    assert not at.exception
    assert set(at.dataframe[0].value["run_id"]) == set(ids)
    at.multiselect(key="runs_selected").set_value(ids).run()
    # fp32 one-process runs without cache clearing: no loss scale, skipped steps, clearing time or collectives
    # to draw, a line each instead
    drawn = {chart.key.removeprefix("runs_chart_") for chart in at.get("plotly_chart")}
    assert drawn == set(CHARTS) - {"scale", "skipped", "cache", "collectives"}
    assert sum("not applicable" in c.value for c in at.caption) == 4, [c.value for c in at.caption]
    combined = downloads["gaccum-runs.csv"].decode().splitlines()
    header = combined[0].split(",")
    assert header[:3] == ["run_id", "config_model", "config_dataset"] and len(combined) == 1 + 4
    assert len(header) == len(set(header)), "a column name appears twice"
    assert {"config_epochs", "config_momentum", "config_weight_decay", "config_warmup_steps", "lr"} <= set(header)
    evals = downloads["gaccum-evals.csv"].decode().splitlines()
    assert "test_accuracy" in evals[0] and len(evals) == 1 + 2
    for run_id in ids:  # every selected run downloads on its own, metrics and evaluations
        assert downloads[f"{run_id}-metrics.csv"].decode().startswith("step,")
        assert "test_accuracy" in downloads[f"{run_id}-eval.csv"].decode().splitlines()[0]
    at.checkbox(key="confirm_delete").check().run()
    at.button(key="delete_run").click().run()
    assert not at.exception
    # both selected runs, not only the first (the runs index beside them stays, without their rows)
    assert [p.name for p in runs_dir.iterdir() if not p.name.startswith(".index.sqlite")] == []
    assert any(all(r in s.value for r in ids) for s in at.success), "nothing confirmed the delete"


def test_home_page_is_drawn_without_torch(runs_dir):
    """The first screen imports no torch (seconds on a cold server): the page, links and runs table are
    drawn from the runs directory; the warm-up (not started here) loads torch after."""
    import subprocess
    import sys

    code = ("import sys; import dashboard.server as server; server.start = lambda: None\n"
            "from streamlit.testing.v1 import AppTest\n"
            "at = AppTest.from_file('app.py', default_timeout=60).run()\n"
            "assert not at.exception, at.exception\n"
            "print('torch' in sys.modules, at.title[0].value, at.info[0].value, at.subheader[0].value, sep='|')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False|gaccum|Device: checking… (the server is loading torch)|Latest runs"


def test_home_page_leaves_out_runs_that_ended_before_a_step(runs_dir):
    from gaccum_core.runs.store import RunStore

    trained = runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2))
    runner().wait(trained, timeout=60)
    store = RunStore(runs_dir)
    empty = store.create(RunConfig(device="cpu", model="mlp"))
    store.update_status(empty, state="stopped", message="stopped before its first step")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    listed = set(at.dataframe[0].value["run_id"])
    assert trained in listed and empty not in listed
