"""`run --dataset pg --loss-agg group-mean-token-mean` trains on the bundled rollouts with nothing downloaded; `sweep
--loss-agg a,b` trains a run per mode, its cells labelled by the mode and its runs' TensorBoard hparams carrying it."""

from __future__ import annotations

import json

from gaccum_core.cli.main import main
from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.labels import run_labels
from gaccum_core.runs.store import RunStore
from gaccum_core.tensorboard.event_files import read_event_folders
from gaccum_core.train import engine


def test_run_pg_trains_two_steps_on_the_bundled_rollouts(tmp_path, token_cache_dir, capsys, monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds
    assert main(["run", "--model", "gpt", "--dataset", "pg", "--loss-agg", "group-mean-token-mean", "--max-steps",
                 "2", "--max-seq-len", "32", "--micro-batch-size", "2", "--accum-steps", "2", "--device", "cpu",
                 "--eval-batches", "1", "--tensorboard", "off", "--runs-dir", str(tmp_path)]) == 0
    store = RunStore(tmp_path)
    run_id, = store.list_runs()
    config = json.loads((store.path(run_id) / "config.json").read_text())
    assert (config["dataset"], config["loss_agg"], config["advantage_field"]) == ("pg", "group-mean-token-mean",
                                                                                  "advantage")
    assert "[finished] step 2 of 2" in capsys.readouterr().err


def test_a_sweep_over_loss_agg_trains_each_mode_labelled_by_it_and_its_hparams_carry_it(tmp_path, token_cache_dir,
                                                                                        capsys, monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")
    modes = ["token-mean", "group-mean-token-mean"]
    assert main(["sweep", "--model", "gpt", "--dataset", "pg", "--loss-agg", ",".join(modes), "--max-steps", "1",
                 "--max-seq-len", "32", "--micro-batch-size", "2", "--accum-steps", "2", "--device", "cpu",
                 "--eval-batches", "1", "--runs-dir", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [cell["label"] for cell in summary["cells"]] == modes  # each cell named by its mode
    store = RunStore(tmp_path)
    configs = [store.read_config(r) for r in store.list_runs()]
    for config, label in zip(configs, run_labels(configs)):  # and each run, in the Runs table and the legends
        assert label.split()[-1] == config.loss_agg, label
    for run_id in store.list_runs():  # each run's TensorBoard hparams name its mode
        (folder,) = read_event_folders(store.tensorboard_dir(run_id))
        assert folder.hparams["loss_agg"] == store.read_config(run_id).loss_agg
        assert folder.hparams["dataset"] == "pg"
    assert sorted(config.loss_agg for config in configs) == sorted(modes)
    table = run_table(store)  # the Runs table names a mode other than the default, as it names fp16
    assert sorted(table["label"]) == ["gpt-tiny b=2 k=2", "gpt-tiny b=2 k=2 group-mean-token-mean"]
