"""Data-parallel training on the CPU (gloo, 2 processes under torchrun) through the product's own path.

Every run is a RunConfig submitted to a Runner(executor="process"), as the dashboard does: nproc=2
starts torchrun, nproc=1 hands the run to the warm spare worker. Three variants share everything
else (model, data, seed, k, and the global micro-batch):

    2proc        nproc=2, micro-batch b, DDP's no_sync inside each window (the default)
    2proc-sync   nproc=2, micro-batch b, sync_every_micro_batch=True (an all-reduce per micro-batch)
    1proc        nproc=1, micro-batch 2b (the same samples per micro-batch and per window)

Speed is read from the run's metrics.csv: total samples / summed step_time_s over the steps after
the first --skip-steps (warm-up excluded), not the mean of the samples_per_s column, so partial
windows at epoch ends weigh by their samples. A step's time on rank 0 covers its micro-batches, the
gradient all-reduce(s), the optimizer step and the one small all_gather of metrics per step; not
torchrun's start-up, nor the evaluation (once, at the end). Each run trains for --seconds after its
first row appears, then is stopped (runs of every variant last as long whatever their speed); the
all-reduce calls and bytes per step are the median over full windows of the allreduce_calls and
allreduce_bytes columns.

The default model is the mlp on the bundled digits upscaled to 32x32: 70k parameters, so 280 kB
of gradients per all-reduce against about a millisecond of compute per micro-batch, where
communication matters (--model cnn shows a compute-bound case). dataset=fake is not the default:
FakeData renders every sample through PIL (milliseconds per sample on this CPU), so loading
dominates and hides the all-reduce. Variants alternate within each repeat (2proc in the
middle, next to each of the others; the order reverses every repeat), and the figures are the
medians (and quartiles) over the repeats of the per-repeat ratios. Before each run the bench waits
until the spare worker is idle (its CPU time stops growing), so its import never overlaps a run.

Threads: by default every process keeps the product's setting, i.e. torchrun's OMP_NUM_THREADS=1
in each rank and torch's default (one thread per core) in the 1-process run; --threads N sets
OMP_NUM_THREADS=N for every process instead. On a busy machine torch's default thread count can
make the 1-process run an order of magnitude slower (its threads wait for each other), so compare
1proc with 2proc only on a quiet machine, or with --threads 1 (one core against two).

    python bench/bench_distributed.py [--repeats 3] [--seconds 12] [--model mlp --image-size 32]
        [--micro-batch-size 16] [--accum-steps 4] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.execution.runner import Runner  # noqa: E402
from gaccum_core.states import RunState  # noqa: E402

MANY_EPOCHS = 100_000  # runs end by --seconds (or --max-steps), never by running out of epochs
EVAL_ONLY_AT_END = 10**9  # eval_every: no evaluation between steps


def wait_spare_idle(runner: Runner, quiet_s: float = 1.0, timeout_s: float = 180.0) -> float:
    """Block until the runner's warm spare worker has finished importing: its CPU time (user + system)
    grew by less than 20 ms over the last quiet_s. Returns the seconds waited (0 with no spare)."""
    began = time.monotonic()
    pid = runner.spare_pid
    if pid is None:
        return 0.0
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return 0.0
        history: list[tuple[float, float]] = []
        while time.monotonic() - began < timeout_s:
            times = proc.cpu_times()
            now = time.monotonic()
            history.append((now, times.user + times.system))
            old = [cpu for t, cpu in history if now - t >= quiet_s]
            if old and history[-1][1] - old[-1] < 0.02:
                return now - began
            time.sleep(0.1)
    except psutil.NoSuchProcess:
        return time.monotonic() - began
    raise TimeoutError(f"the spare worker still used CPU after {timeout_s:.0f} s")


@dataclass(frozen=True)
class Speed:
    """One run's training speed from its metrics.csv."""

    samples_per_s: float
    steps: int  # steps counted (after the skipped warm-up)
    first_step: int
    allreduce_calls: float  # per full-window step (median)
    allreduce_bytes: float
    to_first_row_s: float  # submit -> first row seen by the runner (start-up included)
    wall_s: float  # submit -> run ended


def speed_of(runner: Runner, run_id: str, skip_steps: int, accum_steps: int, to_first_row_s: float,
             wall_s: float) -> Speed:
    """Samples / summed step time over the steps after the first skip_steps."""
    rows = runner.store.read_metrics(run_id)
    tail = rows[rows["step"] > skip_steps]
    if len(tail) < 3:
        raise RuntimeError(f"run {run_id} wrote {len(rows)} steps: too few after skipping {skip_steps} "
                           "(raise --seconds or lower --skip-steps)")
    full = tail[tail["micro_batches"] == accum_steps]
    full = full if len(full) else tail
    return Speed(float(tail["samples"].sum() / tail["step_time_s"].sum()), len(tail), int(tail["step"].iloc[0]),
                 float(full["allreduce_calls"].median()), float(full["allreduce_bytes"].median()),
                 to_first_row_s, wall_s)


