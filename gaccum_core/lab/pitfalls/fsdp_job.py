"""The FSDP traps: a 2-process gloo job started here (each rank `python -m gaccum_core.lab.pitfalls.fsdp_rank`),
its runs set against one big batch of the same samples in this process.

The job meets through a file in a temporary directory, writes its results there (rank 0) and is waited for
with a deadline: on a failure, a timeout or an interruption (a Streamlit rerun) both ranks are killed and
waited for, so no process outlives the call. Each trap's correct side is the engine's own FSDP run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.lab.pitfalls.catalog import FSDP_PITFALLS, case_config
from gaccum_core.lab.pitfalls.harness import loop_runner
from gaccum_core.lab.pitfalls.loops import big_batch
from gaccum_core.lab.pitfalls.result import PitfallResult, Snapshot, compare, distances

RANKS = 2
FSDP_STEPS = 10  # each step's collectives wait on both processes: a few seconds on 2 shared cores
JOB_TIMEOUT_S = 180.0
POLL_S = 0.05
RANK_MODULE = "gaccum_core.lab.pitfalls.fsdp_rank"
PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # the directory holding gaccum_core, for the ranks' imports
# These are the job's to set, not the caller's.
FIXED = {"nproc": "2", "nnodes": "1", "sharding": "fsdp", "device": "cpu (the 2 processes meet through gloo)",
         "fsdp_reshard_after_backward": "on for #1 and #2, off for #3", "train_samples": "the whole training set"}
# Each trap's own run and its correct side, by run name in the job's results (fsdp_loops.run_cases).
SIDES = {"fsdp_averaged_gradients": ("averaged_gradients", "engine"),
         "fsdp_divide_factor_on_root": ("divide_factor_on_root", "engine"),
         "fsdp_reshard_off_at_step": ("reshard_off_at_step", "engine_reshard_off")}
FIXES = {"fsdp_divide_factor_on_root": "divide_factor_on_every_unit", "fsdp_reshard_off_at_step": "reshard_every_unit"}


class FsdpJobError(RuntimeError):
    """The 2-process job failed or ran out of time; its processes have been ended."""


@dataclass(frozen=True)
class FsdpGallery:
    """The FSDP traps, each against the engine's FSDP run, and what the job observed beside the weights."""

    results: dict[str, PitfallResult]  # by FSDP_PITFALLS key, in its order
    first_step_grad_ratio: float  # averaged gradients: grad norm / the big batch's at step 1 (same weights)
    premul_sum_error: str  # what set_gradient_divide_factor(1.0) on every unit raises on gloo ('' if nothing)
    grad_none_at_step: bool  # reshard_after_backward off at the step: every .grad read None
    grad_none_after_reshard: bool  # any .grad still None after every unit's reshard()
    fix_distances: dict[str, float]  # trap → its written fix's largest weight distance to one big batch


def run_fsdp_pitfalls(steps: int = FSDP_STEPS, timeout_s: float = JOB_TIMEOUT_S, **overrides: Any) -> FsdpGallery:
    """Run the FSDP traps, the engine's FSDP runs and the traps' fixes on 2 processes for `steps` optimizer
    steps each, and measure every run against one big batch in this process."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError("steps", steps, "an integer ≥ 1")
    for name, value in FIXED.items():
        if name in overrides:
            raise ConfigError(name, overrides[name], f"left to the FSDP cases: {value}")
    config = case_config(next(iter(FSDP_PITFALLS)), **overrides)
    if config.is_text:
        raise ConfigError("dataset", config.dataset, "an image data set (the FSDP cases weight by samples)")
    runs, found = _run_job(config, steps, timeout_s)
    reference = loop_runner(config.replace(micro_batch_size=config.micro_batch_size * RANKS, nproc=1,
                                           sharding="ddp"), 0, steps)(big_batch)
    results = {key: compare(key, runs[trap], reference, runs[correct], reference)
               for key, (trap, correct) in SIDES.items()}
    fixes = {key: max(distances(runs[fix], reference)) for key, fix in FIXES.items()}
    return FsdpGallery(results, float(results["fsdp_averaged_gradients"].frame["grad_norm_ratio"].iloc[0]),
                       found["premul_sum_error"], found["grad_none_at_step"], found["grad_none_after_reshard"], fixes)


def _run_job(config: RunConfig, steps: int, timeout_s: float) -> tuple[dict[str, list[Snapshot]], dict[str, Any]]:
    """Start both ranks, wait for them within timeout_s, and read rank 0's results; FsdpJobError otherwise."""
    with tempfile.TemporaryDirectory(prefix="gaccum-fsdp-") as folder:
        job = Path(folder)
        ranks = [_start_rank(rank, job, config, steps) for rank in range(RANKS)]
        try:
            _wait(ranks, job, timeout_s)
        finally:
            for rank in ranks:  # a failed or timed-out job, or an interruption: end whatever still runs
                if rank.poll() is None:
                    rank.kill()
                rank.wait()
        found = torch.load(job / "found.pt", weights_only=True)
    runs = {name: _snapshots(run) for name, run in found.pop("runs").items()}
    return runs, found


def _start_rank(rank: int, job: Path, config: RunConfig, steps: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", RANK_MODULE, "--rank", str(rank), "--world-size", str(RANKS),
               "--store", str(job / "store"), "--out", str(job / "found.pt"), "--steps", str(steps),
               "--config", config.to_json(), "--parent", str(os.getpid())]
    with open(job / f"rank{rank}.log", "wb") as log:  # a file, not a pipe: a full pipe would block the rank
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def _wait(ranks: list[subprocess.Popen], job: Path, timeout_s: float) -> None:
    """Until every rank exits 0; FsdpJobError naming the first failed rank's last words, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [rank.poll() for rank in ranks]
        failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            raise _failure(failed[0], codes[failed[0]], job)
        if all(code == 0 for code in codes):
            break
        if time.monotonic() > deadline:
            raise FsdpJobError(f"the 2-process FSDP job did not finish within {timeout_s:g} s (the machine may be "
                               "busy); both processes were ended")
        time.sleep(POLL_S)
    if not (job / "found.pt").exists():
        raise _failure(0, 0, job)


def _failure(rank: int, code: int | None, job: Path) -> FsdpJobError:
    return FsdpJobError(f"the 2-process FSDP job failed: rank {rank} exited with status {code}: "
                        f"{_last_words(job / f'rank{rank}.log')}")


def _last_words(log: Path, lines: int = 5) -> str:
    text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " | ".join(text[-lines:]) or "(no output)"


def _snapshots(run: dict[str, Any]) -> list[Snapshot]:
    return [Snapshot(weights, norm, loss, samples)
            for weights, norm, loss, samples in zip(run["weights"], run["grad_norm"], run["loss"], run["samples"])]
