"""One rank of test_dropout_reproducible's 2-process check (started by torch.multiprocessing.spawn): on the engine,
the job run twice uninterrupted, then resumed from the first run's step-4 checkpoint (what a kill leaves: the
job went on past it), stopped at a step the ranks agree on, and resumed again to the end. Each rank saves its
parameters, losses and the checkpoints' positions and generators into the directory given."""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.train.distributed import Ranks, share_from_rank0
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

KILLED_AT = 4  # the periodic checkpoint the killed job is resumed from
STOP_AFTER = 7  # rank 0 asks to stop once this step is done; the ranks agree on it at a step's end


def _run(config: RunConfig, ranks: Ranks, resume: bool = False, checkpoint: dict | None = None,
         should_stop: Callable[[Engine], bool] = lambda engine: False) -> tuple[Engine, RowKeeper, list[dict]]:
    """One segment of the job on this rank (resumed from rank 0's checkpoint, shared as the runner shares it): the
    engine, its rows and rank 0's checkpoints (the other ranks pass no sink, as the runner's ranks do)."""
    engine, rows, saved = Engine(config, torch.device("cpu"), ranks), RowKeeper(), []
    if resume:
        engine.resume_from(share_from_rank0(checkpoint))
    keep = lambda state: saved.append(copy.deepcopy(state))  # noqa: E731  (its tensors are the live model's)
    engine.run(rows, lambda: should_stop(engine), keep if ranks.is_main else None)
    return engine, rows, saved


def _parameters(engine: Engine) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()])


def main(rank: int, world_size: int, out_dir: str, config: RunConfig) -> None:
    torch.set_num_threads(1)
    ranks = Ranks(rank, world_size, rank)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world_size)
    try:
        first, first_rows, first_saved = _run(config, ranks)
        torch.manual_seed(1000 + rank)  # the process's global RNG, moved: the run must not depend on it
        again, again_rows, _ = _run(config, ranks)
        killed = next((s for s in first_saved if s["counters"]["step"] == KILLED_AT), None)
        stopped, stopped_rows, stop_saved = _run(
            config, ranks, True, killed, lambda engine: ranks.is_main and engine.training.counters.step >= STOP_AFTER)
        resumed, resumed_rows, _ = _run(config, ranks, True, stop_saved[-1] if stop_saved else None)
        torch.save({"first": _parameters(first), "again": _parameters(again), "resumed": _parameters(resumed),
                    "losses": [[row["loss"] for row in rows] for rows in
                               (first_rows.steps, again_rows.steps, stopped_rows.steps + resumed_rows.steps)],
                    "stopped": stopped.training.counters.step,
                    "checkpoints": [[s["counters"]["step"], s["rngs"]] for s in (*first_saved, *stop_saved)],
                    "ended": resumed.training.counters.step == config.max_steps},
                   f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