def timed_run(runner: Runner, config: RunConfig, seconds: float, skip_steps: int) -> Speed:
    """Submit, let it train `seconds` after its first row (or until it ends), stop it, read its speed."""
    wait_spare_idle(runner)
    submitted = time.perf_counter()
    run_id = runner.submit(config)
    first_row = None
    while True:
        snap = runner.snapshot(run_id)
        now = time.perf_counter()
        if first_row is None and snap.steps_done > 0:
            first_row = now
        if snap.done or (first_row is not None and now - first_row >= seconds):
            break
        time.sleep(0.05)
    runner.stop(run_id)
    snap = runner.wait(run_id, timeout=120)
    wall = time.perf_counter() - submitted
    if snap.state not in (RunState.FINISHED, RunState.STOPPED):
        raise RuntimeError(f"run {run_id} ended {snap.state}: {snap.message}")
    return speed_of(runner, run_id, skip_steps, config.accum_steps,
                    (first_row or time.perf_counter()) - submitted, wall)


def summary(values: list[float], digits: int = 3) -> str:
    """'median M (quartiles Q1-Q3, n=N)'; quartiles need two values or more."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return f"{median} (n=1, no quartiles)"
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median} (quartiles {q1:.{digits}f}-{q3:.{digits}f}, n={len(values)})"


def set_threads(threads: int) -> str:
    """OMP_NUM_THREADS for every process this bench starts (0: leave the product's defaults); a note."""
    import torch

    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        return f"OMP_NUM_THREADS={threads} in every process"
    if "OMP_NUM_THREADS" in os.environ:
        return f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} inherited by every process"
    return (f"product defaults: torch's {torch.get_num_threads()} thread(s) in a 1-process run, "
            "torchrun's OMP_NUM_THREADS=1 in each rank")


def _describe(name: str, speed: Speed) -> str:
    return (f"{name:<11} {speed.samples_per_s:9.0f} samples/s over steps {speed.first_step}-"
            f"{speed.first_step + speed.steps - 1}; per step {speed.allreduce_calls:g} all-reduce(s), "
            f"{speed.allreduce_bytes:,.0f} B; submit->first row {speed.to_first_row_s:.1f} s, "
            f"wall {speed.wall_s:.1f} s")


def main() -> None:
    """Alternate the three variants --repeats times; print every run and the medians of the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--micro-batch-size", type=int, default=16, help="b of each of the 2 processes")
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=12.0, help="training seconds per run (after its first row)")
    parser.add_argument("--max-steps", type=int, default=0, help="also end a run after this many steps (0 = no cap)")
    parser.add_argument("--skip-steps", type=int, default=10, help="warm-up steps left out of the speed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0,
                        help="OMP_NUM_THREADS for every process (0 = product defaults)")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    base = RunConfig(model=args.model, dataset=args.dataset, image_size=args.image_size,
                     micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps, epochs=MANY_EPOCHS,
                     max_steps=args.max_steps, eval_every=EVAL_ONLY_AT_END, device="cpu")
    variants = {
        "2proc": base.replace(nproc=2),
        "2proc-sync": base.replace(nproc=2, sync_every_micro_batch=True),
        "1proc": base.replace(micro_batch_size=2 * args.micro_batch_size),
    }
    b = base.micro_batch_size
    print(f"model={base.model} dataset={base.dataset} image_size={base.image_size} k={base.accum_steps} "
          f"global micro-batch={2 * b} (2 x b={b} | 1 x {2 * b}) effective batch={2 * base.effective_batch_size}; "
          f"{args.seconds:g} s of training per run, first {args.skip_steps} steps skipped; {args.repeats} repeats; cores={os.cpu_count()}; threads: {threads}",
          flush=True)
    no_sync_gain, scaling = [], []
    every: dict[str, list[Speed]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as runs_dir:
        runner = Runner(runs_dir, executor="process")
        try:
            for repeat in range(args.repeats):
                order = ["2proc-sync", "2proc", "1proc"]
                if repeat % 2:
                    order.reverse()
                speeds = {}
                for name in order:
                    speeds[name] = timed_run(runner, variants[name], args.seconds, args.skip_steps)
                    every[name].append(speeds[name])
                    print(f"repeat {repeat + 1} {_describe(name, speeds[name])}", flush=True)
                no_sync_gain.append(speeds["2proc"].samples_per_s / speeds["2proc-sync"].samples_per_s)
                scaling.append(speeds["2proc"].samples_per_s / speeds["1proc"].samples_per_s)
                print(f"repeat {repeat + 1} ratios: no_sync/sync {no_sync_gain[-1]:.3f}   "
                      f"2proc/1proc {scaling[-1]:.3f}", flush=True)
        finally:
            runner.close()
    for name, speeds_of in every.items():
        print(f"{name:<11} samples/s {summary([s.samples_per_s for s in speeds_of], 0)}; per step "
              f"{statistics.median(s.allreduce_calls for s in speeds_of):g} all-reduce(s), "
              f"{statistics.median(s.allreduce_bytes for s in speeds_of):,.0f} B")
    print(f"a. samples/s 2 processes no_sync / sync every micro-batch: {summary(no_sync_gain)}")
    print(f"b. samples/s 2 processes (b={base.micro_batch_size}) / 1 process (b={2 * base.micro_batch_size}): "
          f"{summary(scaling)}")


if __name__ == "__main__":
    main()
