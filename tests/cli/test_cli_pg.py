"""`run --dataset pg --loss-agg group-mean-token-mean` trains on the bundled rollouts with nothing downloaded."""

from __future__ import annotations

import json

from gaccum_core.cli.main import main
from gaccum_core.runs.store import RunStore
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
