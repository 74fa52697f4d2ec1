"""`worker`, internal: train one run in this process, as the runner or torchrun starts it."""

from __future__ import annotations

import argparse
from typing import NoReturn

from gaccum_core.cli.args import Commands
from gaccum_core.execution.worker import main as worker_main


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `worker` command: the run directory (rank 0), or the config (other machines), or a spare."""
    parser = commands.add_parser("worker", help="internal: train one run in this process (started by the runner "
                                                "or torchrun)")
    parser.add_argument("--run-dir", default=None, help="the run directory (global rank 0)")
    parser.add_argument("--config", default=None, help="the run's config as JSON (ranks on other machines)")
    parser.add_argument("--spare", action="store_true", help="warm up, then read the run directory from stdin")
    parser.add_argument("--spare-dir", default=None,
                        help="a rank of a warm torchrun job: warm up, then wait for job.json in this directory")
    parser.set_defaults(handler=worker_command)
    return parser


def worker_command(args: argparse.Namespace) -> NoReturn:
    """Train the run; never returns: the worker exits the process with the run's status."""
    worker_main(args.run_dir, args.config, args.spare, args.spare_dir)
