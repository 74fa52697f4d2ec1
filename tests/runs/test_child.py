"""The worker-process executor: a run trains in a child process and ends in the right state, rows intact,
however the child ends: finished, stopped mid-window, hung and killed, killed from outside, failing,
or failing to release its memory. No run is ever left running by a dead worker."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.runner import Runner
from gaccum_core.states import RunState
from workers import close_now

pytestmark = pytest.mark.multiprocess

CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=16, accum_steps=3, max_steps=6, device="cpu")
WAIT_S = 180  # only so a broken test fails instead of hanging; passing runs end in seconds


@pytest.fixture
def spawn(tmp_path, monkeypatch):
    """Makes process-executor runners whose workers inherit `faults` (GACCUM_FAULTS); closes them after.

    warm_spare=True keeps a warm spare, as the dashboard does, for the tests of handing runs to it; the others
    start a worker per run, so that no spare warmed after the test's last run is killed at close mid-import
    (seconds of CPU on a machine the whole suite shares)."""
    runners = []

    def make(faults: str = "", stop_grace_s: float = 5.0, warm_spare: bool = False) -> Runner:
        monkeypatch.setenv("GACCUM_FAULTS", faults)  # the test's workers (and a spare, spawned now) inherit it
        runner = Runner(tmp_path / f"runs{len(runners)}", executor="process", stop_grace_s=stop_grace_s,
                        warm_spare=warm_spare)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        close_now(runner)


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended: {snapshot.state}"
    return snapshot


def _rows_after(runner: Runner, run_id: str, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(runner.snapshot(run_id).metrics) < count:
        assert time.monotonic() < deadline and not runner.snapshot(run_id).done, "the run never logged its rows"
        time.sleep(0.05)


def _steps(runner: Runner, run_id: str) -> list[int]:
    return runner.store.read_metrics(run_id)["step"].tolist()


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_a_run_in_a_worker_process_writes_the_rows_the_thread_executor_writes(spawn, tmp_path):
    """Same config, same rows: the child's snapshot rows are read back from its CSV exactly (losses equal)."""
    runner = spawn()
    run_id = runner.submit(CONFIG)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FINISHED and snapshot.total_steps == 6 and snapshot.device == "CPU"
    assert runner.worker_pid(run_id) != os.getpid()
    in_thread = Runner(tmp_path / "thread", executor="thread")
    reference = _ended(in_thread, in_thread.submit(CONFIG))
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
    snapshot = _ended(runner, run_id)
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
    snapshot = _ended(runner, run_id)
    assert time.monotonic() - began < 60, "the hung worker was not killed"
    assert snapshot.state == RunState.STOPPED and "killed" in snapshot.message
    assert _steps(runner, run_id) == [1, 2] and _gone(pid)


def test_a_child_killed_from_outside_fails_with_its_signal_and_the_next_run_works(spawn):
    """SIGKILL (the OOM killer, a user's kill -9): failed with the signal named, never left running."""
    runner = spawn("slow@3:0*120", warm_spare=True)
    run_id = runner.submit(CONFIG)
    _rows_after(runner, run_id, 2)
    os.kill(runner.worker_pid(run_id), signal.SIGKILL)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FAILED
    assert "SIGKILL" in snapshot.message and "without writing a final state" in snapshot.message
    assert runner.store.read_status(run_id)["state"] == "failed"
    assert _steps(runner, run_id) == [1, 2]
    next_run = _ended(runner, runner.submit(CONFIG.replace(max_steps=1)))  # a fresh spare: the fault fired only once
    assert next_run.state == RunState.FINISHED


def test_a_child_whose_memory_release_raises_fails_the_run_with_both_stories(spawn):
    """A CUDA-style error in the cleanup after training: failed, saying so, with every row kept."""
    runner = spawn("cleanup@0")
    run_id = runner.submit(CONFIG)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FAILED
    assert "releasing CPU's memory" in snapshot.message and "illegal memory access" in snapshot.message
    assert "it had finished" in snapshot.message
    assert _steps(runner, run_id) == list(range(1, 7))
    assert "illegal memory access" in runner.store.read_traceback(run_id)


def test_an_error_in_the_child_fails_the_run_with_its_message_and_traceback(spawn):
    """An exception inside training: the child writes failed with the message and the traceback."""
    runner = spawn("error@4")
    run_id = runner.submit(CONFIG)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FAILED and "injected fault: an error at step 4" in snapshot.message
    assert _steps(runner, run_id) == [1, 2, 3]
    assert "Traceback" in runner.store.read_traceback(run_id)


