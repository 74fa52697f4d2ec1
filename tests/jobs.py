"""Multi-process runs (torchrun, gloo on the CPU) against single-process oracles: what the DDP and FSDP tests share.

Several configs are trained one after the other in one spawned job (spawned_runs: torchrun alone costs seconds),
shared between the tests that read them; the single-process references train in the test process.
"""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import psutil
import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from gaccum_core.train.accumulation import plan_epoch
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from spawned import run_ranks

WORLD = 2
ATOL = RTOL = 1e-5
WAIT_S = 120.0  # generous: only a hung job gets near it



@functools.lru_cache(maxsize=None)
def reference(config: RunConfig) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """One process in the test process: its final parameters and its step rows."""
    assert config.world_size == 1
    engine = Engine(config)
    rows = RowKeeper()
    assert engine.run(rows) == RunState.FINISHED
    return {k: v.detach().clone() for k, v in engine.model.state_dict().items()}, rows.steps


def one_process_references(config: RunConfig) -> dict[str, RunConfig]:
    """The same global batches in one process (nothing to shard): micro-batches of world*b (same k), and one
    batch per window."""
    world, b, k = config.world_size, config.micro_batch_size, config.accum_steps
    single = config.replace(nproc=1, nnodes=1, sharding="ddp", fsdp_sync="every", fsdp_reshard_after_backward="on")
    return {f"1 process b={world * b} k={k}": single.replace(micro_batch_size=world * b),
            f"1 process b={world * b * k} k=1": single.replace(micro_batch_size=world * b * k, accum_steps=1)}


def initial_state(config: RunConfig) -> dict[str, torch.Tensor]:
    data = load_data(config)
    return build_seeded_model(config, data.input_shape, data.num_classes).state_dict()


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[name] - b[name]).abs().max().item() for name in a)


@contextlib.contextmanager
def runner_with_faults(folder: Path, faults: str) -> Iterator[tuple[Runner, pytest.MonkeyPatch]]:
    """A runner (thread executor) whose jobs' ranks, every one, arm GACCUM_FAULTS=faults, for a module fixture;
    the patch, to change the faults between jobs. Closed, and the environment put back, after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("GACCUM_FAULTS_RANK", raising=False)
        patch.setenv("GACCUM_FAULTS", faults)
        runner = Runner(str(folder), executor="thread")
        try:
            yield runner, patch
        finally:
            runner.close()


class RankRun:
    """One config trained by a spawned job's ranks on the engine: its config, step rows (the columns metrics.csv
    holds) and whole state_dict."""

    def __init__(self, config: RunConfig, run: dict) -> None:
        self.config = config
        self.metrics = pd.DataFrame(run["steps"])
        self.model = run["model"]


def spawned_runs(configs: list[RunConfig], out_dir: Path) -> dict[RunConfig, RankRun]:
    """Each config trained in turn by the same WORLD spawned processes (one start for them all, not a torchrun
    job each; tests/configs_rank.py): the runs by config."""
    import configs_rank

    with pytest.MonkeyPatch.context() as patch:  # no fault armed in the ranks (they read these on import)
        patch.delenv("GACCUM_FAULTS", raising=False)
        patch.delenv("GACCUM_FAULTS_RANK", raising=False)
        run_ranks(configs_rank.main, WORLD, (WORLD, str(out_dir), configs), WAIT_S * len(configs))
    return {config: RankRun(config, run) for config, run in zip(configs, torch.load(out_dir / "rank0.pt"))}


def assert_matches_references(job: RankRun) -> dict[str, float]:
    """The 2-process parameters and step rows equal both 1-process references; the largest |diff| of each."""
    initial = initial_state(job.config)
    # The runs really trained: equality below is not two untouched initialisations agreeing.
    assert max_diff(job.model, initial) > 100 * ATOL
    diffs = {}
    for name, config in one_process_references(job.config).items():
        state, rows = reference(config)
        assert state.keys() == job.model.keys()
        for key in state:
            torch.testing.assert_close(job.model[key], state[key], atol=ATOL, rtol=RTOL,
                                       msg=lambda m, key=key, name=name: f"{key} vs {name}: {m}")
        assert job.metrics["samples"].tolist() == [r["samples"] for r in rows]
        assert job.metrics["loss"].tolist() == pytest.approx([r["loss"] for r in rows], rel=1e-5)
        assert job.metrics["grad_norm"].tolist() == pytest.approx([r["grad_norm"] for r in rows], rel=1e-5)
        diffs[name] = max_diff(job.model, state)
    print(f"\n{job.config.optimizer} ({job.config.fake_samples} samples) largest |param diff|: {diffs}")
    return diffs


def last_windows(config: RunConfig):
    """Every epoch's last window as the job plans it (over global micro-batches of world*b)."""
    return plan_epoch(config.fake_samples, config.world_size * config.micro_batch_size, config.accum_steps)[-1]


def is_rank(proc: psutil.Process) -> bool:
    try:
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return "gaccum_core" in cmdline and "worker" in cmdline


def job_processes(runner: Runner, run_id: str, timeout: float = 60.0) -> list[psutil.Process]:
    """torchrun and every process under it, once both ranks are running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = runner.worker_pid(run_id)
        if pid is not None:
            try:
                top = psutil.Process(pid)
                below = top.children(recursive=True)
            except psutil.NoSuchProcess:
                below = []
            if sum(is_rank(p) for p in below) >= WORLD:
                return [top, *below]
        time.sleep(0.05)
    pytest.fail(f"never saw torchrun with {WORLD} rank processes for run {run_id}")


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            # is_running() also checks the create time, so a reused pid is not mistaken for ours.
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def assert_none_survive(procs: list[psutil.Process], grace_s: float = 10.0) -> None:
    deadline = time.monotonic() + grace_s
    while running(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = running(procs)
    assert not survivors, [(p.pid, p.cmdline()) for p in survivors]


def wait_for_rows(runner: Runner, run_id: str, rows: int = 1, timeout: float = 90.0) -> None:
    """Until the run has logged `rows` step rows (or ended)."""
    deadline = time.monotonic() + timeout
    while len((snapshot := runner.snapshot(run_id)).metrics) < rows and not snapshot.done:
        assert time.monotonic() < deadline, f"{rows} metrics rows never arrived"
        time.sleep(0.05)


def stop_and_assert_stopped(runner: Runner, run_id: str, procs: list[psutil.Process], killed: bool):
    """Stop the running job: it ends as 'stopped' (killed after the grace, or not) with gap-free rows, on disk
    too, and no process of it survives; its snapshot."""
    runner.stop(run_id)
    stopped_at = time.monotonic()
    snapshot = runner.wait(run_id, timeout=60)  # well below the 120 s pause of the killed case
    print(f"\nstop ({'killed' if killed else 'agreed'}) ended the run {time.monotonic() - stopped_at:.1f} s after the "
          f"request: {snapshot.message!r}, {len(snapshot.metrics)} rows")
    assert snapshot.done, "the job did not end after the stop"
    assert snapshot.state == RunState.STOPPED, snapshot.message
    assert ("killed" in snapshot.message) == killed, snapshot.message
    steps = [row["step"] for row in snapshot.metrics]
    assert steps == list(range(1, len(steps) + 1)) and steps
    assert len(steps) < snapshot.total_steps
    assert runner.store.read_metrics(run_id)["step"].tolist() == steps
    assert_none_survive(procs)
    return snapshot
