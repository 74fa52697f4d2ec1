"""`export --tensorboard DIR [RUN …]`: TensorBoard event files for runs recorded before, one folder DIR/<run_id>/
each, written from the run's metrics.csv, eval.csv, samples and settings as the run would have written them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gaccum_core.cli.args import Commands, add_runs_dir_flag
from gaccum_core.words import first_line
from gaccum_core.runs.files import run_error_words
from gaccum_core.runs.integrity import read_run
from gaccum_core.runs.store import RunStore, StoreError, validate_run_id
from gaccum_core.tensorboard.out import write_run_events


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `export` command: where the event files go, and which runs."""
    parser = commands.add_parser(
        "export", help="write TensorBoard event files for runs recorded before",
        description="Write each run's metrics.csv and eval.csv columns as TensorBoard scalars (train/loss, "
                    "memory/train_mem_mb, eval/test_accuracy, …) and its settings and final figures as hparams, "
                    "into DIR/<run_id>/, as a run writes its own tb/ while it trains: for runs recorded before "
                    "that, or with --tensorboard off. Exporting again replaces a run's files there. Then: "
                    "tensorboard --logdir DIR.")
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run ids in --runs-dir (default: every run there)")
    parser.add_argument("--tensorboard", required=True, metavar="DIR",
                        help="the folder to write into, one sub-folder per run (not the runs directory itself, "
                             "where each run keeps its own tb/)")
    add_runs_dir_flag(parser)
    parser.set_defaults(handler=export_command)
    return parser


def export_command(args: argparse.Namespace) -> int:
    """Export each run named (or every run); one line per run, 0 when all were written, 1 when some were not, 2 for
    flags that cannot be used."""
    store, target = RunStore(args.runs_dir), Path(args.tensorboard)
    problem = _refusal(store, target, args.runs)
    if problem:
        print(f"gaccum: error: {problem}", file=sys.stderr)
        return 2
    run_ids = args.runs or store.list_runs()
    if not run_ids:
        print(f"gaccum: no runs in {store.root.resolve()}: nothing exported", file=sys.stderr)
        return 0
    failed = 0
    for run_id in run_ids:
        try:
            steps = export_run(store, run_id, target / run_id)
        except (OSError, ValueError) as exc:  # DamagedRun and StoreError are ValueErrors
            failed += 1
            words = run_error_words(store.path(run_id), exc) if isinstance(exc, OSError) else first_line(exc)
            print(f"gaccum: {run_id}: not exported: {words}", file=sys.stderr)
        else:
            print(f"{run_id}: {steps} steps → {target / run_id}")
    print(f"tensorboard --logdir {target}")
    return 1 if failed else 0


def export_run(store: RunStore, run_id: str, directory: Path) -> int:
    """Write one run's event files into directory; its steps. DamagedRun naming a damaged file, OSError."""
    files = read_run(store, run_id)
    samples = {sample["step"]: sample["text"] for sample in store.samples(run_id)}
    steps = store.metric_rows(run_id)
    evals = [{**row, "sample": samples.get(row["step"])} for row in store.eval_rows(run_id)]
    write_run_events(directory, files.config, files.status, steps, evals)
    return len(steps)


def _refusal(store: RunStore, target: Path, run_ids: list[str]) -> str:
    """Why these flags cannot be used (one line naming the flag and value), or ''."""
    if not store.root.is_dir():
        return f"--runs-dir={str(store.root)!r} is not allowed: no such directory"
    if target.exists() and not target.is_dir():
        return f"--tensorboard={str(target)!r} is not allowed: a file, not a folder"
    if target.resolve() == store.root.resolve():
        return (f"--tensorboard={str(target)!r} is not allowed: the runs directory, where each run keeps its own tb/; "
                "choose another folder")
    for run_id in run_ids:
        try:
            validate_run_id(run_id)
        except StoreError as exc:
            return f"RUN={run_id!r} is not allowed: {str(exc).split(': ', 1)[-1]}"
        if not store.path(run_id).is_dir():
            return f"RUN={run_id!r} is not allowed: no such run in {store.root.resolve()}"
    return ""
