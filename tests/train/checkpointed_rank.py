"""One rank of test_activation_checkpointing's 2-process check (started by torch.multiprocessing.spawn): each
config given trained on the engine in turn, in the same two processes (one start, not a torchrun job per config);
rank 0 saves the whole state_dict of each (a sharded model's gathered by every rank) into the directory given."""

from __future__ import annotations

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from gaccum_core.train.distributed import Ranks
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink


def main(rank: int, world_size: int, out_dir: str, configs: list[RunConfig]) -> None:
    torch.set_num_threads(1)
    ranks = Ranks(rank, world_size, rank)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world_size)
    try:
        states = []
        for config in configs:
            engine = Engine(config, torch.device("cpu"), ranks)
            assert engine.run(NullSink()) == RunState.FINISHED, config
            states.append(engine.saved_state_dict())
        if ranks.is_main:
            torch.save(states, f"{out_dir}/rank0.pt")
    finally:
        dist.destroy_process_group()
