"""A data-parallel run's TensorBoard event files (issue 34): global rank 0 alone writes them, one file with each
step once, equal to its metrics.csv (torchrun, 2 processes, gloo on the CPU)."""

from __future__ import annotations

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from tb_events import event_files, hparams, raw_tags, same_float32, scalars

pytestmark = pytest.mark.multiprocess

DDP = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=96, fake_classes=10, micro_batch_size=4,
                accum_steps=2, nproc=2, max_steps=5, eval_every=2, device="cpu")


def test_rank_0_alone_writes_one_event_file_with_each_step_once(tmp_path):
    runner = Runner(tmp_path, executor="process", warm_spare=False)
    run_id = runner.submit(DDP)
    assert runner.wait(run_id, timeout=300).state == RunState.FINISHED
    runner.close()
    tb_dir = tmp_path / run_id / "tb"
    assert len(event_files(tb_dir)) == 1  # rank 1 wrote none
    tags = raw_tags(tb_dir)
    assert len(tags) == len(set(tags))
    rows = runner.store.metric_rows(run_id)
    loss = scalars(tb_dir)["train/loss"]
    assert [s for s, _ in loss] == [row["step"] for row in rows] == [1, 2, 3, 4, 5]
    assert all(same_float32(v, row["loss"]) for (_, v), row in zip(loss, rows))
    comm = {tag: values for tag, values in scalars(tb_dir).items() if tag.startswith("comm/")}
    assert sorted(comm) == ["comm/all_gather_bytes", "comm/all_gather_calls", "comm/allreduce_bytes",
                            "comm/allreduce_calls", "comm/reduce_scatter_bytes", "comm/reduce_scatter_calls",
                            "comm/world_size"]  # two processes communicate: every comm/ scalar is written
    assert [v for _, v in comm["comm/world_size"]] == [2] * 5
    assert all(same_float32(v, row["allreduce_calls"]) for (_, v), row in zip(comm["comm/allreduce_calls"], rows))
    assert hparams(tb_dir)[0]["nproc"] == 2
