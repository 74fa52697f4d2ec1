"""Cost of training in a worker process (executor "process") against training in a thread ("thread").

Both go through the product's Runner on the CPU, with the Train page's default settings
(controls.DEFAULTS, i.e. RunConfig(model="cnn"): digits, b=32, k=4, evaluation after each epoch)
and more epochs: --epochs, or by default as many as ~--train-s (10) seconds of training take at the
speed of an uncounted 3-epoch run in the thread executor (which also pays the first lazy loads).

a. Throughput: the two executors alternate (the order reverses every repeat); each run's speed is
   total samples / summed step_time_s from its metrics.csv over the steps after the first
   --skip-steps (warm-up excluded); the wall time from submit() until the runner reports the run
   ended is printed beside it (it also covers start-up, the evaluations and saving the model).
   The figures are the medians (and quartiles) over the repeats of the per-repeat ratios
   process / thread.
b. Start -> first step, without a browser: the time from runner.submit(config) to the first row in
   runner.snapshot(run_id).metrics (polled every 5 ms; the process executor's supervisor itself
   reads metrics.csv every 0.1 s, which is part of what a user waits for), with the Train page's
   default run (1 epoch; each run is stopped at its first row). Beside it, the time until that row
   is in the run's metrics.csv on disk (the worker's share, without the supervisor's polling).
   "thread" and "process warm" (the spare worker has finished importing torch) alternate; "process
   cold" submits at once after constructing a fresh Runner, while its spare is still importing.

Before every timed run (but the cold ones) the bench waits until the warm spare worker is idle: it polls
the spare's CPU time with psutil until it grows by less than 20 ms in 1 s (the spare has imported
torch and loaded the default data, and waits on stdin), so no import overlaps a measurement.
Threads: both executors keep torch's default thread count (the spare inherits this environment);
--threads N sets OMP_NUM_THREADS=N and torch.set_num_threads(N) for both. The thread executor trains
in this process, where no page is drawn (the server's shorter GIL switch interval is not set here).

    python bench/bench_executors.py [--repeats 3] [--train-s 10 | --epochs N] [--latency-repeats 5]
        [--threads N] [--part a|b|both]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_distributed import speed_of, set_threads, summary, wait_spare_idle  # noqa: E402
from gaccum_core.config import DEFAULT_RUN as DEFAULTS  # noqa: E402
from gaccum_core.execution.runner import Runner  # noqa: E402
from gaccum_core.states import RunState  # noqa: E402


def wait_idle(runners) -> None:
    """Every runner's spare worker idle (a refill after a process run imports torch for seconds)."""
    for runner in runners:
        wait_spare_idle(runner)


def full_run(runner: Runner, config, skip_steps: int, others=()):
    """Submit with every spare idle, wait for the end; the run's Speed (step times and wall)."""
    wait_idle([runner, *others])
    submitted = time.perf_counter()
    run_id = runner.submit(config)
    while not (snap := runner.snapshot(run_id)).done and not snap.steps_done:
        time.sleep(0.01)
    first_row = time.perf_counter()
    snap = runner.wait(run_id)
    wall = time.perf_counter() - submitted
    if snap.state != RunState.FINISHED:
        raise RuntimeError(f"run {run_id} ended {snap.state}: {snap.message}")
    return speed_of(runner, run_id, skip_steps, config.accum_steps,
                    first_row - submitted, wall)


def _rows_on_disk(path: Path) -> bool:
    """metrics.csv holds its header and at least one whole row."""
    try:
        return path.read_bytes().count(b"\n") >= 2
    except FileNotFoundError:
        return False


def first_row_seconds(runner: Runner, config, warm: bool = True, others=()) -> tuple[float, float]:
    """submit() -> the first step row (in the runner's snapshot, and in metrics.csv on disk); the run
    is then stopped."""
    wait_idle(others)
    if warm:
        wait_spare_idle(runner)
    submitted = time.perf_counter()
    run_id = runner.submit(config)
    csv_path, on_disk = runner.store.path(run_id) / "metrics.csv", None
    while not (snap := runner.snapshot(run_id)).metrics:
        if snap.done:
            raise RuntimeError(f"run {run_id} ended {snap.state} before its first row: {snap.message}")
        if on_disk is None and _rows_on_disk(csv_path):
            on_disk = time.perf_counter() - submitted
        time.sleep(0.005)
    seconds = time.perf_counter() - submitted
    runner.stop(run_id)
    snap = runner.wait(run_id, timeout=60)
    if snap.state not in (RunState.FINISHED, RunState.STOPPED):
        raise RuntimeError(f"run {run_id} ended {snap.state}: {snap.message}")
    return seconds, seconds if on_disk is None else on_disk


def calibrated_epochs(runner: Runner, others, train_s: float) -> int:
    """Epochs for ~train_s of training at the speed of an uncounted 3-epoch thread run (also the warm-up
    that pays this process's lazy first loads); only the runs' length depends on it, not the ratios."""
    probe = full_run(runner, DEFAULTS.replace(epochs=3), 2, others)
    samples_per_epoch = runner.store.read_metrics(runner.snapshots()[-1].run_id)["samples"].sum() / 3
    return max(1, round(train_s * probe.samples_per_s / samples_per_epoch))


