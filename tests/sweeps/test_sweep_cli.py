"""`python -m gaccum_core sweep`: a 2×2×2 grid of tiny runs, its summary against a hand computation from
the runs' CSV files, reruns that skip what is done, a killed sweep resumed, commands for a cluster, and
bad grids refused before anything exists."""

import csv
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gaccum_core.cli.main import main
from gaccum_core.cli.main import build_parser
from gaccum_core.cli.sweep import spec_from_args
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.sweeps.spec import sweep_runs, sweep_tag

ROOT = Path(__file__).resolve().parents[2]
E = 32
# mlp on digits: an epoch's 1437 samples are 44 full windows of 32 and a partial one of 29 (step 45), which
# mean_per_micro_batch weighs wrong (b=8: micro-batches 8, 8, 8, 5; b=16: 16, 13); the steps of the second
# epoch after it show the difference.
STEPS = 50
GRID = ["--model", "mlp", "--device", "cpu", "--epochs", "2", "--max-steps", str(STEPS), "--effective-batch", str(E),
        "--micro-batch-size", "8,16", "--reduction", "mean,mean_per_micro_batch", "--lr", "0.05,0.1",
        "--repeats", "2"]


def sweep(runs, *extra):
    return main(["sweep", *GRID, "--runs-dir", str(runs), *extra])


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def runs_on_disk(runs):
    return sorted(p for p in runs.iterdir() if p.is_dir() and p.name != "sweeps")


