"""Cost of checkpointing during training, and the time to save and load one checkpoint, on the CPU.

Every run goes through the product's own path: a Runner (executor "thread") over a RunStore in a
temporary runs directory, so each checkpoint is Engine.checkpoint() written by
CheckpointManager.save (temporary file, flush, fsync, rename) on the real disk. The temporary
directory is made by tempfile (its filesystem is printed; a tmpfs would make fsync free).

1. Checkpoint cost: runs with checkpoint_every at its default (read from RunConfig(), not assumed)
   alternate with runs at checkpoint_every=0 (only on Stop and at the end), the order reversing every
   repeat (A,B then B,A). Two models:
     a. the Train page's default CPU run: RunConfig(model="cnn") defaults (digits, b=32, k=4, evaluation
        after each epoch), with max_steps = --cnn-intervals x checkpoint_every + 1 and as many
        epochs as that needs;
     b. resnet18 on digits at 64x64 (image_size=64), b=8, k=1 by default (--resnet-batch,
        --resnet-accum): roughly an eighth of a second per optimizer step on one core, so a few hundred
        steps last under a minute, and k=1 gives the shortest step, hence the largest (worst-case)
        share of a checkpoint in the run's time; max_steps = --resnet-intervals x checkpoint_every + 1.
   A run's speed is samples / (last row's wall_time_s - first row's wall_time_s) over the rows after
   the first of its metrics.csv. wall_time_s runs on through everything between steps (row writing,
   evaluations, checkpoint saves), unlike step_time_s, so the saves are counted; "between steps" is
   that window minus the summed step_time_s (so a ratio far from 1 with equal "between steps" in both
   arms comes from the steps' own speed drifting, not from the saves). Checkpoint k*N is
   written after row k*N and before step k*N+1, so with max_steps = intervals*N + 1 the rows 1..last
   enclose exactly `intervals` periodic saves over intervals*N steps; the final save (after the last
   row) is outside that window in both arms. The figure is the median (quartiles) over the repeats of
   the per-repeat ratio speed(every N) / speed(only at end). CheckpointManager.save is wrapped while
   a model's runs go (it calls the product's method unchanged) to count the checkpoints each run
   wrote and time them. Per run the bench also prints, for the saves inside the window, the median
   "gap" (row s+1's wall_time_s - row s's - step s+1's step_time_s: what ran between the steps, i.e.
   Engine.checkpoint() + the save, plus an evaluation when the save falls on an epoch's end) and
   "steps after/before a save": the mean step_time_s of the 10 steps after each save over that of the
   10 steps before it (fewer when checkpoint_every < 20; median over the saves; within one run, so
   free of the drift between runs),
   which shows a slowdown that follows a save (evicted caches, write-back) and lies outside the gap.
   One uncounted warm-up run per model comes first.
   Quartiles are statistics.quantiles(method="inclusive"): with 3 repeats they are the two
   midpoints between the median and the extremes.
2. Save and load: for each model, Engine.checkpoint() after a few optimizer steps (SGD momentum
   buffers exist), saved with CheckpointManager.save into a temporary run directory and loaded with
   CheckpointManager.load (torch.load, weights_only=True; the file was just written, so it is read
   from the page cache), --io-repeats times; medians (quartiles), and the file size in MB.
3. Expected overhead: save time / (checkpoint_every x time per step), beside the measured ratio, with
   the time per step from the only-at-end runs (window wall time / steps, evaluations included, which
   is what the measured ratio divides by) and from the median step_time_s (the step alone).

Torch uses --threads threads (default 1: a 2-thread torch on a shared 2-core box is erratic); the
load average is printed at the start and the end.

    python bench/bench_checkpoint.py [--repeats 3] [--threads 1] [--models cnn,resnet18]
        [--cnn-intervals 10] [--resnet-intervals 4] [--resnet-batch 8] [--resnet-accum 1]
        [--io-repeats 7] [--checkpoint-every N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.train.accumulation import planned_steps  # noqa: E402
from gaccum_core.train.checkpoint import CheckpointManager  # noqa: E402
from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.data.load import load_data  # noqa: E402
from gaccum_core.train.engine import Engine  # noqa: E402
from gaccum_core.train.metrics import NullSink  # noqa: E402
from gaccum_core.execution.resume import run_checkpoints  # noqa: E402
from gaccum_core.execution.runner import Runner  # noqa: E402
from gaccum_core.states import RunState  # noqa: E402
from gaccum_core.runs.store import RunStore  # noqa: E402

MB = 2**20
FEW_STEPS = 5  # optimizer steps before the checkpoint of part 2 is taken


@dataclass
class SaveLog:
    """The checkpoints one run wrote: (step in the checkpoint, seconds CheckpointManager.save took)."""

    saves: list[tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class RunResult:
    """One run's figures from its metrics.csv and its saves."""

    samples_per_s: float  # over the rows after the first, by wall_time_s
    window_s: float  # last row's wall_time_s - first row's
    window_steps: int  # optimizer steps in the window (rows after the first)
    step_time_s: float  # median step_time_s over those rows
    between_s: float  # window_s - summed step_time_s: row writing, evaluations, checkpoints
    saves: int  # checkpoints written in the whole run
    saves_in_window: int  # of which between the first and the last row
    save_s: float | None  # median seconds of this run's saves
    run_s: float  # submit -> run ended (start-up, data, model.pt included)
    gap_after_save_s: float | None  # median time between a save's step and the next one, minus that step
    after_before: float | None  # median over saves of mean step_time_s of the steps after / before it