def test_runs_queue_behind_each_other_and_each_gets_a_worker(spawn):
    """Three runs submitted at once run one after another, each in its own process (the warm spare's)."""
    runner = spawn(warm_spare=True)
    ids = [runner.submit(CONFIG.replace(max_steps=2, seed=seed)) for seed in range(3)]
    snapshots = [_ended(runner, run_id) for run_id in ids]
    assert [s.state for s in snapshots] == [RunState.FINISHED] * 3
    assert len({runner.worker_pid(run_id) for run_id in ids}) == 3
    assert snapshots[0].metrics[0]["loss"] != snapshots[1].metrics[0]["loss"]  # the seeds reached the workers


ORPHAN_SCRIPT = """
import os, sys, time
from gaccum_core.config import RunConfig
from gaccum_core.runs.runner import Runner
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
    from gaccum_core.runs.worker import ORPHANED

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
    assert _gone(pid)
    steps = store.read_metrics(run_id)["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 50


def test_a_spare_worker_that_died_while_waiting_is_replaced_at_start(spawn):
    """The warm spare was killed (OOM killer, a user) before Start: the run gets a fresh worker and finishes."""
    runner = spawn(warm_spare=True)
    spare_pid = runner.spare_pid
    assert spare_pid is not None
    os.kill(spare_pid, signal.SIGKILL)
    assert _gone(spare_pid)
    snapshot = _ended(runner, runner.submit(CONFIG.replace(max_steps=2)))
    assert snapshot.state == RunState.FINISHED, snapshot.message
    assert runner.worker_pid(snapshot.run_id) != spare_pid


def test_a_warm_torchrun_job_trains_the_run_as_its_own_torchrun_would(spawn, monkeypatch):
    """Runner.prepare starts a data-parallel run's torchrun job before Start (the Train page does when
    N > 1 is set); the run it is given ends with the weights of a run under a torchrun of its own."""
    import torch

    from gaccum_core.runs import spares

    # No warm spare worker beside the warm job: this runner is given a data-parallel run only, and a spare
    # would import torch for nothing (seconds of CPU). Were the run handed to a spare, it would fail here.
    monkeypatch.setattr(spares, "spawn_spare", lambda: None)
    config = CONFIG.replace(nproc=2, micro_batch_size=4)
    warm = spawn(warm_spare=True)
    warm.prepare(config)
    job_pid = warm._spare_job._job.proc.pid  # noqa: SLF001 - which process the run must be given to
    run_id = warm.submit(config)
    assert warm.wait(run_id, timeout=WAIT_S).state == RunState.FINISHED
    assert warm.worker_pid(run_id) == job_pid  # trained by the warm job, not a new torchrun
    assert warm.store.torchrun_log_dir(run_id).is_dir()  # the ranks' logs kept with the run
    cold = spawn()
    own = cold.submit(config)
    assert cold.wait(own, timeout=WAIT_S).state == RunState.FINISHED
    assert cold.worker_pid(own) != job_pid
    warm_weights, own_weights = warm.store.load_model(run_id), cold.store.load_model(own)
    assert all(torch.equal(warm_weights[k], own_weights[k]) for k in own_weights)


def test_a_warm_job_for_another_n_is_not_given_the_run_and_is_killed(tmp_path, monkeypatch):
    import subprocess
    import sys

    from gaccum_core.runs import spares

    jobs = []

    def fake_job(config, spare_dir):  # a process standing for a torchrun job: nothing trains here
        jobs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return jobs[-1]

    monkeypatch.setattr(spares, "spawn_spare_job", fake_job)
    spare = spares.SpareJob(keep=True)
    spare.prepare(CONFIG.replace(nproc=2))
    spare.prepare(CONFIG.replace(nproc=2))  # the same N: the waiting job is kept
    assert len(jobs) == 1
    store = Runner(tmp_path, executor="thread").store
    assert spare.take(store, "any", CONFIG.replace(nproc=3)) is None  # another N: a torchrun of its own
    assert jobs[0].wait(timeout=10) is not None  # and the unused job is killed
    spare.prepare(CONFIG)  # N = 1: no job
    assert len(jobs) == 1 and spare.take(store, "any", CONFIG.replace(nproc=2)) is None
    spare.close()
