"""One rank of a 2-process check that trains several configs (started by torch.multiprocessing.spawn): each config
given trained on the engine in turn, in the same processes (one start, not a torchrun job per config); rank 0
saves, per config, the whole state_dict (a sharded model's gathered by every rank) and its step rows into the
directory given, as rank0.pt."""

from __future__ import annotations

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from gaccum_core.train.distributed import Ranks
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper


def _plain(row: dict) -> dict:
    """The row's plain values (the columns metrics.csv holds), which torch.load reads back with weights_only."""
    return {key: value for key, value in row.items() if isinstance(value, (bool, int, float, str, type(None)))}


def main(rank: int, world_size: int, out_dir: str, configs: list[RunConfig]) -> None:
    torch.set_num_threads(1)
    ranks = Ranks(rank, world_size, rank)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world_size)
    try:
        trained = []
        for config in configs:
            engine, rows = Engine(config, torch.device("cpu"), ranks), RowKeeper()
            assert engine.run(rows) == RunState.FINISHED, config
            trained.append({"model": engine.saved_state_dict(), "steps": [_plain(row) for row in rows.steps]})
        if ranks.is_main:
            torch.save(trained, f"{out_dir}/rank0.pt")
    finally:
        dist.destroy_process_group()
