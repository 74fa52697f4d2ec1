"""A run whose model draws random numbers (dropout) is reproducible, and its resume exact (issue 40, item 0).

The engine seeds training's randomness from the run's seed (each rank its own stream): two runs are bit-equal
whatever the process's global RNG did before, and a run killed or stopped, then resumed, ends bit-equal to the
uninterrupted run. One process: stopped through the runner, and its worker SIGKILLed. Two (spawned, gloo, on the
engine, one launch for all): resumed from a checkpoint the job went on past (what a kill leaves), then stopped at
a step the ranks agree on. The model, a factory with nn.Dropout(0.3) in its head, draws after every start;
evaluations (every 3 steps) fall between checkpoints.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from jobs import WAIT_S, WORLD, wait_for_rows
from spawned import run_ranks
from training import trained
from workers import close_now

FACTORY = '''
import torch.nn as nn

def build(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(32, num_classes))
'''
STEPS = 12
PACED = ",".join(f"slow@{s}:0*0.15" for s in range(1, STEPS + 1))  # every step 0.15 s longer: time to act


@pytest.fixture(scope="module")
def dropout(tmp_path_factory) -> RunConfig:
    """AdamW on digits, windows of 2 micro-batches of 8, a checkpoint every 2 steps, an evaluation every 3."""
    path = tmp_path_factory.mktemp("dropout") / "dropout_models.py"
    path.write_text(FACTORY, encoding="utf-8")
    return RunConfig(model=f"{path}:build", dataset="digits", micro_batch_size=8, accum_steps=2, max_steps=STEPS,
                     optimizer="adamw", lr=1e-2, seed=11, eval_every=3, checkpoint_every=2, device="cpu")


@pytest.fixture(scope="module")
def reference(dropout, tmp_path_factory):
    """The uninterrupted 1-process run (in this process's runner thread): its store and id."""
    runner = Runner(tmp_path_factory.mktemp("reference"))
    run_id = runner.submit(dropout)
    assert _ended(runner, run_id).state == RunState.FINISHED
    runner.close()
    return runner.store, run_id


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


def _assert_same_run(store_a, run_a: str, store_b, run_b: str) -> None:
    """torch.equal weights; identical loss, grad_norm and test_loss columns, each step once."""
    a, b = store_a.load_model(run_a), store_b.load_model(run_b)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    ma, mb = store_a.read_metrics(run_a), store_b.read_metrics(run_b)
    assert mb["step"].tolist() == list(range(1, STEPS + 1))
    for column in ("loss", "grad_norm"):
        assert ma[column].equals(mb[column]), column
    assert store_a.read_evals(run_a)["test_loss"].equals(store_b.read_evals(run_b)["test_loss"])


def test_two_runs_with_dropout_are_bit_equal_whatever_the_global_rng_did(dropout):
    """The same settings give the same run, the global RNG reseeded and drawn from before each; the run leaves
    the global RNG as it found it; and its dropout does draw (without it the run differs)."""
    torch.manual_seed(1)
    before = torch.get_rng_state()
    first, first_rows = trained(dropout)
    assert torch.equal(torch.get_rng_state(), before)  # the run drew from its own generators only
    torch.manual_seed(2)
    torch.rand(1000)
    second, second_rows = trained(dropout)
    assert torch.equal(first, second)
    assert [r["loss"] for r in first_rows.steps] == [r["loss"] for r in second_rows.steps]
    assert not torch.equal(first, trained(dropout.replace(no_dropout=True))[0])


def test_a_run_stopped_mid_window_and_resumed_equals_the_uninterrupted_run(dropout, reference, tmp_path, gate):
    """Stopped inside step 5's window (after the evaluation at step 3), resumed in this process: bit-equal."""
    runner = Runner(tmp_path)
    gate.hold(5, 0)
    run_id = runner.submit(dropout)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert _ended(runner, run_id).state == RunState.STOPPED
    assert run_checkpoints(runner.store, run_id).load()["position"]["micro"] == 1
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    _assert_same_run(*reference, runner.store, run_id)
    runner.close()


@pytest.mark.multiprocess
def test_a_sigkilled_worker_resumes_to_the_uninterrupted_run(dropout, reference, tmp_path, monkeypatch):
    """The worker process SIGKILLed after 5 steps: resumed (from step 4's checkpoint) in a new one, bit-equal."""
    monkeypatch.setenv("GACCUM_FAULTS", PACED)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the reference here: bit-equality needs the same kernels
    runner = Runner(tmp_path, executor="process", warm_spare=False)
    try:
        run_id = runner.submit(dropout)
        wait_for_rows(runner, run_id, rows=5, timeout=WAIT_S)
        os.kill(runner.worker_pid(run_id), signal.SIGKILL)
        assert _ended(runner, run_id).state == RunState.FAILED
        assert 4 <= run_checkpoints(runner.store, run_id).load()["counters"]["step"] < STEPS
        monkeypatch.delenv("GACCUM_FAULTS")
        runner.resume(run_id)
        assert _ended(runner, run_id).state == RunState.FINISHED
    finally:
        close_now(runner)
    _assert_same_run(*reference, runner.store, run_id)


@pytest.mark.multiprocess
def test_two_processes_are_reproducible_and_resume_exactly_after_a_kill_and_a_stop(dropout, tmp_path):
    """2 processes (spawned, gloo) on the engine: the job run twice, the global RNG moved in between, is bit-equal;
    resumed from the step-4 checkpoint the first run left behind it (a kill's remains), stopped at a step the ranks
    agree on and resumed again, it ends bit-equal, with the same losses. Each rank drew its own masks: the ranks'
    generators differ in every checkpoint, and a checkpoint at the same step holds the same ones."""
    import dropout_rank

    run_ranks(dropout_rank.main, WORLD, (WORLD, str(tmp_path), dropout.replace(nproc=WORLD)), WAIT_S)
    for rank in range(WORLD):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["ended"] and dropout_rank.KILLED_AT < result["stopped"] < STEPS, result["stopped"]
        assert torch.equal(result["first"], result["again"]), rank
        assert torch.equal(result["first"], result["resumed"]), rank
        first, again, resumed = result["losses"]
        assert first == again and first[dropout_rank.KILLED_AT:] == resumed, rank
    checkpoints = torch.load(tmp_path / "rank0.pt")["checkpoints"]  # rank 0 keeps them
    by_step: dict[int, list] = {}
    for step, rngs in checkpoints:
        assert len(rngs) == WORLD and not torch.equal(rngs[0]["torch"], rngs[1]["torch"]), step
        by_step.setdefault(step, []).append(rngs)
    assert any(len(same) > 1 for same in by_step.values())  # the stopped run's last checkpoint and the first's
    for same in by_step.values():
        assert all(torch.equal(a[r]["torch"], b[r]["torch"]) for a, b in zip(same, same[1:]) for r in range(WORLD))
