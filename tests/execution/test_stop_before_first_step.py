"""Start → Stop before the first optimizer step: the run ends stopped and says so, never "killed as hung".

The thread executor (the run's engine sees the stop before its first step ends), a worker process still
starting (importing torch, loading data) or stuck in its first micro-batch, and a torchrun job still
starting its ranks."""

from __future__ import annotations

import time

import psutil
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.supervisor import stopped_before_first_step
from gaccum_core.states import RunState

CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=16, accum_steps=3, max_steps=6, device="cpu")
WAIT_S = 180  # only so a broken test fails instead of hanging; passing runs end in seconds


def _stopped(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended: {snapshot.state}"
    assert snapshot.state == RunState.STOPPED, snapshot.message
    status = runner.store.read_status(run_id)
    assert status["state"] == "stopped" and status["message"] == snapshot.message
    return snapshot


def _gone(pid: int | None) -> bool:
    deadline = time.monotonic() + 10
    while pid is not None and time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return pid is not None


def test_the_words_name_the_step_a_resumed_run_stopped_at():
    assert stopped_before_first_step(0) == "stopped before its first step"
    assert stopped_before_first_step(4) == "stopped before its first step after resuming at step 4"


def test_a_thread_run_stopped_in_its_first_window_says_it_stopped_before_its_first_step(tmp_path, gate):
    gate.hold(step=1, micro=0)
    runner = Runner(tmp_path)
    run_id = runner.submit(CONFIG)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    snapshot = _stopped(runner, run_id)
    assert snapshot.message == "stopped before its first step" and snapshot.steps_done == 0
    assert runner.store.read_metrics(run_id).empty


def test_a_resumed_thread_run_stopped_before_its_next_step_names_where_it_resumed(tmp_path, gate):
    gate.hold(step=3, micro=0)  # the held micro-batch runs, the stop is seen before the next one
    runner = Runner(tmp_path)
    run_id = runner.submit(CONFIG)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert _stopped(runner, run_id).message == "stopped by the user"  # two steps done: an ordinary stop
    gate.hold(step=3, micro=1)  # the resumed run goes on in step 3's window (of 3), then is stopped again
    runner.resume(run_id)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    snapshot = _stopped(runner, run_id)
    assert snapshot.message == "stopped before its first step after resuming at step 2"
    assert runner.store.read_metrics(run_id)["step"].tolist() == [1, 2]


def _wait_for_worker(runner: Runner, run_id: str) -> None:
    """Until the run's worker process (or torchrun) is started: it then still imports torch for a second or more."""
    deadline = time.monotonic() + WAIT_S
    while runner.worker_pid(run_id) is None:
        assert time.monotonic() < deadline, "the run's worker never started"
        time.sleep(0.01)


@pytest.fixture
def process_runner(tmp_path, monkeypatch):
    """A process-executor runner (no warm spare: each run's worker starts when the run does), closed after."""
    made: list[Runner] = []

    def make(faults: str = "", stop_grace_s: float = 5.0) -> Runner:
        monkeypatch.setenv("GACCUM_FAULTS", faults)
        made.append(Runner(tmp_path / f"runs{len(made)}", executor="process", stop_grace_s=stop_grace_s,
                           warm_spare=False))
        return made[-1]

    yield make
    for runner in made:
        runner.close()


@pytest.mark.multiprocess
def test_a_worker_stopped_while_it_starts_ends_stopped_before_its_first_step(process_runner):
    """Stop right after Start, while the worker still imports torch: ended at once, not 'killed as hung'."""
    runner = process_runner()
    run_id = runner.submit(CONFIG)
    _wait_for_worker(runner, run_id)
    runner.stop(run_id)
    snapshot = _stopped(runner, run_id)
    assert snapshot.message == "stopped before its first step"
    assert snapshot.steps_done == 0 and runner.store.read_metrics(run_id).empty
    assert _gone(runner.worker_pid(run_id))


@pytest.mark.multiprocess
def test_a_worker_stuck_in_its_first_micro_batch_is_killed_and_the_message_says_before_its_first_step(
        process_runner):
    """The first micro-batch sleeps 120 s, so the stop is not seen: killed after the grace, said to have
    stopped before its first step (and why it was killed)."""
    runner = process_runner("slow@1:0*120", stop_grace_s=1.0)
    run_id = runner.submit(CONFIG)
    deadline = time.monotonic() + WAIT_S
    while not runner.store.read_status(run_id).get("segments"):  # the worker began training
        assert time.monotonic() < deadline, "the worker never began the run"
        time.sleep(0.05)
    runner.stop(run_id)
    snapshot = _stopped(runner, run_id)
    assert snapshot.message.startswith("stopped before its first step: ") and "killed" in snapshot.message
    assert snapshot.steps_done == 0


@pytest.mark.multiprocess
def test_a_torchrun_job_stopped_while_its_ranks_start_ends_stopped_before_its_first_step(tmp_path):
    runner = Runner(tmp_path, executor="thread")  # a data-parallel run is a torchrun job under either executor
    run_id = runner.submit(CONFIG.replace(nproc=2, micro_batch_size=4))
    _wait_for_worker(runner, run_id)
    torchrun = psutil.Process(runner.worker_pid(run_id))
    runner.stop(run_id)
    snapshot = _stopped(runner, run_id)
    assert snapshot.message == "stopped before its first step" and snapshot.steps_done == 0
    assert _gone(torchrun.pid)
