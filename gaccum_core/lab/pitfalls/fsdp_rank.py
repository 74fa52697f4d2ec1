"""One rank of the gallery's FSDP job, as fsdp_job starts it: `python -m gaccum_core.lab.pitfalls.fsdp_rank`.

It joins the job's gloo group through a file in the job's directory (no port to pick), runs every FSDP case
(fsdp_loops.run_cases), and rank 0 writes what they found to --out. It ends itself when the process that started
it is gone, so a killed dashboard leaves no rank behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.lab.pitfalls.fsdp_loops import run_cases
from gaccum_core.train.distributed import Ranks

PARENT_POLL_S = 0.5
COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a rank whose peer died fails instead of waiting forever


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--store", required=True, help="the rendezvous file (absent before the job)")
    parser.add_argument("--out", required=True, help="where rank 0 writes the results (torch.save)")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--config", required=True, help="the RunConfig as JSON")
    parser.add_argument("--parent", type=int, required=True, help="the starting process's pid")
    return parser.parse_args(argv)


def _exit_with(parent: int) -> None:
    """End this process (from a daemon thread) as soon as `parent` is no longer its parent."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str] | None = None) -> int:
    """Run this rank's share of the job; rank 0 writes the results."""
    args = _parse(argv)
    _exit_with(args.parent)
    torch.set_num_threads(1)  # two ranks on a shared machine: one core each
    dist.init_process_group("gloo", init_method=Path(args.store).as_uri(), rank=args.rank,
                            world_size=args.world_size, timeout=COLLECTIVE_TIMEOUT)
    try:
        found = run_cases(RunConfig.from_json(args.config), Ranks(args.rank, args.world_size, args.rank), args.steps)
        if args.rank == 0:
            partial = Path(f"{args.out}.partial")
            torch.save(found, partial)
            partial.replace(args.out)  # whole or absent: the parent never reads half a file
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Without interpreter teardown, where gloo can abort a finished rank (SIGABRT, 1 job in 20 here) after rank 0
    # has written the results: the job would fail for nothing. The run worker ends its ranks the same way.
    os._exit(code)