@contextmanager
def instrument() -> Iterator[SaveLog]:
    """Count and time every CheckpointManager.save inside the block (the product's method still does it; the
    thread executor's runs save in this process)."""
    log = SaveLog()
    original = CheckpointManager.save

    def save(self: CheckpointManager, state: dict) -> None:
        began = time.perf_counter()
        original(self, state)
        log.saves.append((int(state["counters"]["step"]), time.perf_counter() - began))

    CheckpointManager.save = save
    try:
        yield log
    finally:
        CheckpointManager.save = original


def timed_run(runner: Runner, log: SaveLog, config: RunConfig) -> RunResult:
    """Submit one run, wait for it, read its speed over the rows after the first."""
    log.saves.clear()
    submitted = time.perf_counter()
    run_id = runner.submit(config)
    snap = runner.wait(run_id)
    run_s = time.perf_counter() - submitted
    if snap.state != RunState.FINISHED:
        raise RuntimeError(f"run {run_id} ended {snap.state}: {snap.message}")
    rows = runner.store.read_metrics(run_id)
    if len(rows) < 3:
        raise RuntimeError(f"run {run_id} wrote only {len(rows)} rows")
    first_step, last_step = int(rows["step"].iloc[0]), int(rows["step"].iloc[-1])
    tail = rows.iloc[1:]
    window_s = float(rows["wall_time_s"].iloc[-1] - rows["wall_time_s"].iloc[0])
    inside = [s for s, _ in log.saves if first_step <= s < last_step]
    seconds = [t for _, t in log.saves]
    # Row s+1's wall_time_s - row s's = what ran between the steps (a save at s, an evaluation) + step s+1.
    wall, step = rows.set_index("step")["wall_time_s"], rows.set_index("step")["step_time_s"]
    gaps = [float(wall[s + 1] - wall[s] - step[s + 1]) for s in inside]
    # Do the steps slow down after a save (caches evicted, the file's pages written back)? Within the run,
    # so free of the drift between runs: the `span` steps after each save against the `span` before it.
    span = max(1, min(10, config.checkpoint_every // 2))
    after = [float(step.loc[s + 1:s + span].mean() / step.loc[s - span + 1:s].mean())
             for s in inside if s - span + 1 >= first_step and s + span <= last_step]
    runner.delete(run_id)  # resnet18 checkpoints are ~85 MB: keep the temporary directory small
    return RunResult(float(tail["samples"].sum()) / window_s, window_s, len(tail),
                     float(tail["step_time_s"].median()), window_s - float(tail["step_time_s"].sum()),
                     len(log.saves), len(inside),
                     statistics.median(seconds) if seconds else None, run_s,
                     statistics.median(gaps) if gaps else None, statistics.median(after) if after else None)


def quartiles(values: list[float], digits: int = 3) -> str:
    """'median M (quartiles Q1-Q3, n=N)'; quartiles need two values or more."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return f"{median} (n=1, no quartiles)"
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median} (quartiles {q1:.{digits}f}-{q3:.{digits}f}, n={len(values)})"


def describe(result: RunResult) -> str:
    text = (f"{result.samples_per_s:8.1f} samples/s over {result.window_steps} steps in {result.window_s:6.2f} s "
            f"(step_time_s median {result.step_time_s * 1000:6.1f} ms, between steps {result.between_s:5.2f} s); "
            f"checkpoints {result.saves} "
            f"({result.saves_in_window} in window); run {result.run_s:5.1f} s")
    if result.save_s is not None:
        text += f"; median save {result.save_s * 1000:.1f} ms"
    if result.gap_after_save_s is not None:
        text += f", gap after it {result.gap_after_save_s * 1000:.1f} ms"
    if result.after_before is not None:
        text += f", steps after/before a save {result.after_before:.3f}"
    return text


@dataclass(frozen=True)
class Cost:
    """Part 1's outcome for one model."""

    ratios: list[float]
    every: list[RunResult]
    at_end: list[RunResult]


def checkpoint_cost(name: str, config: RunConfig, every: int, repeats: int, runs_dir: Path) -> Cost:
    """Alternate checkpoint_every=every and =0 runs; per-repeat speed ratios and every run's figures."""
    runner = Runner(str(runs_dir / name), executor="thread")
    with instrument() as log:
        out = _alternated_runs(name, runner, log, config, every, repeats)
    runner.close()
    return out


def _alternated_runs(name: str, runner: Runner, log: SaveLog, config: RunConfig, every: int, repeats: int) -> Cost:
    """checkpoint_cost's runs, after an uncounted warm-up, each of the saves logged."""
    arms = {"every": config.replace(checkpoint_every=every), "at_end": config.replace(checkpoint_every=0)}
    warm = config.replace(max_steps=min(config.max_steps, max(10, every // 5)))
    timed_run(runner, log, warm)  # uncounted: lazy imports, first allocations, the data set's load
    out = Cost([], [], [])
    for repeat in range(repeats):
        order = ("every", "at_end") if repeat % 2 == 0 else ("at_end", "every")
        results = {}
        for arm in order:
            results[arm] = timed_run(runner, log, arms[arm])
            label = f"every {every}" if arm == "every" else "only at end"
            print(f"  {name} repeat {repeat + 1} {label:>11}: {describe(results[arm])}", flush=True)
        out.every.append(results["every"])
        out.at_end.append(results["at_end"])
        out.ratios.append(results["every"].samples_per_s / results["at_end"].samples_per_s)
        print(f"  {name} repeat {repeat + 1} ratio every {every} / only at end: {out.ratios[-1]:.4f}", flush=True)
    return out


@dataclass(frozen=True)
class SaveLoad:
    """Part 2's outcome for one model."""

    capture_s: list[float]
    save_s: list[float]
    load_s: list[float]
    size_mb: float
    params: int


def save_and_load(config: RunConfig, repeats: int, runs_dir: Path) -> SaveLoad:
    """Engine.checkpoint() after a few steps, saved and loaded by the run's CheckpointManager `repeats` times."""
    engine = Engine(config.replace(max_steps=FEW_STEPS, checkpoint_every=0))
    engine.run(NullSink())
    store = RunStore(runs_dir)
    run_id = store.create(config)
    checkpoints = run_checkpoints(store, run_id)
    capture, save, load, size = [], [], [], 0
    for _ in range(repeats):
        began = time.perf_counter()
        state = engine.checkpoint()
        capture.append(time.perf_counter() - began)
        began = time.perf_counter()
        checkpoints.save(state)
        save.append(time.perf_counter() - began)
        size = checkpoints.path.stat().st_size
        began = time.perf_counter()
        loaded = checkpoints.load()
        load.append(time.perf_counter() - began)
        assert loaded is not None and loaded["counters"]["step"] == FEW_STEPS
        del loaded, state
    store.delete(run_id)
    params = sum(p.numel() for p in engine.model.parameters())
    return SaveLoad(capture, save, load, size / MB, params)


def filesystem_of(path: Path) -> str:
    """The filesystem type and device holding path (df -T), or '?'."""
    try:
        lines = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, check=True).stdout.splitlines()
        device, kind = lines[-1].split()[:2]
        return f"{kind} on {device}"
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return "?"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternated pairs per model (part 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared 2-core box steady)")
    parser.add_argument("--models", default="cnn,resnet18", help="comma-separated: cnn, resnet18")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="the 'every N' arm (default: RunConfig().checkpoint_every)")
    parser.add_argument("--cnn-intervals", type=int, default=10,
                        help="cnn runs span this many checkpoint intervals (a cnn step takes milliseconds)")
    parser.add_argument("--resnet-intervals", type=int, default=4, help="resnet18 runs span this many intervals")
    parser.add_argument("--resnet-batch", type=int, default=8, help="resnet18 micro-batch size b")
    parser.add_argument("--resnet-accum", type=int, default=1, help="resnet18 accumulation steps k")
    parser.add_argument("--io-repeats", type=int, default=7, help="save/load repeats per model (part 2)")
    args = parser.parse_args()
    began = time.perf_counter()
    torch.set_num_threads(args.threads)
    every = args.checkpoint_every if args.checkpoint_every is not None else RunConfig().checkpoint_every
    if every <= 0:
        parser.error("the 'every N' arm needs checkpoint_every >= 1")

    base = RunConfig(model="cnn")  # the Train page's defaults (controls.DEFAULTS)
    configs = {
        "cnn": (base, args.cnn_intervals),
        "resnet18": (RunConfig(model="resnet18", dataset="digits", image_size=64,
                               micro_batch_size=args.resnet_batch, accum_steps=args.resnet_accum), args.resnet_intervals),
    }
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in configs]
    if unknown:
        parser.error(f"unknown model(s) {unknown}: choose from {', '.join(configs)}")

    with tempfile.TemporaryDirectory(prefix="gaccum-bench-ckpt-") as tmp:
        runs_dir = Path(tmp)
        print(f"torch {torch.__version__}, {args.threads} torch thread(s), device cpu; runs in {runs_dir} "
              f"({filesystem_of(runs_dir)}); {load_average()}", flush=True)
        print(f"checkpoint_every: {every} (RunConfig() default {RunConfig().checkpoint_every}) against 0; "
              f"{args.repeats} alternated pairs per model", flush=True)
        planned = {}
        for name in chosen:
            config, intervals = configs[name]
            steps_per_epoch = planned_steps(len(load_data(config).train), config.micro_batch_size,
                                            config.accum_steps, 1, 0)
            max_steps = intervals * every + 1
            epochs = -(-max_steps // steps_per_epoch)
            planned[name] = config.replace(max_steps=max_steps, epochs=epochs, device="cpu")
            c = planned[name]
            print(f"{name}: dataset={c.dataset} image_size={c.image_size} b={c.micro_batch_size} k={c.accum_steps} "
                  f"optimizer={c.optimizer} eval_every={c.eval_every} (0 = after each epoch), "
                  f"{steps_per_epoch} steps/epoch, max_steps={c.max_steps}, epochs={c.epochs}", flush=True)

        print("\n1. Checkpoint cost during training (Runner + RunStore, speed = samples / wall_time_s window)", flush=True)
        costs = {}
        for name in chosen:
            costs[name] = checkpoint_cost(name, planned[name], every, args.repeats, runs_dir)
            print(f"  {name}: load now {load_average()}", flush=True)

        print(f"\n2. Save and load of one checkpoint (after {FEW_STEPS} steps; {args.io_repeats} repeats)",
              flush=True)
        io = {}
        for name in chosen:
            io[name] = save_and_load(planned[name], args.io_repeats, runs_dir)
            r = io[name]
            print(f"  {name}: {r.params / 1e6:.3f} M parameters, checkpoint.pt {r.size_mb:.2f} MB; "
                  f"Engine.checkpoint() {quartiles([s * 1000 for s in r.capture_s], 2)} ms; "
                  f"save {quartiles([s * 1000 for s in r.save_s], 1)} ms; "
                  f"load {quartiles([s * 1000 for s in r.load_s], 1)} ms", flush=True)

        print(f"\n3. Summary: checkpoint_every={every}", flush=True)
        for name in chosen:
            cost, r = costs[name], io[name]
            per_step = statistics.median(x.window_s / x.window_steps for x in cost.at_end)
            step_alone = statistics.median(x.step_time_s for x in cost.at_end)
            save_s = statistics.median(r.save_s)
            in_run = [x.save_s for x in cost.every if x.save_s is not None]
            in_run_s = statistics.median(in_run) if in_run else float("nan")
            gaps = [x.gap_after_save_s for x in cost.every if x.gap_after_save_s is not None]
            gap_s = statistics.median(gaps) if gaps else float("nan")
            gap_expected = gap_s / (every * per_step)
            after = [x.after_before for x in cost.every if x.after_before is not None]
            expected = save_s / (every * per_step)
            expected_alone = save_s / (every * step_alone)
            print(f"  {name}: measured speed ratio every {every} / only at end: {quartiles(cost.ratios, 4)}", flush=True)
            print(f"  {name}:   i.e. overhead {1 - statistics.median(cost.ratios):+.2%} of the speed "
                  f"(1 - median ratio); checkpoints per run: every {every}: "
                  f"{sorted({x.saves for x in cost.every})} ({sorted({x.saves_in_window for x in cost.every})} inside "
                  f"the window), only at end: {sorted({x.saves for x in cost.at_end})}", flush=True)
            print(f"  {name}:   expected overhead = save / ({every} x time per step) = {save_s * 1000:.1f} ms / "
                  f"({every} x {per_step * 1000:.1f} ms) = {expected:.2%} (expected ratio {1 / (1 + expected):.4f}); "
                  f"with the step alone ({step_alone * 1000:.1f} ms): {expected_alone:.2%}; "
                  f"median save inside the runs: {in_run_s * 1000:.1f} ms", flush=True)
            print(f"  {name}:   with the runs' own median gap after a save ({gap_s * 1000:.1f} ms) instead: "
                  f"{gap_expected:.2%} (expected ratio {1 / (1 + gap_expected):.4f}); steps after/before a save: "
                  f"{quartiles(after) if after else '-'}", flush=True)
    print(f"\n{load_average()}; bench wall time {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
