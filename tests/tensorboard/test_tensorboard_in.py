"""TensorBoard in (issue 34 §2): other tools' event files, written by the writers those tools use, imported as
read-only runs of state imported; refused in one line when there is nothing to import; never resumed; and a gaccum
run exported and imported again gives back its rows."""

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import run_table
from gaccum_core.tensorboard.event_files import EventFilesError
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from gaccum_core.tensorboard.importing import IMPORTED_CSV, IMPORTED_JSON, import_runs
from gaccum_core.states import RunState
from gaccum_core.train.checkpoint import CheckpointError
from tb_writers import TRAINER_ARGS, lightning_loss, lightning_run, summary_writer_loop, trainer_run


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6)


def _one(store: RunStore, root) -> str:
    (run,), left_out = import_runs(store, root)
    assert left_out == []
    return run.run_id


def _kept(store: RunStore, run_id: str) -> pd.DataFrame:
    return pd.read_csv(store.path(run_id) / IMPORTED_CSV)


def _metadata(store: RunStore, run_id: str) -> dict:
    return json.loads((store.path(run_id) / IMPORTED_JSON).read_text())


def test_a_lightning_run_gives_its_rows_its_settings_and_keeps_its_other_tags(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = _one(store, lightning_run(tmp_path / "version_0"))
    metrics, evals = store.read_metrics(run_id), store.read_evals(run_id)
    assert list(metrics["step"]) == list(range(1, 13))
    assert all(_close(loss, lightning_loss(step)) for step, loss in zip(metrics["step"], metrics["loss"]))
    assert all(_close(lr, 0.05 / step) for step, lr in zip(metrics["step"], metrics["lr"]))
    assert list(metrics["epoch"]) == [0] * 4 + [1] * 4 + [2] * 4
    assert metrics["samples"].isna().all() and metrics["skipped_total"].isna().all()  # nothing made up
    assert list(evals["step"]) == [4, 8, 12] and list(evals["epoch"]) == [0, 1, 2]
    assert all(_close(loss, 1.0 / step) for step, loss in zip(evals["step"], evals["test_loss"]))
    assert all(_close(acc, step / 13) for step, acc in zip(evals["step"], evals["test_accuracy"]))
    config = store.read_config(run_id)
    assert (config.accum_steps, config.micro_batch_size, config.lr, config.amp) == (4, 8, 0.05, "fp16")
    assert config.model == RunConfig().model  # not named by its hparams: gaccum's default
    kept = _kept(store, run_id)
    assert list(kept.columns) == ["tag", "step", "wall_time", "value"]
    assert list(kept["tag"]) == ["hp_metric"] and kept["value"].iloc[0] == -1
    meta = _metadata(store, run_id)
    assert meta["hparams"] == {"hidden_dim": 64}
    assert meta["settings"]["accum_steps"] == {"value": 4, "from": "accumulate_grad_batches"}
    status = store.read_status(run_id)
    assert status["state"] == RunState.IMPORTED and status["name"] == "version_0"
    assert "12 steps, 3 evaluations" in status["message"] and "b=8 k=4" in status["message"]


def test_a_lightning_run_without_hp_metric_gives_its_settings_from_hparams_yaml(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = _one(store, lightning_run(tmp_path / "version_0", in_events=False))  # default_hp_metric=False
    config = store.read_config(run_id)
    assert (config.accum_steps, config.micro_batch_size, config.amp) == (4, 8, "fp16")
    assert _metadata(store, run_id)["hparams"] == {"hidden_dim": 64}


def test_a_trainer_run_gives_its_rows_and_its_training_arguments(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = _one(store, trainer_run(tmp_path / "runs-May01"))
    metrics, evals = store.read_metrics(run_id), store.read_evals(run_id)
    assert list(metrics["step"]) == [5, 10, 15, 20]
    assert all(_close(loss, 1.0 / step) for step, loss in zip(metrics["step"], metrics["loss"]))
    assert all(_close(lr, 3e-4 * (1 - step / 40)) for step, lr in zip(metrics["step"], metrics["lr"]))
    assert all(_close(norm, 0.5) for norm in metrics["grad_norm"])
    assert list(metrics["epoch"]) == [0, 1, 1, 2]  # train/epoch 0.625, 1.25, 1.875, 2.5: the epoch it is in
    assert list(evals["step"]) == [10, 20] and all(_close(a, 0.8) for a in evals["test_accuracy"])
    assert all(_close(loss, 2.0 / step) for step, loss in zip(evals["step"], evals["test_loss"]))
    config = store.read_config(run_id)
    assert (config.micro_batch_size, config.accum_steps, config.lr, config.max_steps, config.epochs) == \
        (16, 2, 3e-4, 0, 2)
    assert (config.amp, config.optimizer, config.seed) == ("fp16", "adamw", 7)
    meta = _metadata(store, run_id)
    assert meta["hparams"]["lr_scheduler_type"] == "linear"  # gaccum has no linear schedule: kept, not mapped
    assert meta["settings"]["micro_batch_size"]["from"] == "per_device_train_batch_size"
    assert json.loads(meta["texts"]["args"]) == TRAINER_ARGS
    assert set(_kept(store, run_id)["tag"]) == {"eval/runtime"}


def test_a_summary_writer_loop_with_add_hparams_is_one_run_with_its_hparams(tmp_path):
    store = RunStore(tmp_path / "runs")
    root = summary_writer_loop(tmp_path / "exp1")
    assert len([p for p in root.rglob("events.out.tfevents.*")]) == 2  # add_hparams' folder of its own
    run_id = _one(store, root)
    metrics, evals = store.read_metrics(run_id), store.read_evals(run_id)
    assert list(metrics["step"]) == list(range(6)) and _close(metrics["loss"].iloc[-1], 0.5)
    assert list(evals["step"]) == [2, 5] and _close(evals["test_accuracy"].iloc[-1], 0.5)
    config = store.read_config(run_id)
    assert (config.lr, config.micro_batch_size, config.accum_steps, config.optimizer) == (0.01, 32, 2, "sgd")
    assert list(_kept(store, run_id)["tag"]) == ["hparam/accuracy"]


def test_each_folder_of_event_files_is_one_run_imported_once(tmp_path):
    store = RunStore(tmp_path / "runs")
    logs = tmp_path / "lightning_logs"
    for version in (0, 1):
        lightning_run(logs / f"version_{version}", steps=4 + version)
    runs, left_out = import_runs(store, logs)
    assert left_out == [] and sorted(run.steps for run in runs) == [4, 5]
    names = {store.read_status(run.run_id)["name"] for run in runs}
    assert names == {"lightning_logs/version_0", "lightning_logs/version_1"}
    with pytest.raises(EventFilesError, match="already imported as"):
        import_runs(store, logs)
    assert len(store.list_runs()) == 2


def _only_hparams(folder):
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    writer = SummaryWriter(str(folder))
    for summary in hparams({"lr": 0.1}, {}):
        writer.file_writer.add_summary(summary)
    writer.close()
    return folder


@pytest.mark.parametrize("make,words", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: (p / "a_file.txt").write_text("x") and p / "a_file.txt", "is not a directory"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "holds no TensorBoard event files"),
    (lambda p: _only_hparams(p / "hparams_only"), "no scalars, not imported"),
])
def test_nothing_to_import_is_one_line_and_leaves_nothing(tmp_path, capsys, make, words):
    runs = tmp_path / "runs"
    code = main(["import", str(make(tmp_path)), "--runs-dir", str(runs)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gaccum: error: import ") and words in lines[0], lines
    assert "Traceback" not in captured.err and captured.out == ""
    assert not runs.exists() or not any(runs.iterdir())


def test_a_folder_too_large_to_look_through_is_refused_in_one_line(tmp_path, monkeypatch):
    from gaccum_core.tensorboard import event_files

    monkeypatch.setattr(event_files, "MAX_FOLDERS", 3)  # as / or a home folder typed by mistake
    for name in "abcd":
        (tmp_path / "home" / name).mkdir(parents=True)
    with pytest.raises(EventFilesError, match="holds more than 3 folders: name the folder of the runs"):
        import_runs(RunStore(tmp_path / "runs"), tmp_path / "home")


def test_a_write_that_fails_midway_leaves_no_half_run(tmp_path, monkeypatch):
    from gaccum_core.runs import files

    store = RunStore(tmp_path / "runs")
    monkeypatch.setattr(files.RunWriter, "log_eval", lambda self, row: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        import_runs(store, lightning_run(tmp_path / "version_0"))
    assert list((tmp_path / "runs").iterdir()) == []  # neither the run nor its temporary folder


def test_a_setting_gaccum_refuses_is_kept_with_the_reason(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = _one(store, lightning_run(tmp_path / "v", hparams={"accumulate_grad_batches": 0, "batch_size": 8}))
    config = store.read_config(run_id)
    assert (config.accum_steps, config.micro_batch_size) == (RunConfig().accum_steps, 8)
    assert "accum_steps=0 is not allowed" in _metadata(store, run_id)["refused"]["accumulate_grad_batches"]


def test_an_imported_run_is_never_resumed_nor_taken_for_interrupted(tmp_path, capsys):
    runs = tmp_path / "runs"
    store = RunStore(runs)
    run_id = _one(store, lightning_run(tmp_path / "version_0"))
    files = lambda: {p.name: p.read_bytes() for p in store.path(run_id).iterdir() if p.name != ".claim"}  # noqa: E731
    before = files()
    runner = Runner(runs, executor="thread", warm_spare=False)
    with pytest.raises(CheckpointError, match="imported from TensorBoard event files: it is read-only"):
        runner.resume(run_id)
    assert main(["resume", run_id, "--runs-dir", str(runs)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"gaccum: error: resume {run_id}: ") and "cannot be resumed or started" in line
    assert files() == before  # untouched (a refused resume, as any, leaves its released claim file)
    row = run_table(store).set_index("run_id").loc[run_id]
    assert row["state"] == RunState.IMPORTED and row["steps"] == 12
    assert _close(row["final_loss"], 0.95)  # its last epoch's losses (steps 9 to 12), alike: no sample counts
    assert row["label"] == "b=8 k=4 fp16" and row["model"] is None  # a setting its hparams did not name: not shown


def _same_table(original: pd.DataFrame, back: pd.DataFrame) -> None:
    assert list(back.columns) == list(original.columns) and len(back) == len(original)
    for column in original.columns:
        a, b = original[column].to_numpy(dtype=float), back[column].to_numpy(dtype=float)
        assert np.allclose(a, b, rtol=1e-6, atol=0, equal_nan=True), (column, a, b)


def test_a_gaccum_run_exported_and_imported_again_gives_back_its_rows(tmp_path, capsys):
    runs, tb, back = tmp_path / "runs", tmp_path / "tb", tmp_path / "back"
    runner = Runner(runs, executor="thread", warm_spare=False)
    config = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=4, eval_every=2)
    run_id = runner.submit(config, "to-and-fro")
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    assert main(["export", "--tensorboard", str(tb), run_id, "--runs-dir", str(runs)]) == 0
    assert main(["import", str(tb), "--runs-dir", str(back)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(str(back)) and "every setting from its hparams" in out[-2], out
    back_store, store = RunStore(back), RunStore(runs)
    (imported,) = back_store.list_runs()
    _same_table(store.read_metrics(run_id), back_store.read_metrics(imported))
    _same_table(store.read_evals(run_id), back_store.read_evals(imported))
    assert back_store.read_config(imported) == store.read_config(run_id)
    shutil.rmtree(tb)  # the imported run keeps its own copy of everything
    assert len(back_store.read_metrics(imported)) == 4
