"""`run`: train one run in the foreground with a progress bar (on a machine of node rank > 0: join the job)."""

from __future__ import annotations

import argparse
import re
import sys

from gaccum_core.cli.args import (Commands, add_config_flags, add_runs_dir_flag, flag_error,
                                  refuse_unused_fsdp_flags, typed)
from gaccum_core.cli.plan import add_target_flags, planned_config
from gaccum_core.cli.progress import follow_to_the_end
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.execution.executors import EXECUTORS
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.supervisor import Launch, join_job
from gaccum_core.train.checks import preflight


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `run` command: a flag per config field, where the run goes, how it trains, what it plans for."""
    parser = commands.add_parser("run", help="train one run in the foreground with a progress bar",
                                 description="Train one run; prints the run directory as the last line.")
    add_config_flags(parser)
    add_runs_dir_flag(parser)
    parser.add_argument("--name", default=None, help="a label appended to the run id")
    parser.add_argument("--executor", choices=EXECUTORS, default="thread",
                        help="train in this process (thread) or in a worker process (process); "
                             "--nproc above 1 always uses torchrun's worker processes (default: thread)")
    parser.add_argument("--node-rank", type=typed("int", "--node-rank"), default=0, metavar="INT",
                        help="this machine's rank in the job; rank 0 writes the run directory (default: 0)")
    parser.add_argument("--rdzv-endpoint", default="", metavar="HOST:PORT",
                        help="where the machines meet: host and free port of node rank 0 (torchrun --rdzv-endpoint)")
    add_target_flags(parser, for_run=True)
    parser.set_defaults(handler=run_command)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Validate, train with a progress bar, print the run directory; 0 when finished."""
    try:
        config, plan = planned_config(args)
        refuse_unused_fsdp_flags([config])
        preflight(config)
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    except ValueError as exc:  # data and model input errors explain themselves
        print(f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    try:
        launch = _launch_from_args(args, config)
    except ValueError as exc:
        print(f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    if launch.node_rank > 0:
        print(f"gaccum: joining the job at {launch.rdzv_endpoint} as node {launch.node_rank} of {config.nnodes}; "
              "stop it from node 0", file=sys.stderr)
        return join_job(config, launch)
    runner = Runner(args.runs_dir, executor=args.executor, launch=launch, warm_spare=False)  # one run: no spare
    try:
        run_id = runner.submit(config, args.name, plan=None if plan is None else plan.to_dict())
    except (ValueError, OSError) as exc:  # StoreError says which directory and why; the store removed the run
        print(f"gaccum: error: --runs-dir: {exc}", file=sys.stderr)
        return 2
    return follow_to_the_end(runner, run_id)


def _launch_from_args(args: argparse.Namespace, config: RunConfig) -> Launch:
    """torchrun's rendezvous for this machine; ValueError naming the flag that does not fit."""
    if not 0 <= args.node_rank < config.nnodes:
        raise ValueError(f"--node-rank={args.node_rank} is not allowed: 0 to {config.nnodes - 1} (--nnodes={config.nnodes})")
    endpoint = args.rdzv_endpoint
    if config.nnodes == 1 and endpoint:
        raise ValueError(f"--rdzv-endpoint={endpoint!r} is not allowed: left out with --nnodes=1 (one machine "
                         "meets on a free port of its own)")
    found = re.match(r"^[^:\s]+:(\d+)$", endpoint)
    if config.nnodes > 1 and not (found and 1 <= int(found[1]) <= 65535):
        raise ValueError(f"--rdzv-endpoint={endpoint!r} is not allowed: HOST:PORT of node rank 0's machine (a port "
                         f"from 1 to 65535), required with --nnodes={config.nnodes}")
    return Launch(args.node_rank, endpoint)
