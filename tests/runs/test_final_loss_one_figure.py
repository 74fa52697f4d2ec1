"""The runs table's final loss is the Sweeps page's (issue 33, item 12): the training loss over the last epoch, its
steps weighted by their samples — not the last step alone, an epoch's partial window whose loss swings."""

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import describe_run
from gaccum_core.execution.runner import Runner
from gaccum_core.sweeps.figures import run_figures


def test_the_table_and_a_sweep_give_a_run_the_same_final_loss(tmp_path):
    """mlp on digits' 1437 training samples in windows of 64: 22 full windows, then one of 29."""
    runner = Runner(tmp_path)
    store = runner.store
    run_id = runner.submit(RunConfig(model="mlp", dataset="digits", micro_batch_size=16, accum_steps=4, epochs=1,
                                    device="cpu", eval_every=10**9, checkpoint_every=0))
    runner.wait(run_id, timeout=120)
    runner.close()
    metrics, evals = store.read_metrics(run_id), store.read_evals(run_id)
    assert metrics["samples"].iloc[-1] < 64  # the epoch ends in a partial window
    row = describe_run(store, run_id)
    assert row["final_loss"] == pytest.approx(run_figures(metrics, evals)["final_loss"])
    assert row["final_loss"] != pytest.approx(metrics["loss"].iloc[-1], rel=1e-3)  # not the last step alone