def t_975_one_dof():
    return math.tan(math.pi * (0.975 - 0.5))  # Student's t with 1 degree of freedom is Cauchy's


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The grid run once for the module: its runs directory, and what the run printed."""
    runs = tmp_path_factory.mktemp("sweep") / "runs"
    code = sweep(runs, "--json")
    return runs, code


def test_the_grid_runs_every_cell_and_repeat_with_b_k_the_effective_batch(swept, capsys):
    runs, code = swept
    assert code == 0
    dirs = runs_on_disk(runs)
    assert len(dirs) == 2 * 2 * 2 * 2
    configs = [json.loads((d / "config.json").read_text()) for d in dirs]
    assert all(c["micro_batch_size"] * c["accum_steps"] == E for c in configs)
    assert {(c["micro_batch_size"], c["reduction"], c["lr"], c["seed"]) for c in configs} == {
        (b, r, lr, s) for b in (8, 16) for r in ("mean", "mean_per_micro_batch") for lr in (0.05, 0.1) for s in (0, 1)}
    assert all(json.loads((d / "status.json").read_text())["state"] == RunState.FINISHED for d in dirs)
    (sweep_dir,) = (runs / "sweeps").iterdir()
    assert all(json.loads((d / "tags.json").read_text()) == [f"sweep-{sweep_dir.name}"] for d in dirs)


def test_the_summary_is_the_hand_computation_from_the_runs_csvs(swept):
    runs, _ = swept
    (sweep_dir,) = (runs / "sweeps").iterdir()
    summary = read_csv(sweep_dir / "summary.csv")
    assert len(summary) == 8
    for cell in summary:
        run_ids = cell["run_ids"].split()
        assert len(run_ids) == 2 and cell["runs"] == "2"
        losses, accuracies, speeds = [], [], []
        for run_id in run_ids:
            config = json.loads((runs / run_id / "config.json").read_text())
            assert str(config["micro_batch_size"]) == cell["micro_batch_size"]
            assert config["reduction"] == cell["reduction"] and str(config["lr"]) == cell["lr"]
            steps = read_csv(runs / run_id / "metrics.csv")
            last_epoch = [s for s in steps if s["epoch"] == steps[-1]["epoch"]]  # sample-weighted
            losses.append(sum(float(s["loss"]) * int(s["samples"]) for s in last_epoch)
                          / sum(int(s["samples"]) for s in last_epoch))
            accuracies.append(float(read_csv(runs / run_id / "eval.csv")[-1]["test_accuracy"]))
            per_step = [float(s["samples_per_s"]) for s in steps]
            speeds.append(statistics.median(per_step[max(1, len(per_step) // 10):]))  # after warm-up
        for name, values in (("final_loss", losses), ("test_accuracy", accuracies), ("samples_per_s", speeds)):
            half_width = t_975_one_dof() * statistics.stdev(values) / math.sqrt(2)
            assert float(cell[f"{name}_mean"]) == pytest.approx(statistics.fmean(values), rel=1e-9), name
            assert float(cell[f"{name}_ci"]) == pytest.approx(half_width, rel=1e-4), name


def test_b_k_cells_coincide_under_mean_and_not_under_mean_per_micro_batch_on_a_partial_window(swept):
    runs, _ = swept
    (sweep_dir,) = (runs / "sweeps").iterdir()
    summary = read_csv(sweep_dir / "summary.csv")
    verdict = {(c["reduction"], c["micro_batch_size"], c["lr"]): c["coincides"] for c in summary}
    for lr in ("0.05", "0.1"):
        assert verdict[("mean", "8", lr)] == verdict[("mean", "16", lr)] == "True"
        assert verdict[("mean_per_micro_batch", "8", lr)] == verdict[("mean_per_micro_batch", "16", lr)] == "False"
    flagged = [c for c in summary if c["coincides"] == "False" and c["coincides_with"]]
    # the largest difference comes after the partial window (step 45)
    assert flagged and all(float(c["loss_max_diff"]) > 1e-4 and float(c["loss_diff_step"]) > 45 for c in flagged)


def test_rerunning_the_sweep_skips_the_finished_runs(swept, capsys):
    runs, _ = swept
    before = runs_on_disk(runs)
    assert sweep(runs) == 0
    captured = capsys.readouterr()
    assert runs_on_disk(runs) == before
    assert "16 of 16 runs done (16 done before)" in captured.err
    assert captured.out.strip().splitlines()[-1].endswith("summary.csv")
    assert sweep(runs, "--summary-only", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] and runs_on_disk(runs) == before
    verdicts = sorted((v["expected"], v["coincide"]) for v in report["verdicts"])
    assert verdicts == [(False, False), (False, False), (True, True), (True, True)]  # per lr: mean, mean per µb


@pytest.mark.multiprocess
def test_print_commands_prints_a_runnable_run_per_run_not_done(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert sweep(runs, "--print-commands") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 16 and all(line.startswith("python -m gaccum_core run ") for line in lines)
    assert not runs.exists()
    words = shlex.split(lines[5])
    done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (run_dir,) = runs_on_disk(runs)
    assert Path(done.stdout.strip().splitlines()[-1]) == run_dir.resolve()
    assert sweep(runs, "--summary-only", "--json") == 1  # 15 runs missing
    report = json.loads(capsys.readouterr().out)
    assert sum(c["runs"] for c in report["cells"]) == 1 and not report["complete"]
    assert sweep(runs, "--print-commands") == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 15


@pytest.mark.multiprocess
def test_a_killed_sweep_resumes_where_it_was(tmp_path):
    runs = tmp_path / "runs"
    grid = [*GRID[:GRID.index("--reduction")], "--checkpoint-every", "2", "--runs-dir", str(runs)]  # 2 runs
    env = {**os.environ, "GACCUM_FAULTS": "slow@3*300"}  # the first run holds at its third step
    child = subprocess.Popen([sys.executable, "-m", "gaccum_core", "sweep", *grid], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            dirs = runs_on_disk(runs) if runs.exists() else []
            if dirs and (dirs[0] / "checkpoint.pt").exists() and len(read_csv(dirs[0] / "metrics.csv")) >= 2:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the sweep's first run never reached its second step")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (killed,) = runs_on_disk(runs)
    assert json.loads((killed / "status.json").read_text())["state"] == RunState.RUNNING
    assert main(["sweep", *grid]) == 0
    dirs = runs_on_disk(runs)
    assert len(dirs) == 2 and killed in dirs  # resumed in its own directory, not trained again beside it
    assert all(json.loads((d / "status.json").read_text())["state"] == RunState.FINISHED for d in dirs)
    assert [int(s["step"]) for s in read_csv(killed / "metrics.csv")] == list(range(1, STEPS + 1))


@pytest.mark.parametrize("flags,expected", [
    (["--micro-batch-size", "8,24", "--effective-batch", "64"], "--micro-batch-size=24 is not allowed: a divisor of"),
    (["--amp", ""], "--amp='' is not allowed: one or more comma-separated values"),
    (["--lr", "0.1,,0.2"], "--lr='0.1,,0.2' is not allowed: one or more comma-separated values, none empty"),
    (["--amp", "off,fp8"], "--amp='fp8' is not allowed: one of off, fp16, bf16"),
    (["--micro-batch-size", "8,abc"], "--micro-batch-size='abc' is not allowed: an integer"),
    (["--accum-steps", "2,4", "--effective-batch", "64"], "--accum-steps=(2, 4) is not allowed: left out with"),
    (["--repeats", "0"], "--repeats=0 is not allowed"),
    (["--nproc", "1,64"], "--nproc=64 is not allowed: 1 to "),  # more processes than this machine has cores
    (["--device", "cuda:3"], "--device='cuda:3' is not allowed"),  # a device this machine lacks
    (["--device", "cpu,cuda"], "--device='cpu,cuda' is not allowed: auto, cpu"),  # where a run runs: one value
    (["--seed", "0,1", "--repeats", "2"], "--seed='0,1' is not allowed: one seed when each cell repeats 2 times"),
    (["--no-dropout", "maybe"], "--no-dropout='maybe' is not allowed: true or false"),
    (["--nnodes", "1,2"], "--nnodes=2 is not allowed: 1 when the sweep trains its runs here; for several machines, "
                          "--print-commands"),
    (["--fsdp-sync", "last"], "--fsdp-sync='last' is not allowed: every (the default) without --sharding fsdp"),
])
def test_a_bad_grid_is_one_line_naming_the_flag_exit_2_and_nothing_created(tmp_path, capsys, flags, expected):
    runs = tmp_path / "runs"
    try:
        code = main(["sweep", "--model", "mlp", "--max-steps", "1", "--runs-dir", str(runs), *flags])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("gaccum: error: ")
    assert expected in err, err
    assert not runs.exists()


def test_every_config_field_is_a_sweep_flag():
    import dataclasses

    from gaccum_core.cli.main import command_help
    from gaccum_core.config import RunConfig

    help_text = command_help("sweep")
    assert all("--" + f.name.replace("_", "-") in help_text for f in dataclasses.fields(RunConfig))


def test_a_sweep_crosses_the_learning_rate_and_the_optimizer(tmp_path):
    runs = tmp_path / "runs"
    assert main(["sweep", "--model", "mlp", "--device", "cpu", "--max-steps", "1", "--micro-batch-size", "8",
                 "--eval-batches", "1", "--tensorboard", "off", "--lr", "0.01,0.05", "--optimizer", "sgd,adamw",
                 "--runs-dir", str(runs)]) == 0
    configs = [json.loads((d / "config.json").read_text()) for d in runs_on_disk(runs)]
    assert sorted((c["lr"], c["optimizer"]) for c in configs) == [
        (0.01, "adamw"), (0.01, "sgd"), (0.05, "adamw"), (0.05, "sgd")]
    assert all(json.loads((d / "status.json").read_text())["state"] == RunState.FINISHED for d in runs_on_disk(runs))
    (spec,) = (runs / "sweeps").glob("*/spec.json")
    assert json.loads(spec.read_text())["grid"] == [["optimizer", ["sgd", "adamw"]], ["lr", [0.01, 0.05]]]


def test_a_flag_a_sweep_does_not_cross_takes_its_text_as_one_value():
    spec = spec_from_args(build_parser().parse_args(["sweep", "--data-dir", "data/a,b", "--lr", "0.01,0.05"]))
    assert spec.fields == ("lr",) and dict(spec.common)["data_dir"] == "data/a,b"  # a folder's name with a comma


def test_the_runs_catalog_does_not_take_the_sweeps_folder_for_a_run(swept):
    from gaccum_core.runs.catalog import run_table
    from gaccum_core.runs.store import RunStore, StoreError, validate_run_id

    runs, _ = swept
    assert (runs / "sweeps").is_dir()
    table = run_table(RunStore(runs))
    assert len(table) == 16 and "sweeps" not in set(table["run_id"])
    assert set(table["state"]) == {RunState.FINISHED}  # no damaged row for the folder
    with pytest.raises(StoreError, match="folder of sweeps"):
        validate_run_id("sweeps")


def test_a_multi_node_sweep_prints_its_commands_for_a_cluster(tmp_path, capsys):
    """Issue 29 F: refused to run here (above), a sweep over machines still gives each run's command."""
    assert main(["sweep", "--model", "mlp", "--max-steps", "1", "--nnodes", "2", "--runs-dir", str(tmp_path / "runs"),
                 "--print-commands"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert "--nnodes 2" in line and not (tmp_path / "runs").exists()


class HeldRuns:
    """A runner double whose runs go on until release(): a sweep that is going, without training."""

    def __init__(self, root):
        self.store, self.submitted, self.released = RunStore(root), [], threading.Event()

    def submit(self, config, name=None, plan=None, tags=()):
        self.submitted.append(name)
        return f"held-{len(self.submitted)}"

    def wait(self, run_id, timeout=None):
        self.released.wait(120)
        return SimpleNamespace(state=RunState.FINISHED)

    def stop(self, run_id):
        self.released.set()


def test_the_same_sweep_started_twice_is_refused_naming_the_first(tmp_path, capsys):
    """Issue 29 E: a sweep claims its folder as a run does; the same sweep started again while it goes (from
    another command line or server: here this process, whose claims conflict the same way) starts nothing."""
    runs = tmp_path / "runs"
    flags = ["--model", "mlp", "--device", "cpu", "--max-steps", "2", "--micro-batch-size", "8,16", "--runs-dir",
             str(runs)]
    spec = spec_from_args(build_parser().parse_args(["sweep", *flags]))
    first = SweepJob(HeldRuns(runs), spec).start()
    try:
        code = main(["sweep", *flags])
    finally:
        first.stop()
        assert first.wait(120)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gaccum: error: sweep {spec.sweep_id} is owned by process {os.getpid()} "), err
    assert runs_on_disk(runs) == []
    again = SweepJob(HeldRuns(runs), spec).start()  # once over, the sweep's claim is free
    again.stop()
    assert again.wait(120)


def test_a_run_killed_before_its_first_checkpoint_is_trained_again_in_its_own_directory(tmp_path):
    """Issue 29 E: what a sweep killed at its run's first steps leaves (status running, no checkpoint, its
    process gone) trains again in its own directory on rerun, not left beside a new attempt as `interrupted`."""
    runs = tmp_path / "runs"
    flags = ["--model", "mlp", "--device", "cpu", "--max-steps", "2", "--runs-dir", str(runs)]
    spec = spec_from_args(build_parser().parse_args(["sweep", *flags]))
    (run,) = sweep_runs(spec)
    store = RunStore(runs)
    killed = store.create(run.config, run.name)
    store.write_tags(killed, [sweep_tag(spec.sweep_id)])
    dead = subprocess.Popen(["true"])
    dead.wait()
    store.update_status(killed, state=RunState.RUNNING, pid=dead.pid)
    assert main(["sweep", *flags]) == 0
    (again,) = runs_on_disk(runs)
    assert again.name == killed  # the same directory, trained from its first step
    status = json.loads((again / "status.json").read_text())
    assert (status["state"], status["name"]) == (RunState.FINISHED, run.name)


def test_a_rerun_trains_an_unsaved_attempt_from_its_first_step_with_each_row_once(tmp_path):
    """An attempt with rows but no checkpoint.pt (killed between its rows and its first checkpoint) is trained
    again in its own directory from step 1: its old rows are dropped, each step's row is there once."""
    runs = tmp_path / "runs"
    flags = ["--model", "mlp", "--device", "cpu", "--max-steps", "2", "--checkpoint-every", "0", "--runs-dir", str(runs)]
    assert main(["sweep", *flags]) == 0
    (attempt,) = runs_on_disk(runs)
    first = (attempt / "metrics.csv").read_text()
    (attempt / "checkpoint.pt").unlink()
    dead = subprocess.Popen(["true"])
    dead.wait()
    RunStore(runs).update_status(attempt.name, state=RunState.RUNNING, pid=dead.pid)
    assert main(["sweep", *flags]) == 0
    (again,) = runs_on_disk(runs)
    assert again == attempt and json.loads((again / "status.json").read_text())["state"] == RunState.FINISHED
    steps = [line.split(",")[0] for line in (again / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == ["1", "2"] and first.splitlines()[0] == (again / "metrics.csv").read_text().splitlines()[0]
