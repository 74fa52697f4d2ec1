"""The worker-process executor: a run trains in a child process and ends in the right state, rows intact,
however the child ends: finished, stopped mid-window, hung and killed, killed from outside, failing,
or failing to release its memory. No run is ever left running by a dead worker. Handing runs to warm
spares and warm torchrun jobs: test_child_spares.py."""

from __future__ import annotations

import os
import signal
import time

import pytest

from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from workers import CHILD_CONFIG as CONFIG, CHILD_WAIT_S as WAIT_S, ended, gone
from workers import spawn  # noqa: F401 - the fixture

pytestmark = pytest.mark.multiprocess


def _rows_after(runner: Runner, run_id: str, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(runner.snapshot(run_id).metrics) < count:
        assert time.monotonic() < deadline and not runner.snapshot(run_id).done, "the run never logged its rows"
        time.sleep(0.05)


def _steps(runner: Runner, run_id: str) -> list[int]:
    return runner.store.read_metrics(run_id)["step"].tolist()


def test_a_run_in_a_worker_process_writes_the_rows_the_thread_executor_writes(spawn, tmp_path):
    """Same config, same rows: the child's snapshot rows are read back from its CSV exactly (losses equal)."""
    runner = spawn()
    run_id = runner.submit(CONFIG)
    snapshot = ended(runner, run_id)
    assert snapshot.state == RunState.FINISHED and snapshot.total_steps == 6 and snapshot.device == "CPU"
    assert runner.worker_pid(run_id) != os.getpid()
    in_thread = Runner(tmp_path / "thread", executor="thread")
    reference = ended(in_thread, in_thread.submit(CONFIG))
    assert [row["loss"] for row in snapshot.metrics] == [row["loss"] for row in reference.metrics]
    assert [row["step"] for row in snapshot.metrics] == list(range(1, 7))
    assert [dict(row) for row in snapshot.evals][-1]["test_accuracy"] == reference.evals[-1]["test_accuracy"]
    assert runner.store.load_model(run_id).keys() == in_thread.store.load_model(reference.run_id).keys()


def test_stop_during_a_slow_micro_batch_ends_the_child_at_the_next_micro_batch(spawn):
    """Stopped while micro-batch 1 of step 3 sleeps 2 s: the worker stops before micro-batch 2, not killed."""
    runner = spawn("slow@3:1*2")
    run_id = runner.submit(CONFIG)
    _rows_after(runner, run_id, 2)
    runner.stop(run_id)
    snapshot = ended(runner, run_id)
    assert snapshot.state == RunState.STOPPED and snapshot.message == "stopped by the user"
    assert _steps(runner, run_id) == [1, 2] and len(snapshot.metrics) == 2


def test_a_hung_child_is_killed_after_the_grace_period_and_the_run_is_stopped_with_its_rows(spawn):
    """A micro-batch that sleeps 120 s cannot see the stop: after the grace period the child is killed."""
    runner = spawn("slow@3:0*120", stop_grace_s=1.0)
    run_id = runner.submit(CONFIG)
    _rows_after(runner, run_id, 2)
    pid = runner.worker_pid(run_id)
    began = time.monotonic()
    runner.stop(run_id)
    snapshot = ended(runner, run_id)
    assert time.monotonic() - began < 60, "the hung worker was not killed"
    assert snapshot.state == RunState.STOPPED and "killed" in snapshot.message
    assert _steps(runner, run_id) == [1, 2] and gone(pid)


def test_a_child_killed_from_outside_fails_with_its_signal_and_the_next_run_works(spawn):
    """SIGKILL (the OOM killer, a user's kill -9): failed with the signal named, never left running."""
    runner = spawn("slow@3:0*120", warm_spare=True)
    run_id = runner.submit(CONFIG)
    _rows_after(runner, run_id, 2)
    os.kill(runner.worker_pid(run_id), signal.SIGKILL)
    snapshot = ended(runner, run_id)
    assert snapshot.state == RunState.FAILED
    assert "SIGKILL" in snapshot.message and "without writing a final state" in snapshot.message
    assert runner.store.read_status(run_id)["state"] == "failed"
    assert _steps(runner, run_id) == [1, 2]
    next_run = ended(runner, runner.submit(CONFIG.replace(max_steps=1)))  # a fresh spare: the fault fired only once
    assert next_run.state == RunState.FINISHED


def test_a_child_whose_memory_release_raises_fails_the_run_with_both_stories(spawn):
    """A CUDA-style error in the cleanup after training: failed, saying so, with every row kept."""
    runner = spawn("cleanup@0")
    run_id = runner.submit(CONFIG)
    snapshot = ended(runner, run_id)
    assert snapshot.state == RunState.FAILED
    assert "releasing CPU's memory" in snapshot.message and "illegal memory access" in snapshot.message
    assert "it had finished" in snapshot.message
    assert _steps(runner, run_id) == list(range(1, 7))
    assert "illegal memory access" in runner.store.read_traceback(run_id)


def test_an_error_in_the_child_fails_the_run_with_its_message_and_traceback(spawn):
    """An exception inside training: the child writes failed with the message and the traceback."""
    runner = spawn("error@4")
    run_id = runner.submit(CONFIG)
    snapshot = ended(runner, run_id)
    assert snapshot.state == RunState.FAILED and "injected fault: an error at step 4" in snapshot.message
    assert _steps(runner, run_id) == [1, 2, 3]
    assert "Traceback" in runner.store.read_traceback(run_id)


ORPHAN_SCRIPT = """
import os, sys, time
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
runner = Runner(sys.argv[1], executor="process", warm_spare=False)  # no spare to outlive the run for nothing
run_id = runner.submit(RunConfig(model="mlp", micro_batch_size=16, accum_steps=3, max_steps=50, device="cpu"))
while not runner.snapshot(run_id).metrics:
    time.sleep(0.05)
print(run_id, runner.worker_pid(run_id), flush=True)
os._exit(0)  # the server dies without a word: no stop, no cleanup
"""


def test_a_worker_whose_server_died_stops_by_itself_and_says_why(tmp_path, monkeypatch):
    """The server process is gone (killed, crashed): its worker stops at the next micro-batch, keeps a GPU no longer."""
    import subprocess
    import sys

    from gaccum_core.runs.store import RunStore
    from gaccum_core.execution.worker import ORPHANED

    monkeypatch.setenv("GACCUM_FAULTS", "slow@3:1*2")  # the server dies while step 3 sleeps
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
    out = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path)], cwd=root, capture_output=True,
                         text=True, timeout=WAIT_S, check=True).stdout.split()
    run_id, pid = out[0], int(out[1])
    store = RunStore(tmp_path)
    deadline = time.monotonic() + WAIT_S
    while store.read_status(run_id)["state"] == "running":
        assert time.monotonic() < deadline, "the orphaned worker never stopped"
        time.sleep(0.1)
    status = store.read_status(run_id)
    assert status["state"] == "stopped" and status["message"] == ORPHANED
    assert gone(pid)
    steps = store.read_metrics(run_id)["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 50
