"""Per-rank training memory counted for each sharding mode (gaccum_core.plan.sharding) on a made-up model:
what is split over N ranks, what stays whole, what is gathered. Real 2-process runs: test_sharding_runs.py."""

from __future__ import annotations

import pytest
from torch import nn

from gaccum_core.plan.sharding import MB, layout, per_rank, run_fields


class Blocks(nn.Module):
    """A transformer's shape: an embedding of the root's own, blocks of different sizes, a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)  # 56 elements, 7 rows: 4 + 3 over two ranks
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 32), nn.Linear(32, 8, bias=False)])
        self.norm = nn.BatchNorm1d(8)  # the root's own weight and bias, and buffers that stay whole


PARTS = {"weights_mb": 2.0, "gradients_mb": 1.0, "optimizer_mb": 2.0, "activations_mb": 3.0}


def test_units_are_the_blocks_and_the_root_keeps_the_rest():
    shape = layout(Blocks())
    assert [p.unit for p in shape.params] == [-1, 0, 0, 1, 1, 2, -1, -1]
    assert shape.param_bytes == 4 * (56 + 72 + 288 + 256 + 16)
    assert shape.buffer_bytes == 4 * 16 + 8  # running mean and variance, and the batch counter (int64)
    # Rank 0 of 2 holds ceil(rows / 2) of each parameter's rows: 4 of the embedding's 7 (of 8 elements each).
    assert shape.shard_bytes(2) == 4 * (4 * 8 + 4 * 8 + 4 + 16 * 8 + 16 + 4 * 32 + 4 + 4)
    assert shape.shard_bytes(1) == shape.param_bytes
    # Gathered at once: the root's own (embedding, norm) and the two largest blocks, in the param dtype.
    assert shape.gathered_bytes(None) == 4 * (56 + 16 + 288 + 256)
    assert shape.gathered_bytes(2) == 2 * (56 + 16 + 288 + 256)


def test_ddp_is_one_process_whole_on_each_rank():
    counted = per_rank(PARTS, layout(Blocks()), "ddp", 4, 8)
    assert {k: counted[k] for k in PARTS} == PARTS
    assert counted["gathered_mb"] == 0 and counted["counted_mb"] == sum(PARTS.values())


def test_fsdp_every_splits_weights_gradients_and_optimizer_state_and_gathers_the_largest_units():
    shape = layout(Blocks())
    weights = PARTS["weights_mb"] - shape.param_bytes / MB  # what is not a parameter: buffers stay whole
    share = shape.shard_bytes(2) / shape.param_bytes
    counted = per_rank(PARTS, shape, "fsdp/every", 2, 8)
    assert counted["weights_mb"] == pytest.approx(weights + shape.shard_bytes(2) / MB)
    assert counted["gradients_mb"] == pytest.approx(PARTS["gradients_mb"] * share)
    assert counted["optimizer_mb"] == pytest.approx(PARTS["optimizer_mb"] * share)
    assert counted["activations_mb"] == PARTS["activations_mb"]  # one rank's micro-batch of b
    assert counted["gathered_mb"] == shape.gathered_bytes(None) / MB
    assert counted["counted_mb"] == pytest.approx(sum(v for k, v in counted.items() if k != "counted_mb"))
    assert per_rank(PARTS, shape, "fsdp/every", 2, 8, amp="bf16")["gathered_mb"] == counted["gathered_mb"] / 2
    more = per_rank(PARTS, shape, "fsdp/every", 4, 8)
    assert more["gradients_mb"] < counted["gradients_mb"] and more["optimizer_mb"] < counted["optimizer_mb"]


def test_fsdp_last_keeps_the_whole_gradient_between_micro_batches_unless_k_is_one():
    shape = layout(Blocks())
    every, last = per_rank(PARTS, shape, "fsdp/every", 2, 8), per_rank(PARTS, shape, "fsdp/last", 2, 8)
    assert last["gradients_mb"] == PARTS["gradients_mb"] > every["gradients_mb"]
    assert {k: v for k, v in last.items() if k not in ("gradients_mb", "counted_mb")} == \
        {k: v for k, v in every.items() if k not in ("gradients_mb", "counted_mb")}
    assert per_rank(PARTS, shape, "fsdp/last", 2, 1) == per_rank(PARTS, shape, "fsdp/every", 2, 1)


def test_an_unknown_mode_is_refused_and_each_mode_names_its_run_fields():
    with pytest.raises(ValueError, match="fsdp/sometimes"):
        per_rank(PARTS, layout(Blocks()), "fsdp/sometimes", 2, 8)
    assert run_fields("ddp") == {"sharding": "ddp"}
    assert run_fields("fsdp/last") == {"sharding": "fsdp", "fsdp_sync": "last"}
