"""Time left after a Resume: at the pace of the steps trained, not the steps of every segment over the time
of the last one (issue 33: "step 180 · 5 s left", then 25 s more)."""

import time

import pytest

from gaccum_core import faults
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import TrackedRun
from gaccum_core.states import RunState
from gaccum_core.train.metrics import RowKeeper

TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2)


def _resumed_run(stopped_at: int, now_at: int, total: int, step_s: float, startup_s: float) -> TrackedRun:
    """A run stopped after `stopped_at` steps and resumed: its rows to `now_at`, each step `step_s` of training
    (wall_time_s carries on across the resume, as the checkpoint keeps it), this segment started `startup_s`
    before its first step."""
    rows = RowKeeper()
    for step in range(1, now_at + 1):
        rows.log_step({"step": step, "wall_time_s": step * step_s})
    run = TrackedRun("r", RunConfig(**TINY), "cpu", rows, state=RunState.RUNNING, total_steps=total)
    run.started = time.monotonic() - startup_s - (now_at - stopped_at) * step_s
    return run


def test_time_left_after_a_resume_goes_at_the_pace_of_the_steps():
    """The issue's run: stopped at 141, resumed, at step 180 of 360; 0.5 s a step all along."""
    run = _resumed_run(stopped_at=141, now_at=180, total=360, step_s=0.5, startup_s=1.0)
    true_left = (360 - 180) * 0.5
    eta = run.snapshot(0).eta_s
    assert eta is not None and true_left / 2 <= eta <= true_left * 2, (eta, true_left)


def test_a_run_that_never_stopped_keeps_its_time_left():
    run = _resumed_run(stopped_at=0, now_at=40, total=100, step_s=0.25, startup_s=0.0)
    assert run.snapshot(0).eta_s == pytest.approx(60 * 0.25, rel=0.05)
    assert _resumed_run(0, 0, 100, 0.25, 0.0).snapshot(0).eta_s is None  # no step yet: no estimate


def test_a_real_stopped_and_resumed_run_says_the_time_it_then_takes(tmp_path, gate):
    """Each step sleeps 0.1 s (micro-batch 1), so the pace is the same before and after the stop; the snapshot
    taken at step 27 of 30 (3 steps after the resume) says the time the last 3 steps then took, within 2x."""
    for step in range(1, 31):
        faults.arm(faults.Fault("slow", step=step, micro=1, seconds=0.1))
    runner = Runner(tmp_path)
    gate.hold(25)
    run_id = runner.submit(RunConfig(max_steps=30, **TINY))
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert runner.wait(run_id, timeout=300).state == RunState.STOPPED
    gate.hold(28)
    runner.resume(run_id)
    gate.wait_until_held()
    held = runner.snapshot(run_id)
    gate.release()
    assert runner.wait(run_id, timeout=300).state == RunState.FINISHED
    wall = {int(row["step"]): row["wall_time_s"] for row in runner.store.metric_rows(run_id)}
    assert held.steps_done == 27 and sorted(wall) == list(range(1, 31))
    assert all(wall[s] < wall[s + 1] for s in range(1, 30))  # wall_time_s carries on across the resume
    true_left = wall[30] - wall[27]
    assert held.eta_s is not None and true_left / 2 <= held.eta_s <= true_left * 2, (held.eta_s, true_left)
