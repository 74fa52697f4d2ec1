"""Issue 19 #1–#4: who owns a run. Two resumes never both train; a run training in another process is
listed as running and cannot be deleted; a data-parallel job stops when its command dies, however it
dies; Ctrl-C stops an evaluation, and a second Ctrl-C never leaves a run `running`."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import run_table
from gaccum_core.execution.runner import Runner, RunBusyError
from gaccum_core.runs.store import RunStore
from gaccum_core.execution.worker import ORPHANED
from gaccum_core.states import RunState
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

CONFIG = RunConfig(device="cpu", model="mlp", micro_batch_size=8, accum_steps=2, max_steps=8, checkpoint_every=2)


def _stopped_run(runner: Runner, gate) -> str:
    gate.hold(step=3, micro=0)
    run_id = runner.submit(CONFIG)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert runner.wait(run_id, timeout=120).state == RunState.STOPPED
    return run_id


def test_a_second_resume_is_refused_naming_the_first_and_every_row_is_written_once(tmp_path, gate):
    """#2: the first resume claims the run before it writes anything; a second runner (here in the same
    process, where the old pid guard saw its own pid and let it through) is refused, naming the owner."""
    first, second = Runner(tmp_path), Runner(tmp_path)
    run_id = _stopped_run(first, gate)
    gate.hold(step=5, micro=0)
    first.resume(run_id)
    gate.wait_until_held()
    with pytest.raises(RunBusyError, match=rf"run {run_id} is owned by process {os.getpid()} "):
        second.resume(run_id)
    with pytest.raises(RunBusyError, match=f"process {os.getpid()}"):
        second.delete(run_id)
    gate.release()
    assert first.wait(run_id, timeout=120).state == RunState.FINISHED
    store = RunStore(tmp_path)
    assert store.read_metrics(run_id)["step"].tolist() == list(range(1, 9))
    assert store.read_evals(run_id)["step"].tolist() == [8]
    second.resume(run_id, max_steps=10)  # the claim ends with the run: now the second may extend it
    assert second.wait(run_id, timeout=120).state == RunState.FINISHED
    assert store.read_metrics(run_id)["step"].tolist() == list(range(1, 11))


@pytest.mark.multiprocess
def test_a_data_parallel_job_listed_as_running_elsewhere_stops_when_its_command_is_killed(tmp_path):
    """#3 then #1: while `run --nproc 2` trains, another process lists the run as running (not interrupted)
    and cannot delete or resume it; kill -9 the command and torchrun and both ranks stop at their next
    step by themselves, the run ends `stopped` with its rows and can be resumed."""
    env = {**os.environ, "GACCUM_FAULTS": ",".join(f"slow@{step}:0*0.4" for step in range(3, 200))}
    cli = subprocess.Popen([sys.executable, "-m", "gaccum_core", "run", "--model", "mlp", "--nproc", "2",
                            "--micro-batch-size", "8", "--accum-steps", "2", "--max-steps", "200",
                            "--device", "cpu", "--runs-dir", str(tmp_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob("*/metrics.csv")) or len(pd.read_csv(next(tmp_path.glob("*/metrics.csv")))) < 2:
            assert time.monotonic() < deadline and cli.poll() is None, "the job never logged two steps"
            time.sleep(0.1)
        run_id = next(tmp_path.glob("*/metrics.csv")).parent.name
        row = run_table(RunStore(tmp_path)).set_index("run_id").loc[run_id]
        assert row["state"] == "running" and row["message"].startswith(f"training in process {cli.pid} ("), row
        other = Runner(tmp_path)
        with pytest.raises(RunBusyError, match=f"owned by process {cli.pid}"):
            other.delete(run_id)
        with pytest.raises(RunBusyError, match=f"owned by process {cli.pid}"):
            other.resume(run_id)
        family = psutil.Process(cli.pid).children(recursive=True)
        assert len(family) >= 3  # torchrun and its two ranks
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=30)
        gone, alive = psutil.wait_procs(family, timeout=60)
        assert not alive, f"left behind: {[(p.pid, p.cmdline()[-4:]) for p in alive]}"
    finally:
        cli.kill()
        cli.stderr.close()
    status = json.loads((tmp_path / run_id / "status.json").read_text())
    assert status["state"] == "stopped" and status["message"] == ORPHANED, status
    steps = pd.read_csv(tmp_path / run_id / "metrics.csv")["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 200
    assert run_table(RunStore(tmp_path)).set_index("run_id").loc[run_id, "state"] == "stopped"


def test_a_stop_during_the_final_evaluation_stops_it_and_a_resume_evaluates_once():
    """#4: the stop request reaches an evaluation (a long one is not waited for); the checkpoint's
    last_eval_step is before it, so the resumed run evaluates that step, once."""
    config = CONFIG.replace(micro_batch_size=2, max_steps=3)  # eval_batches 50: 50 batches of 2 to evaluate
    engine, rows, saved, batches = Engine(config), RowKeeper(), [], []
    real_batch = engine.data.test.batch

    def batch(indices):
        if len(rows.steps) == 3:  # the final evaluation's batches
            batches.append(indices)
        return real_batch(indices)

    engine.data.test.batch = batch
    # The stop request arrives during the evaluation, after its third batch of 50.
    state = engine.run(rows, should_stop=lambda: len(batches) >= 3, on_checkpoint=saved.append)
    assert state == RunState.STOPPED and [r["step"] for r in rows.steps] == [1, 2, 3] and rows.evals == []
    assert len(batches) == 3  # stopped at the next batch, not after all of them
    counters = saved[-1]["counters"]
    assert counters["step"] == 3 and counters["last_eval_step"] < 3
    resumed, more = Engine(config), RowKeeper()
    resumed.resume_from(saved[-1])
    assert resumed.run(more) == RunState.FINISHED
    assert more.steps == [] and [r["step"] for r in more.evals] == [3]
    uninterrupted = RowKeeper()
    Engine(config).run(uninterrupted)
    assert more.evals[0]["test_loss"] == uninterrupted.evals[0]["test_loss"]


@pytest.mark.multiprocess
def test_a_second_ctrl_c_leaves_the_run_stopped_on_disk(tmp_path):
    """#4: the first Ctrl-C asks the run to stop; a second, while a slow micro-batch holds the stop back,
    stops waiting: the CLI exits 130 and status.json says stopped, not running."""
    env = {**os.environ, "GACCUM_FAULTS": "slow@3:0*20"}
    cli = subprocess.Popen([sys.executable, "-m", "gaccum_core", "run", "--model", "mlp", "--micro-batch-size", "8",
                            "--accum-steps", "2", "--max-steps", "8", "--device", "cpu", "--runs-dir", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("*/metrics.csv")) or len(pd.read_csv(next(tmp_path.glob("*/metrics.csv")))) < 2:
        assert time.monotonic() < deadline and cli.poll() is None, "the run never logged two steps"
        time.sleep(0.05)
    time.sleep(0.5)  # into step 3's slow first micro-batch (20 s)
    cli.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert cli.poll() is None  # still waiting for the micro-batch to end
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 130, err[-800:]
    assert "Traceback" not in err, err[-800:]
    run_dir = Path(out.strip().splitlines()[-1])
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and "second Ctrl-C" in status["message"], status


def test_an_orphaned_run_says_stopped_once():
    """Issue 29 J: the CLI, the pages and the Runs table show a run's state before its message ("stopped: …"):
    the message of a run whose starter exited does not say "stopped" again."""
    assert not ORPHANED.startswith(RunState.STOPPED)
