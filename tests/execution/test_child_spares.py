"""The worker-process executor's warm spares (tests/execution/test_child.py: how a child ends): queued runs each get
a worker, a spare that died is replaced, and a warm torchrun job trains a data-parallel run as its own torchrun
would, or is killed when the run wants another N. A file apart from test_child.py so that xdist runs the two
at once."""

from __future__ import annotations

import os
import signal

import pytest

from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from workers import CHILD_CONFIG as CONFIG, CHILD_WAIT_S as WAIT_S, ended, gone
from workers import spawn  # noqa: F401 - the fixture

pytestmark = pytest.mark.multiprocess


def test_runs_queue_behind_each_other_and_each_gets_a_worker(spawn):
    """Three runs submitted at once run one after another, each in its own process (the warm spare's)."""
    runner = spawn(warm_spare=True)
    ids = [runner.submit(CONFIG.replace(max_steps=2, seed=seed)) for seed in range(3)]
    snapshots = [ended(runner, run_id) for run_id in ids]
    assert [s.state for s in snapshots] == [RunState.FINISHED] * 3
    assert len({runner.worker_pid(run_id) for run_id in ids}) == 3
    assert snapshots[0].metrics[0]["loss"] != snapshots[1].metrics[0]["loss"]  # the seeds reached the workers


def test_a_spare_worker_that_died_while_waiting_is_replaced_at_start(spawn):
    """The warm spare was killed (OOM killer, a user) before Start: the run gets a fresh worker and finishes."""
    runner = spawn(warm_spare=True)
    spare_pid = runner.spare_pid
    assert spare_pid is not None
    os.kill(spare_pid, signal.SIGKILL)
    assert gone(spare_pid)
    snapshot = ended(runner, runner.submit(CONFIG.replace(max_steps=2)))
    assert snapshot.state == RunState.FINISHED, snapshot.message
    assert runner.worker_pid(snapshot.run_id) != spare_pid


def test_a_warm_torchrun_job_trains_the_run_as_its_own_torchrun_would(spawn, monkeypatch):
    """Runner.prepare starts a data-parallel run's torchrun job before Start (the Train page does when
    N > 1 is set); the run it is given ends with the weights of a run under a torchrun of its own."""
    import torch

    from gaccum_core.execution import spares

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

    from gaccum_core.execution import spares

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
