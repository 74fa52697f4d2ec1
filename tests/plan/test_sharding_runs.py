"""The per-rank counts of gaccum_core.plan.sharding against real 2-process FSDP runs (spawned ranks on the engine,
gloo on the CPU, both runs in one start): the weights, gradients and optimizer state each rank reports in its step
rows (metrics.csv's columns) are what one process's measurement at the same b counts for that mode. The output
layer has 5 rows, split 3 + 2: rank 0's padded half is counted."""

from __future__ import annotations

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.plan.probe import measure
from gaccum_core.plan.search import FITS, Options
from gaccum_core.plan.sharding import MB, layout, per_rank
from jobs import spawned_runs

pytestmark = pytest.mark.multiprocess

B, K, N = 4, 4, 2
RUN = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=64, fake_classes=5, micro_batch_size=B,
                accum_steps=K, nproc=N, max_steps=2, device="cpu", sharding="fsdp", checkpoint_every=0)
# SGD's momentum has no per-parameter step counter: its split is exact. AdamW's counters (4 bytes a parameter)
# stay whole on each rank, which the count splits with the rest: a few bytes per parameter.
ADAMW_COUNTERS_MB = 6 * 4 / MB
SGD_EVERY = RUN.replace(optimizer="sgd", fsdp_sync="every")
ADAMW_LAST = RUN.replace(optimizer="adamw", lr=1e-3, fsdp_sync="last")


@pytest.fixture(scope="module")
def last_rows(tmp_path_factory) -> dict[RunConfig, dict]:
    """Both runs trained one after the other by one spawned pair of sharded ranks: each one's last step row."""
    runs = spawned_runs([SGD_EVERY, ADAMW_LAST], tmp_path_factory.mktemp("sharding_ranks"))
    return {config: run.metrics.iloc[-1].to_dict() for config, run in runs.items()}


def _counted(config: RunConfig, mode: str) -> dict[str, float]:
    one = measure(config.replace(nproc=1, sharding="ddp"), Options(), B, B * K, budget_mb=1e9)
    assert one.status == FITS, one.detail
    data = load_data(config)
    return per_rank(one.detail, layout(build_seeded_model(config, data.input_shape, data.num_classes)), mode, N, K)


@pytest.mark.parametrize("config, mode, slack_mb", [
    (SGD_EVERY, "fsdp/every", 1e-9),
    (ADAMW_LAST, "fsdp/last", ADAMW_COUNTERS_MB),
], ids=["every_sgd", "last_adamw"])
def test_a_sharded_runs_measured_columns_are_the_counted_per_rank_figures(last_rows, config, mode, slack_mb):
    row = last_rows[config]
    counted = _counted(config, mode)
    whole = _counted(config, "ddp")
    assert row["weights_mb"] == pytest.approx(counted["weights_mb"], abs=1e-9)
    assert row["weights_mb"] < 0.6 * whole["weights_mb"]  # about half, and more than half: 3 of the 5 rows
    assert row["gradients_mb"] == row["grad_kept_mb"] == pytest.approx(counted["gradients_mb"], abs=1e-9)
    assert row["optimizer_mb"] == pytest.approx(counted["optimizer_mb"], abs=slack_mb + 1e-9)
    assert row["optimizer_mb"] < 0.6 * whole["optimizer_mb"]
    if mode == "fsdp/last":  # the whole fp32 gradient between micro-batches
        assert counted["gradients_mb"] == whole["gradients_mb"]
    else:
        assert counted["gradients_mb"] < 0.6 * whole["gradients_mb"]