def throughput(runs_dir: Path, epochs: int, train_s: float, repeats: int, skip_steps: int) -> None:
    """Part a: alternate the executors; print every run and the median ratios."""
    runners = {name: Runner(runs_dir / name, executor=name) for name in ("thread", "process")}
    by_steps, by_wall = [], []
    try:
        calibrated = calibrated_epochs(runners["thread"], runners.values(), train_s)  # always: a warm-up
        epochs = epochs or calibrated
        config = DEFAULTS.replace(epochs=epochs)
        print(f"a. epochs={epochs} per run", flush=True)
        for repeat in range(repeats):
            order = ["thread", "process"] if repeat % 2 == 0 else ["process", "thread"]
            speeds = {}
            for name in order:
                speeds[name] = full_run(runners[name], config, skip_steps, runners.values())
                s = speeds[name]
                print(f"a. repeat {repeat + 1} {name:<7} {s.samples_per_s:7.0f} samples/s over steps "
                      f"{s.first_step}-{s.first_step + s.steps - 1}; wall {s.wall_s:6.2f} s from submit to end "
                      f"(first row after {s.to_first_row_s:.2f} s)", flush=True)
            by_steps.append(speeds["process"].samples_per_s / speeds["thread"].samples_per_s)
            by_wall.append(speeds["thread"].wall_s / speeds["process"].wall_s)
            print(f"a. repeat {repeat + 1} ratio process/thread: samples/s {by_steps[-1]:.3f}, "
                  f"speed by wall time (thread wall / process wall) {by_wall[-1]:.3f}", flush=True)
    finally:
        for runner in runners.values():
            runner.close()
    print(f"a. samples/s process/thread (step times, warm-up excluded): {summary(by_steps)}")
    print(f"a. speed by wall time submit->end, process/thread (= thread wall / process wall): {summary(by_wall)}")


def latency(runs_dir: Path, repeats: int) -> None:
    """Part b: submit -> first row, thread and warm process alternated, then cold process runners."""
    shown: dict[str, list[float]] = {"thread": [], "process warm": [], "process cold": []}
    written: dict[str, list[float]] = {label: [] for label in shown}

    def record(label: str, repeat: int, times: tuple[float, float], what: str = "submit") -> None:
        shown[label].append(times[0])
        written[label].append(times[1])
        print(f"b. repeat {repeat + 1} {label:<12} {times[0]:6.3f} s from {what} to the first row in the snapshot "
              f"({times[1]:.3f} s to the row in metrics.csv)", flush=True)

    runners = {name: Runner(runs_dir / f"b-{name}", executor=name) for name in ("thread", "process")}
    try:
        first_row_seconds(runners["thread"], DEFAULTS, others=runners.values())  # not counted: lazy first loads
        for repeat in range(repeats):
            order = ["thread", "process"] if repeat % 2 == 0 else ["process", "thread"]
            for name in order:
                label = "thread" if name == "thread" else "process warm"
                record(label, repeat, first_row_seconds(runners[name], DEFAULTS, others=runners.values()))
    finally:
        for runner in runners.values():
            runner.close()
    for repeat in range(repeats):
        runner = Runner(runs_dir / f"b-cold{repeat}", executor="process")
        try:
            record("process cold", repeat, first_row_seconds(runner, DEFAULTS, warm=False), "Runner() + submit")
        finally:
            runner.close()
    for label in shown:
        print(f"b. submit -> first row, {label:<12}: snapshot {summary(shown[label])} s; "
              f"metrics.csv {summary(written[label])} s")


def main() -> None:
    """Parse, then run part a and part b."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-s", type=float, default=10.0,
                        help="aim for this many seconds of training per throughput run (sets the epochs)")
    parser.add_argument("--epochs", type=int, default=0,
                        help="epochs per throughput run instead (0 = from --train-s; the page's default is 1)")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per executor")
    parser.add_argument("--latency-repeats", type=int, default=5, help="start -> first step measurements per case")
    parser.add_argument("--skip-steps", type=int, default=5, help="warm-up steps left out of the speed")
    parser.add_argument("--threads", type=int, default=0,
                        help="OMP_NUM_THREADS for both executors (0 = torch default)")
    parser.add_argument("--part", choices=("a", "b", "both"), default="both")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    if not args.threads:
        threads = "torch's default in both executors" + (f" ({threads})" if "inherited" in threads else "")
    print(f"Train-page defaults: model={DEFAULTS.model} dataset={DEFAULTS.dataset} b={DEFAULTS.micro_batch_size} "
          f"k={DEFAULTS.accum_steps} device={DEFAULTS.device} eval_every={DEFAULTS.eval_every} "
          f"epochs={DEFAULTS.epochs} (part a: more epochs); threads: {threads}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("a", "both"):
            throughput(Path(tmp), args.epochs, args.train_s, args.repeats, args.skip_steps)
        if args.part in ("b", "both"):
            latency(Path(tmp), args.latency_repeats)


if __name__ == "__main__":
    main()
