"""Faults injected through the engine's hook: each ends cleanly and loses no row."""

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core import faults
from gaccum_core.catalog import run_table
from gaccum_core.config import RunConfig
from gaccum_core.engine import Engine
from gaccum_core.metrics import STEP_COLUMNS
from gaccum_core.runner import Runner
from gaccum_core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2)


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.disarm()


def assert_rows_intact(store, run_id, steps):
    """metrics.csv ends with a newline, has every column in every row and exactly `steps` rows."""
    text = (store.path(run_id) / "metrics.csv").read_text()
    assert text.endswith("\n")
    frame = store.read_metrics(run_id)
    assert list(frame.columns) == list(STEP_COLUMNS)
    assert frame["step"].tolist() == list(range(1, steps + 1))
    assert frame["loss"].notna().all() or steps == 0


def test_out_of_memory_mid_run_fails_keeps_rows_releases_memory_and_the_next_run_works(tmp_path):
    faults.arm(faults.Fault("oom", step=4, micro=1))
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=10, **TINY))
    snap = runner.wait(run_id, timeout=60)
    assert snap.state == "failed" and "out of memory" in snap.message and "accum_steps=4" in snap.message
    assert runner.store.read_status(run_id)["state"] == "failed"
    assert_rows_intact(runner.store, run_id, 3)
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is Engine]  # model and optimizer freed
    assert runner.wait(runner.submit(RunConfig(max_steps=3, **TINY)), timeout=60).state == "finished"


def test_a_nan_loss_without_a_scaler_stops_the_run_as_diverged_at_that_step(tmp_path):
    faults.arm(faults.Fault("nan", step=5))
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=20, **TINY))
    snap = runner.wait(run_id, timeout=60)
    assert snap.state == "diverged" and "step 5" in snap.message and "learning rate" in snap.message
    assert runner.store.read_status(run_id)["state"] == "diverged"
    frame = runner.store.read_metrics(run_id)
    assert frame["step"].tolist() == [1, 2, 3, 4, 5] and frame["loss"].isna().tolist() == [False] * 4 + [True]


def test_a_nan_loss_with_a_scaler_is_a_skipped_step_not_a_divergence(tmp_path):
    faults.arm(faults.Fault("nan", step=3))
    runner = Runner(tmp_path)
    snap = runner.wait(runner.submit(RunConfig(max_steps=6, amp="fp16", **TINY)), timeout=120)
    assert snap.state == "finished"
    assert [r["skipped"] for r in snap.metrics] == [0, 0, 1, 0, 0, 0]


def test_stop_ends_the_run_within_one_micro_batch_with_its_csv_intact(tmp_path):
    # A slow micro-batch: stop() arrives while it runs and must take effect before the next one.
    faults.arm(faults.Fault("slow", step=3, micro=0, seconds=1.0))
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=50, **TINY))
    while runner.snapshot(run_id).steps_done < 2:
        time.sleep(0.01)
    time.sleep(0.3)  # inside the slow micro-batch of step 3
    stopped_at = time.monotonic()
    runner.stop(run_id)
    snap = runner.wait(run_id, timeout=30)
    assert snap.state == "stopped" and time.monotonic() - stopped_at < 1.5
    assert snap.steps_done == 2  # step 3's window was abandoned after its first micro-batch
    assert runner.store.read_status(run_id)["state"] == "stopped"
    assert_rows_intact(runner.store, run_id, 2)


def test_a_reloaded_tab_attaches_to_the_run_in_progress(runs_dir):
    import ui

    faults.arm(faults.Fault("slow", step=2, seconds=3.0))
    first = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=120).run()
    first.selectbox(key="cfg_model").select("mlp")
    first.number_input(key="cfg_max_steps").set_value(4)
    first.button(key="start").click().run()
    (run_id,) = first.session_state["session_runs"]
    reloaded = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=120).run()  # a new session
    assert not reloaded.exception
    texts = [p.proto.text for p in reloaded.get("progress")]
    assert any(text.startswith("running: step") for text in texts), texts
    assert not reloaded.button(key="stop").disabled
    assert ui.get_runner().wait(run_id, timeout=60).state == "finished"


def test_two_sessions_pressing_start_at_once_one_runs_one_queues_nothing_mixed(runs_dir):
    import ui

    faults.arm(faults.Fault("slow", step=1, seconds=2.0))
    sessions = [AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=120).run() for _ in range(2)]
    for at, k in zip(sessions, (2, 3)):
        at.selectbox(key="cfg_model").select("mlp")
        at.slider(key="cfg_accum_steps").set_value(k)
        at.number_input(key="cfg_max_steps").set_value(3)
        at.run()
    for at in sessions:
        at.button(key="start").click().run()
    ids = [at.session_state["session_runs"][0] for at in sessions]
    states = {ui.get_runner().snapshot(i).state for i in ids}
    assert states == {"running", "queued"}
    queued = sessions[[ui.get_runner().snapshot(i).state for i in ids].index("queued")]
    assert any("queued: position 1" in p.proto.text for p in queued.run().get("progress"))
    for run_id, k in zip(ids, (2, 3)):
        assert ui.get_runner().wait(run_id, timeout=120).state == "finished"
        frame = ui.get_runner().store.read_metrics(run_id)
        assert len(frame) == 3 and set(frame["micro_batches"]) == {k}


KILL_SCRIPT = """
import sys, time
from gaccum_core.config import RunConfig
from gaccum_core.runner import Runner
runner = Runner(sys.argv[1])
run_id = runner.submit(RunConfig(device="cpu", model="mlp", micro_batch_size=4, accum_steps=1, epochs=1000))
print(run_id, flush=True)
runner.wait(run_id)
"""


def test_a_killed_server_leaves_an_interrupted_run_whose_rows_all_read_back(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(tmp_path)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    run_id = child.stdout.readline().strip()
    metrics = tmp_path / run_id / "metrics.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and metrics.read_text().count("\n") < 200:
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)  # mid-run, mid-write if it happens to be writing
    child.wait(timeout=30)
    store = RunStore(tmp_path)
    assert store.read_status(run_id)["state"] == "running"  # as the killed process left it
    table = run_table(store).set_index("run_id")
    assert table.loc[run_id, "state"] == "interrupted"
    text = metrics.read_text()
    assert text.endswith("\n")  # one write() per whole row: never a partial last line
    frame = pd.read_csv(metrics)
    assert len(frame) >= 199 and frame["step"].tolist() == list(range(1, len(frame) + 1))
    assert frame.notna()[["loss", "lr", "grad_norm", "step_time_s"]].all().all()
