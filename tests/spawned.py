"""Ranks started by torch.multiprocessing.spawn, not torchrun (no launcher importing torch a third time): what the
tests that run a rank script in a few processes share."""

import time
from typing import Any, Callable

import pytest
import torch.multiprocessing as mp


def run_ranks(main: Callable[..., None], world: int, args: tuple[Any, ...], timeout_s: float) -> None:
    """main(rank, *args) in `world` spawned processes, until every one returns; what a rank raised is raised here,
    and ranks still running after timeout_s are killed and the test fails."""
    ranks = mp.spawn(main, args=args, nprocs=world, join=False)
    deadline = time.monotonic() + timeout_s
    while not ranks.join(timeout=1.0):  # raises what a rank raised
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail(f"the {world} ranks did not finish within {timeout_s:g} s")
