"""TensorBoard out (issue 34, part 1): every run writes runs/<id>/tb/ as it trains, read back here with TensorBoard's
own EventAccumulator: each metrics.csv and eval.csv column under its tag at each step (float32), the run's settings
and final figures as hparams in the same file; --tensorboard off writes nothing; a tb/ that cannot be written never
stops the run and is said once in its message; stop + resume (and a kill's leftovers) give each step exactly once."""

from __future__ import annotations

import errno
import shutil

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.tensorboard import out as tensorboard
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.tensorboard.out import FINAL_TAGS, TAGS, column_of, tag_of
from gaccum_core.states import RunState
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS, last_epoch_loss
from tb_events import event_files, hparams, raw_tags, same_float32, scalars

WAIT_S = 300  # only so a broken run fails instead of hanging
# digits in windows of 64: 23 steps an epoch (the last window 29 samples), evaluated every 8 steps and at the end.
RUN = RunConfig(model="mlp", dataset="digits", micro_batch_size=16, accum_steps=4, epochs=1, eval_every=8,
                device="cpu", checkpoint_every=0)


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


def assert_scalars_are_the_rows(tb_dir, metric_rows, eval_rows):
    """Every column of both tables under its tag, at each step its row has a value, equal as float32; a run in one
    process writes no comm/ tag (its world size 1, no collectives)."""
    found = scalars(tb_dir)
    for table, rows, columns in (("metrics", metric_rows, STEP_COLUMNS), ("eval", eval_rows, EVAL_COLUMNS)):
        for column in columns:
            if column == "step":
                continue
            alone = {"world_size", "allreduce_calls", "allreduce_bytes", "reduce_scatter_calls", "reduce_scatter_bytes",
                     "all_gather_calls", "all_gather_bytes"} if table == "metrics" else set()
            expected = [(row["step"], row[column]) for row in rows if row.get(column) is not None
                        and not (column in alone and row["world_size"] == 1)]
            got = found.get(tag_of(column, table), [])
            assert [s for s, _ in got] == [s for s, _ in expected], (table, column)
            assert all(same_float32(a, b) for (_, a), (_, b) in zip(got, expected)), (table, column)
    return found


def test_every_column_has_one_tag_of_its_group_and_the_tag_names_it_back():
    assert tag_of("loss") == "train/loss" and tag_of("scale") == "train/scale"
    assert tag_of("skipped_total") == "train/skipped_total" and tag_of("train_mem_mb") == "memory/train_mem_mb"
    assert tag_of("reduce_scatter_calls") == "comm/reduce_scatter_calls"
    assert tag_of("test_accuracy", "eval") == "eval/test_accuracy"
    assert len(set(TAGS.values())) == len(TAGS) == len(STEP_COLUMNS) + len(EVAL_COLUMNS) - 2  # step is the axis
    assert all(column_of(tag) == key for key, tag in TAGS.items())
    assert column_of("loss") is None and column_of("final/loss") is None


def test_a_run_writes_its_rows_as_scalars_and_its_settings_and_final_figures_as_hparams_in_one_file(tmp_path):
    runner = Runner(tmp_path)
    run_id = runner.submit(RUN, name="tb probe")
    assert _ended(runner, run_id).state == RunState.FINISHED
    store, tb_dir = runner.store, tmp_path / run_id / "tb"
    assert len(event_files(tb_dir)) == 1  # the settings in the scalars' own file: no run folder of their own
    metric_rows, eval_rows = store.metric_rows(run_id), store.eval_rows(run_id)
    assert len(metric_rows) == 23 and [row["step"] for row in eval_rows] == [8, 16, 23]
    found = assert_scalars_are_the_rows(tb_dir, metric_rows, eval_rows)
    assert [tag for tag in found if tag.startswith("comm/")] == []  # one process: nothing communicated
    values, metrics, end = hparams(tb_dir)
    assert values == {**RUN.to_dict(), "run_id": run_id, "name": "tb probe"}
    assert set(metrics) == set(FINAL_TAGS)
    assert end == 1  # STATUS_SUCCESS: the run finished
    last_step = metric_rows[-1]["step"]
    assert found["final/loss"] == [(last_step, pytest.approx(last_epoch_loss(store.read_metrics(run_id)), rel=1e-6))]
    assert same_float32(found["final/test_accuracy"][0][1], eval_rows[-1]["test_accuracy"])
    runner.close()


def test_tensorboard_off_writes_no_event_file(tmp_path):
    runner = Runner(tmp_path)
    run_id = runner.submit(RUN.replace(max_steps=3, tensorboard="off"))
    assert _ended(runner, run_id).state == RunState.FINISHED
    assert not (tmp_path / run_id / "tb").exists()
    runner.close()


