"""What a sweep's report says of its runs (issue 33): a run whose worker was killed is named in summary.csv,
`--json` and the table (its state and message), its cell marked incomplete, and the next start trains only
it; an interval wider than its mean says so, with about how many repeats would narrow it."""

import csv
import json
import os
import signal
import time

import pytest

from gaccum_core.cli.main import build_parser, main
from gaccum_core.cli.sweep import spec_from_args
from gaccum_core.intervals import count_for
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.sweeps.spec import sweep_runs, sweep_tag
from gaccum_core.sweeps.stats import mean_ci
from workers import close_now

GRID = ["--model", "mlp", "--device", "cpu", "--max-steps", "4", "--micro-batch-size", "16", "--accum-steps", "2",
        "--repeats", "2"]


def flags(runs) -> list[str]:
    return [*GRID, "--runs-dir", str(runs)]


def spec_of(runs):
    return spec_from_args(build_parser().parse_args(["sweep", *flags(runs)]))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def runs_on_disk(runs):
    return sorted(p.name for p in runs.iterdir() if p.is_dir() and p.name != "sweeps")


def kill_the_first_run_after_its_first_step(job: SweepJob, runner: Runner) -> str:
    """SIGKILL the worker of the run the sweep trains first once it has logged a step (the OOM killer, kill -9)."""
    deadline = time.monotonic() + 180
    while True:
        current = job.progress().current
        if current and len(runner.snapshot(current[0].run_id).metrics) >= 1:
            break
        assert time.monotonic() < deadline and not job.progress().over, "the sweep's first run never logged a step"
        time.sleep(0.05)
    run_id = current[0].run_id
    os.kill(runner.worker_pid(run_id), signal.SIGKILL)
    return run_id


@pytest.mark.multiprocess
def test_a_killed_worker_is_named_its_cell_marked_incomplete_and_the_next_start_trains_only_that_run(
        tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GACCUM_FAULTS", "slow@2*3")  # the first worker holds 3 s at its second step: time to kill it
    runner = Runner(runs, executor="process", warm_spare=False)
    try:
        job = SweepJob(runner, spec_of(runs)).start()
        killed = kill_the_first_run_after_its_first_step(job, runner)
        monkeypatch.delenv("GACCUM_FAULTS")  # the workers started after it need no hold
        assert job.wait(300), "the sweep did not end"
    finally:
        close_now(runner)
    progress = job.progress()
    assert (progress.state, progress.done, progress.failed) == ("finished", 1, 1)
    (finished,) = [r for r in runs_on_disk(runs) if r != killed]

    (row,) = read_csv(runs / "sweeps" / job.sweep_id / "summary.csv")  # before the fix: "1" of "2", nothing said
    assert (row["runs"], row["repeats"], row["complete"], row["failed"]) == ("1", "2", "False", "1")
    assert row["run_ids"] == finished
    assert row["unfinished_runs"].startswith(f"{killed} failed: the worker process died (signal SIGKILL")

    assert main(["sweep", *flags(runs), "--summary-only", "--json"]) == 1  # incomplete
    report = json.loads(capsys.readouterr().out)
    (unfinished,) = report["unfinished_runs"]
    assert {k: unfinished[k] for k in ("cell", "repeat", "run_id", "state")} == {
        "cell": 0, "repeat": 0, "run_id": killed, "state": "failed"}
    assert "SIGKILL" in unfinished["message"] and "without writing a final state" in unfinished["message"]
    assert not report["complete"] and report["cells"][0]["complete"] is False

    assert main(["sweep", *flags(runs), "--summary-only"]) == 1
    out = capsys.readouterr().out
    assert "1/2, 1 failed" in out and "· from 1 of 2 runs" in out  # the cell's figures say how few runs they hold
    assert f"INCOMPLETE: the one cell is incomplete, its figures from 1 of 2 runs: {killed} failed: " in out

    kept = (runs / finished / "metrics.csv").read_bytes()
    assert main(["sweep", *flags(runs)]) == 0  # the same command again: only the failed run trains
    (again,) = [r for r in runs_on_disk(runs) if r not in (killed, finished)]
    assert (runs / finished / "metrics.csv").read_bytes() == kept
    assert RunStore(runs).read_status(again)["state"] == RunState.FINISHED
    (row,) = read_csv(runs / "sweeps" / job.sweep_id / "summary.csv")
    assert (row["runs"], row["complete"], row["failed"]) == ("2", "True", "0") and not row["unfinished_runs"]
    assert sorted(row["run_ids"].split()) == sorted([again, finished])
    assert "INCOMPLETE" not in capsys.readouterr().out


def write_finished_run(store: RunStore, sweep_id: str, run, samples_per_s: float) -> str:
    """A finished run of the sweep on disk, its three steps at the given speed (as a cluster's run would come back)."""
    run_id = store.create(run.config, run.name)
    store.write_tags(run_id, [sweep_tag(sweep_id)])
    writer = store.writer(run_id)
    for step in (1, 2, 3):
        writer.log_step({"step": step, "epoch": 0, "samples": 32, "samples_seen": 32 * step, "loss": 0.5,
                         "samples_per_s": samples_per_s, "wall_time_s": float(step), "train_mem_mb": 0.2})
    writer.close()
    store.update_status(run_id, state=RunState.FINISHED)
    return run_id


def test_an_interval_wider_than_its_mean_says_how_many_repeats_would_narrow_it(tmp_path, capsys):
    """Two repeats at 1,000 and 8,000 samples/s: Student's t with one degree of freedom gives 4,500 ± 44,000,
    which the table says tells nothing yet, and about how many repeats would bring it within ±50 %."""
    runs = tmp_path / "runs"
    store = RunStore(runs)
    speeds, spec = [1000.0, 8000.0], spec_of(runs)
    for run, speed in zip(sweep_runs(spec), speeds):
        write_finished_run(store, spec.sweep_id, run, speed)
    assert main(["sweep", *flags(runs), "--summary-only"]) == 0
    out = capsys.readouterr().out
    mean, half = mean_ci(speeds)
    assert (f"4,500 ± 44,000 (interval wider than the value: about {count_for(mean, half, 2)} repeats would bring "
            "it within ±50 %)") in out
    assert out.count("interval wider than the value") == 1 and "INCOMPLETE" not in out  # the other figures agree
