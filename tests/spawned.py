"""Ranks started by torch.multiprocessing, not torchrun (no launcher importing torch a third time): what the
tests that run a rank script in a few processes share.

The ranks are forked by multiprocessing's forkserver, which imports torch once for the whole test process (the
first launch pays it), not by spawn, where every rank of every launch imports torch again. The forkserver holds
only torch (and torch._dynamo, which a first optimizer imports: seconds): each rank imports the rest (gaccum_core,
its rank script) itself, in the caller's environment."""

import multiprocessing
import os
import pickle
import time
from typing import Any, Callable

import pytest
import torch.multiprocessing as mp

# What the forkserver imports once: nothing of gaccum's, which reads the environment on import.
PRELOADED = ["torch", "torch.distributed", "torch._dynamo"]


def _in_callers_environment(rank: int, environ: dict[str, str], payload: bytes) -> None:
    """One rank: the caller's environment set (a forked rank has the forkserver's, from its first use), then its
    main and arguments unpickled (so gaccum_core is imported under it: faults are armed on import) and run."""
    os.environ.clear()
    os.environ.update(environ)
    main, args = pickle.loads(payload)
    main(rank, *args)


def run_ranks(main: Callable[..., None], world: int, args: tuple[Any, ...], timeout_s: float) -> None:
    """main(rank, *args) in `world` forked processes, until every one returns; what a rank raised is raised here,
    and ranks still running after timeout_s are killed and the test fails."""
    multiprocessing.set_forkserver_preload(PRELOADED)  # read when the forkserver starts, on the first launch
    payload = pickle.dumps((main, args))
    ranks = mp.start_processes(_in_callers_environment, args=(dict(os.environ), payload), nprocs=world, join=False,
                               start_method="forkserver")
    deadline = time.monotonic() + timeout_s
    while not ranks.join(timeout=1.0):  # raises what a rank raised
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail(f"the {world} ranks did not finish within {timeout_s:g} s")