def test_each_row_is_in_the_event_file_as_soon_as_it_is_in_metrics_csv(tmp_path, gate):
    """What a kill leaves: while the run is held mid-way, every row written so far reads back from tb/."""
    gate.hold(step=6, micro=2)
    runner = Runner(tmp_path)
    run_id = runner.submit(RUN)
    gate.wait_until_held()
    rows = runner.store.metric_rows(run_id)
    assert rows
    assert scalars(tmp_path / run_id / "tb")["train/loss"] == [(r["step"], pytest.approx(r["loss"])) for r in rows]
    gate.release()
    _ended(runner, run_id)
    runner.close()


def test_a_write_that_fails_stops_the_event_files_not_the_run_and_is_said_once(tmp_path, monkeypatch):
    real, calls = tensorboard.EventWriter.append, []

    def full_disk(self, events):
        calls.append(1)
        if len(calls) >= 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, events)

    monkeypatch.setattr(tensorboard.EventWriter, "append", full_disk)
    runner = Runner(tmp_path)
    run_id = runner.submit(RUN.replace(max_steps=12))
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FINISHED
    assert snapshot.message.count("TensorBoard") == 1, snapshot.message
    assert "No space left on device" in snapshot.message
    assert runner.store.read_status(run_id)["message"] == snapshot.message
    assert len(runner.store.metric_rows(run_id)) == 12  # training went on, its CSVs whole
    assert len(calls) == 5  # writing stopped at the first failure
    runner.close()


def _stopped(runner: Runner, gate, config: RunConfig) -> tuple[str, int]:
    """A run stopped mid-window at step 6, and the step its checkpoint resumes at."""
    gate.hold(step=6, micro=2)
    run_id = runner.submit(config)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert _ended(runner, run_id).state == RunState.STOPPED
    return run_id, run_checkpoints(runner.store, run_id).load()["counters"]["step"]


def test_stop_and_resume_give_each_step_once_even_after_a_kills_leftovers(tmp_path, gate):
    runner = Runner(tmp_path)
    run_id, step = _stopped(runner, gate, RUN)
    tb_dir = tmp_path / run_id / "tb"
    # What a kill after the checkpoint leaves: steps past it in the event file (metrics.csv's are dropped on resume).
    leftovers = tensorboard.EventWriter(tb_dir)
    leftovers.append(tensorboard.step_events({"step": step + 1, "loss": 9.0}, "metrics")
                     + tensorboard.step_events({"step": step + 2, "loss": 9.0}, "metrics"))
    leftovers.close()
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    tags = raw_tags(tb_dir)
    assert len(tags) == len(set(tags)), "a step written twice"
    metric_rows = runner.store.metric_rows(run_id)
    assert [s for tag, s in tags if tag == "train/loss"] == [row["step"] for row in metric_rows] == list(range(1, 24))
    assert [tag for tag, _ in tags].count("_hparams_/session_start_info") == 1  # the settings the run went on with
    assert_scalars_are_the_rows(tb_dir, metric_rows, runner.store.eval_rows(run_id))
    runner.close()


def test_a_tb_that_cannot_be_made_lets_a_resumed_run_finish_and_says_so_once(tmp_path, gate):
    """tb/ taken by a file (as root, chmod refuses nothing): the resume neither cuts nor writes event files."""
    runner = Runner(tmp_path)
    run_id, _ = _stopped(runner, gate, RUN)
    tb_dir = tmp_path / run_id / "tb"
    shutil.rmtree(tb_dir)
    tb_dir.write_text("not a folder")
    runner.resume(run_id)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FINISHED
    assert snapshot.message.count("TensorBoard") == 1, snapshot.message
    assert len(runner.store.metric_rows(run_id)) == 23
    assert tb_dir.read_text() == "not a folder"
    runner.close()


def test_final_figures_of_rows_without_samples_leave_the_final_loss_out():
    """An imported run's rows may lack samples (another tool logged only the loss): exporting it says no final
    loss rather than failing on the sum."""
    from gaccum_core.tensorboard.out import final_figures

    rows = [{"step": 1, "epoch": 1, "loss": 2.0, "samples": None}, {"step": 2, "epoch": 1, "loss": 1.0}]
    assert "final/loss" not in final_figures(rows, [])
    assert final_figures([{"step": 1, "epoch": 1, "loss": 2.0, "samples": 4},
                          {"step": 2, "epoch": 1, "loss": 1.0, "samples": 12}], [])["final/loss"] == 1.25
