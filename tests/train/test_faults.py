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
from gaccum_core.runs.catalog import run_table
from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import STEP_COLUMNS
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
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


def test_out_of_memory_mid_run_fails_with_advice_keeps_rows_releases_memory_and_the_next_run_works(tmp_path):
    faults.arm(faults.Fault("oom", step=4, micro=1))  # mid-window: step 4's first micro-batch already ran
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=10, **TINY))
    snap = runner.wait(run_id)
    assert snap.state == "failed"
    # The advice keeps the effective batch of 16*2 = 32: half the micro-batch, twice the accumulation.
    assert snap.message.startswith("out of memory at micro_batch_size=16")
    assert all(words in snap.message for words in ("micro_batch_size=8", "accum_steps=4", "of 32")), snap.message
    assert runner.store.read_status(run_id)["state"] == "failed"
    assert runner.store.read_status(run_id)["message"] == snap.message
    assert [row["step"] for row in snap.metrics] == [1, 2, 3]
    assert_rows_intact(runner.store, run_id, 3)
    assert "OutOfMemoryError" in (tmp_path / run_id / "traceback.txt").read_text()
    gc.unfreeze()  # every object back in gc's view, those conftest's frozen_heap froze before the test too
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is Engine]  # model and optimizer freed
    nxt = runner.wait(runner.submit(RunConfig(max_steps=3, **TINY)))
    assert nxt.state == "finished" and nxt.steps_done == 3


def test_a_nan_loss_without_a_scaler_stops_the_run_as_diverged_at_that_step(tmp_path):
    faults.arm(faults.Fault("nan", step=5))
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=20, **TINY))
    snap = runner.wait(run_id)
    assert snap.state == "diverged" and "step 5" in snap.message and "learning rate" in snap.message
    assert runner.store.read_status(run_id)["state"] == "diverged"
    frame = runner.store.read_metrics(run_id)
    assert frame["step"].tolist() == [1, 2, 3, 4, 5] and frame["loss"].isna().tolist() == [False] * 4 + [True]


def test_a_nan_loss_with_a_scaler_is_a_skipped_step_not_a_divergence(tmp_path):
    faults.arm(faults.Fault("nan", step=3))
    runner = Runner(tmp_path)
    snap = runner.wait(runner.submit(RunConfig(max_steps=6, amp="fp16", **TINY)))
    assert snap.state == "finished"
    assert [r["skipped"] for r in snap.metrics] == [0, 0, 1, 0, 0, 0]


def test_stop_ends_the_run_within_one_micro_batch_with_its_csv_intact(tmp_path, gate):
    # stop() lands while step 3's first micro-batch is under way; its second must never start.
    gate.hold(step=3, micro=0)
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=50, **TINY))
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    snap = runner.wait(run_id)
    assert snap.state == "stopped" and snap.message == "stopped by the user"
    assert gate.started == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]  # nothing began after the stop
    assert snap.steps_done == 2  # step 3's window was abandoned after its first micro-batch
    assert runner.store.read_status(run_id)["state"] == "stopped"
    assert_rows_intact(runner.store, run_id, 2)


def test_a_reloaded_tab_attaches_to_the_run_in_progress(runs_dir, gate):
    from dashboard import server

    gate.hold(step=2)  # the run stays in progress until the reloaded tab has been looked at
    first = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    first.selectbox(key="cfg_model").select("mlp")
    first.number_input(key="cfg_max_steps").set_value(4)
    first.button(key="start").click().run()
    (run_id,) = first.session_state["session_runs"]
    reloaded = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()  # a new session
    assert not reloaded.exception
    texts = [p.proto.text for p in reloaded.get("progress")]
    assert any("running: step 1 of 4" in text for text in texts), texts  # held at step 2: one step done
    assert not reloaded.button(key="stop").disabled
    gate.release()
    assert server.get_runner().wait(run_id).state == "finished"


def test_two_sessions_pressing_start_at_once_one_runs_one_queues_nothing_mixed(runs_dir, gate):
    from dashboard import server

    gate.hold(step=1)  # the first run to start stays running until both sessions have been looked at
    sessions = [AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run() for _ in range(2)]
    for at, k in zip(sessions, (2, 3)):
        at.selectbox(key="cfg_model").select("mlp")
        at.number_input(key="cfg_accum_steps").set_value(k)
        at.number_input(key="cfg_max_steps").set_value(3)
        at.run()
    for at in sessions:
        at.button(key="start").click().run()
    ids = [at.session_state["session_runs"][0] for at in sessions]
    states = {server.get_runner().snapshot(i).state for i in ids}
    assert states == {"running", "queued"}
    queued = sessions[[server.get_runner().snapshot(i).state for i in ids].index("queued")]
    assert any("queued: position 1" in p.proto.text for p in queued.run().get("progress"))
    gate.release()
    for run_id, k in zip(ids, (2, 3)):
        assert server.get_runner().wait(run_id).state == "finished"
        frame = server.get_runner().store.read_metrics(run_id)
        assert len(frame) == 3 and set(frame["micro_batches"]) == {k}


KILL_SCRIPT = """
import sys, time
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
runner = Runner(sys.argv[1])
run_id = runner.submit(RunConfig(device="cpu", model="mlp", micro_batch_size=4, accum_steps=1, epochs=1000))
print(run_id, flush=True)
runner.wait(run_id)
"""


@pytest.mark.multiprocess
def test_a_killed_server_leaves_an_interrupted_run_whose_rows_all_read_back(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(tmp_path)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    run_id = child.stdout.readline().strip()
    metrics = tmp_path / run_id / "metrics.csv"
    while metrics.read_text().count("\n") < 200:  # header + 199 rows, however long that takes here
        assert child.poll() is None, "the server ended before it was killed"
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
