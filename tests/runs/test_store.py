"""The run store: ids are validated, files are written whole, rows are readable while appended."""

import json

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.runs.files import RunWriter
from gaccum_core.runs.store import RunStore, StoreError, validate_run_id


@pytest.mark.parametrize("bad", ["../x", "..", "/etc", "a/b", "", ".hidden", "a\\b", "x" * 200, "a..b"])
def test_unsafe_run_ids_are_refused(bad):
    with pytest.raises(StoreError):
        validate_run_id(bad)


def test_create_writes_config_status_and_csv_headers(tmp_path):
    store = RunStore(tmp_path / "runs")
    cfg = RunConfig(model="cnn", accum_steps=3)
    run_id = store.create(cfg, name="my run/../x")
    assert "/" not in run_id and ".." not in run_id and run_id.endswith("my-run-x")
    assert store.read_config(run_id) == cfg
    status = store.read_status(run_id)
    assert status["state"] == "queued" and status["torch_version"] == torch.__version__
    assert list(store.read_metrics(run_id).columns) == list(STEP_COLUMNS)
    assert list(store.read_evals(run_id).columns) == list(EVAL_COLUMNS)
    assert store.list_runs() == [run_id]


def test_rows_are_flushed_as_they_are_written(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    writer = store.writer(run_id)
    writer.log_step({"step": 1, "loss": 2.5, "scale": None})
    # Another reader sees the row before the writer is closed.
    frame = store.read_metrics(run_id)
    assert frame["step"].tolist() == [1] and frame["loss"].tolist() == [2.5]
    assert frame["scale"].isna().all()
    writer.close()


def test_status_updates_merge_and_are_atomic(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    store.update_status(run_id, state="running", device="CPU")
    status = store.update_status(run_id, state="finished")
    assert status["device"] == "CPU" and status["state"] == "finished"
    assert json.loads((tmp_path / run_id / "status.json").read_text()) == status
    assert not [p for p in (tmp_path / run_id).iterdir() if p.name.endswith(".tmp")]


def test_model_round_trip_uses_weights_only(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    store.save_model(run_id, {"w": torch.arange(3.0)})
    assert torch.equal(store.load_model(run_id)["w"], torch.arange(3.0))
    assert not [p for p in (tmp_path / run_id).iterdir() if p.name.endswith(".tmp")]


def test_unwritable_runs_directory_is_a_clear_error_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot be created"):
        RunStore(blocker / "runs").create(RunConfig())


def test_delete_removes_only_that_run(tmp_path):
    store = RunStore(tmp_path)
    keep, drop = store.create(RunConfig()), store.create(RunConfig())
    store.delete(drop)
    assert store.list_runs() == [keep]
    with pytest.raises(StoreError):
        store.delete("../" + keep)


def test_a_runs_directory_that_is_a_file_is_named_as_such(tmp_path):
    target = tmp_path / "runs"
    target.write_text("a file")
    with pytest.raises(StoreError, match="is a file, not a directory"):
        RunStore(target).create(RunConfig())


def test_a_run_written_before_the_data_parallel_columns_reads_as_one_process(tmp_path):
    """Older metrics.csv files lack world_size and the all-reduce counts: they read as 1 process, 0 all-reduces."""
    from gaccum_core.runs.catalog import describe_run
    from gaccum_core.config import RunConfig
    from gaccum_core.train.metrics import ADDED_COLUMNS, STEP_COLUMNS

    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    old = [c for c in STEP_COLUMNS if c not in ADDED_COLUMNS]
    (store.path(run_id) / "metrics.csv").write_text(",".join(old) + "\n" + ",".join("1" for _ in old) + "\n")
    frame = store.read_metrics(run_id)
    assert frame[["world_size", "allreduce_calls", "allreduce_bytes"]].iloc[0].tolist() == [1, 0, 0]
    assert describe_run(store, run_id)["state"] != "damaged"


def test_truncating_a_resumed_run_drops_later_samples_too(tmp_path):
    """A language run resumed from step 10 must not show the text generated at step 20 twice."""
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig(model="gpt", dataset="pydoc"))
    writer = RunWriter(store.path(run_id))
    for step in (10, 20):
        writer.log_step({"step": step, "loss": 1.0})
        writer.log_eval({"step": step, "test_loss": 1.0, "sample": f"The text at {step}"})
    writer.close()
    with open(store.path(run_id) / "samples.jsonl", "a", encoding="utf-8") as file:
        file.write('{"step": 30, "text": "cut by a ki')  # a line a kill cut short
    assert [s["step"] for s in store.samples(run_id)] == [10, 20]
    store.truncate_rows(run_id, 10)
    assert store.samples(run_id) == [{"step": 10, "text": "The text at 10"}]
    assert store.read_evals(run_id)["step"].tolist() == [10]
