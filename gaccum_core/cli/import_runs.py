"""`import`: another tool's TensorBoard event files (Lightning, the Hugging Face Trainer, a SummaryWriter loop) read
into read-only runs of state imported, to compare with gaccum's own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gaccum_core.cli.args import Commands, add_runs_dir_flag
from gaccum_core.tensorboard.event_files import EventFilesError
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.tensorboard.importing import import_runs


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `import` command: the directory of event files, and the runs directory they go to."""
    parser = commands.add_parser(
        "import", help="read another tool's TensorBoard event files as read-only runs (state imported)",
        description="Each folder of event files at or under DIR (Lightning's version_0, a Trainer's runs/<date>, a "
                    "SummaryWriter's log_dir) becomes one run of state imported, named by its folder: its scalars "
                    "as rows by tag (train/loss, train_loss, loss -> loss; train/learning_rate, lr -> lr; eval/loss, "
                    "val_loss -> test_loss; val_acc -> test_accuracy...), every other tag kept in imported.csv; its "
                    "hparams as settings where they name gaccum's (gradient_accumulation_steps, "
                    "accumulate_grad_batches -> accum_steps; per_device_train_batch_size, batch_size -> "
                    "micro_batch_size; learning_rate -> lr...), the rest gaccum's defaults. An imported run is "
                    "compared like any other and never resumed or started. Prints a line per run, then each run's "
                    "directory.")
    parser.add_argument("dir", metavar="DIR", help="a folder of event files (events.out.tfevents.*), or one whose "
                                                   "folders hold them (each such folder one run)")
    add_runs_dir_flag(parser)
    parser.set_defaults(handler=import_command)
    return parser


def import_command(args: argparse.Namespace) -> int:
    """Import the runs; 0 when at least one was, 2 (one line on stderr) when none could be."""
    store = RunStore(args.runs_dir)
    try:
        runs, left_out = import_runs(store, Path(args.dir))
    except (EventFilesError, StoreError) as exc:
        print(f"gaccum: error: import {args.dir}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the runs directory cannot be written (permissions, a full disk)
        print(f"gaccum: error: import {args.dir}: {exc.strerror or exc} ({exc.filename})", file=sys.stderr)
        return 2
    for line in left_out:
        print(f"gaccum: {line}", file=sys.stderr)
    for run in runs:
        print(f"{run.run_id}: {run.summary()}")
    for run in runs:
        print(store.path(run.run_id))
    return 0
