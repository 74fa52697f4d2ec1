"""`resume`: continue a stopped, interrupted or failed run from its checkpoint, or extend a finished one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gaccum_core import runsdir
from gaccum_core.cli.args import Commands, add_runs_dir_flag, flag_error, typed
from gaccum_core.cli.progress import follow_to_the_end
from gaccum_core.config import ConfigError
from gaccum_core.execution.executors import EXECUTORS
from gaccum_core.runs.files import run_error_words
from gaccum_core.runs.integrity import DamagedRun
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import StoreError
from gaccum_core.train.checkpoint import CheckpointError


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `resume` command: which run, where, how much longer, how it trains."""
    parser = commands.add_parser(
        "resume", help="continue a stopped, interrupted or failed run from its checkpoint (or extend a finished one)",
        description="Continue a run in its own directory from checkpoint.pt, exactly as if it had never "
                    "stopped; prints the run directory as the last line. --epochs/--max-steps extend it: the "
                    "cosine schedule then does NOT equal a run planned that long from the start (its length "
                    "changes mid-way); config.json's history records the change.")
    parser.add_argument("run", metavar="RUN_ID_OR_DIR", help="the run's id (in --runs-dir) or its directory")
    add_runs_dir_flag(parser)
    parser.add_argument("--epochs", type=typed("int", "--epochs"), default=None, metavar="INT",
                        help="a new, larger number of epochs")
    parser.add_argument("--max-steps", type=typed("int", "--max-steps"), default=None, metavar="INT",
                        help="a new, larger step limit (0 = none)")
    parser.add_argument("--executor", choices=EXECUTORS, default="thread", help="as for run (default: thread)")
    parser.set_defaults(handler=resume_command)
    return parser


def resume_command(args: argparse.Namespace) -> int:
    """Resume a run from its checkpoint with a progress bar; exit codes as for run."""
    given = Path(args.run)
    if given.is_dir():  # a run named by its directory: its runs directory is the command's (the token cache's too)
        with runsdir.exported(str(given.parent)):
            return _resume(args, given.parent, given.name)
    return _resume(args, Path(args.runs_dir), args.run)


def _resume(args: argparse.Namespace, runs_dir: Path, run_id: str) -> int:
    runner = Runner(runs_dir, executor=args.executor, warm_spare=False)
    try:
        runner.resume(run_id, epochs=args.epochs, max_steps=args.max_steps)
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    except (CheckpointError, DamagedRun, StoreError, RuntimeError) as exc:
        print(f"gaccum: error: resume {args.run}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gaccum: error: resume {args.run}: {run_error_words(runner.store.path(run_id), exc)}", file=sys.stderr)
        return 2
    return follow_to_the_end(runner, run_id)


