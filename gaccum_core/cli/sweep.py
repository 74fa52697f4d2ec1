"""`sweep`: a grid of runs (comma lists for the run flags a sweep may cross) × repeats, run as ordinary runs with
a progress bar over runs, resumable, then summarised per cell; or printed as `run` commands for a cluster."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from gaccum_core.cli.args import Commands, add_runs_dir_flag, flag_error, refuse_unused_fsdp_flags, typed
from gaccum_core.cli.sweep_progress import follow_sweep
from gaccum_core.config import DEFAULT_RUN, ConfigError, RunConfig
from gaccum_core.runs.claim import RunBusyError
from gaccum_core.execution.executors import EXECUTORS
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from gaccum_core.sweeps.checks import check_sweep
from gaccum_core.sweeps.commands import run_command
from gaccum_core.sweeps.files import sweep_dir, write_spec, write_summary
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.train.device import gpu_count
from gaccum_core.sweeps.members import find_members
from gaccum_core.sweeps.spec import AXES, KINDS, Cell, SweepSpec, parse_item, parse_values, sweep_runs
from gaccum_core.sweeps.summary import Summary, summarize
from gaccum_core.views.sweep_table import display_table


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `sweep` command: a comma list per field a sweep may cross, one value for the others, the effective
    batch, repeats, what to do."""
    parser = commands.add_parser(
        "sweep", help="run a grid of settings × repeats and summarise each cell with 95%% intervals",
        description="Cross comma-separated values of any run flag of training (--micro-batch-size 8,16,32 --amp "
                    "off,bf16 --lr 0.01,0.05 --optimizer sgd,adamw; where a run runs or reads, what it writes or "
                    "records take one value), "
                    "run each combination --repeats times as ordinary runs (skipping those a previous run of the "
                    "same command finished), and summarise each cell: final loss, test accuracy, samples/s, "
                    "peak memory, skipped steps and time as mean ± 95% interval, and whether the cells that "
                    "differ only in b and k coincide.")
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        crossed = f.name in AXES
        how = "comma-separated values to cross" if crossed else "one value: a sweep does not cross it"
        help_text = f"{f.metadata['help']} (default: {getattr(DEFAULT_RUN, f.name)}; {how})"
        kind = "BOOL" if KINDS[f.name] == "bool" else "A"
        metavar = f"{kind},…" if crossed else kind
        if KINDS[f.name] == "bool":
            parser.add_argument(flag, nargs="?", const="true", default=None, dest=f.name, metavar=metavar,
                                help=help_text)
        else:
            parser.add_argument(flag, default=None, dest=f.name, metavar=metavar, help=help_text)
    parser.add_argument("--effective-batch", type=typed("int", "--effective-batch"), default=None, metavar="INT",
                        help="the effective batch E = N·b·k of every cell: k is derived for each b (leave out "
                             "--accum-steps)")
    parser.add_argument("--repeats", type=typed("int", "--repeats"), default=1, metavar="INT",
                        help="runs per cell, with the seeds seed, seed+1, … (default: 1)")
    parser.add_argument("--same-seed", action="store_true",
                        help="repeat with the same seed each time: the spread is timing noise alone")
    add_runs_dir_flag(parser)
    parser.add_argument("--executor", choices=EXECUTORS, default="thread",
                        help="train in this process (thread) or in worker processes (process) (default: thread)")
    parser.add_argument("--print-commands", action="store_true",
                        help="print one `python -m gaccum_core run …` line per run not yet done in --runs-dir, and "
                             "run nothing")
    parser.add_argument("--summary-only", action="store_true",
                        help="start no run: summarise the runs done (e.g. by a cluster, in a shared --runs-dir)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=sweep_command)
    return parser


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    """The sweep the flags ask for: a flag with several values is crossed, one with one value is common (a flag
    a sweep does not cross takes its text as one value: a path may hold a comma)."""
    grid, common = [], {}
    for f in dataclasses.fields(RunConfig):
        text = getattr(args, f.name)
        if text is None:
            common[f.name] = getattr(DEFAULT_RUN, f.name)
            continue
        kind = KINDS[f.name]
        values = parse_values(f.name, kind, text) if f.name in AXES else (parse_item(f.name, kind, text),)
        if len(values) > 1:
            grid.append((f.name, values))
        else:
            common[f.name] = values[0]
    return SweepSpec(tuple(grid), tuple(common.items()), args.repeats, args.same_seed, args.effective_batch)


def sweep_command(args: argparse.Namespace) -> int:
    """Check the whole grid, then print its commands, summarise it, or run it; the exit status."""
    try:
        spec = spec_from_args(args)
        found = check_sweep(spec)
        refuse_unused_fsdp_flags([cell.config for cell in found])
        if not (args.print_commands or args.summary_only):
            _refuse_several_machines(found)
    except ValueError as exc:  # a ConfigError names its flag; data and model errors explain themselves
        print(flag_error(exc) if isinstance(exc, ConfigError) else f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    if args.print_commands:
        return _print_commands(spec, args.runs_dir)
    runner = Runner(args.runs_dir, executor=args.executor, warm_spare=False)
    try:
        if args.summary_only:
            write_spec(args.runs_dir, spec)
            summary = summarize(runner.store, spec)
            write_summary(args.runs_dir, spec.sweep_id, summary.table)
            return _report(summary, args, 0 if summary.complete else 1)
        job = SweepJob(runner, spec, gpu_count()).start()
    except OSError as exc:
        print(f"gaccum: error: --runs-dir: {exc}", file=sys.stderr)
        return 2
    except RunBusyError as exc:  # the same sweep goes in another server or command line
        print(f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    progress = follow_sweep(job)
    if job.summary is None:
        print(f"gaccum: sweep {spec.sweep_id} {progress.state}: {progress.message}", file=sys.stderr)
        return 1
    status = {"finished": 0 if job.summary.complete else 1, "stopped": 130}.get(progress.state, 1)
    return _report(job.summary, args, status)


def _refuse_several_machines(cells: list[Cell]) -> None:
    """ConfigError naming --nnodes when a cell spans machines: a sweep trains its runs here, one after another,
    and a multi-node run needs every machine to start it at once."""
    for cell in cells:
        if cell.config.nnodes > 1:
            raise ConfigError("nnodes", cell.config.nnodes, "1 when the sweep trains its runs here; for several "
                              "machines, --print-commands prints each run's `run` command to start on every node "
                              "with --node-rank and --rdzv-endpoint")


def _print_commands(spec: SweepSpec, runs_dir: str) -> int:
    """One `run` line per run not yet done in runs_dir (nothing is written); 0."""
    runs = sweep_runs(spec)
    members = find_members(RunStore(runs_dir), spec.sweep_id, runs)
    todo = [run for run in runs if not getattr(members.get((run.cell, run.repeat)), "done", False)]
    for run in todo:
        print(run_command(run, runs_dir))
    print(f"gaccum: {len(todo)} of the {len(runs)} runs of sweep {spec.sweep_id} to do; once they are done, the "
          "same sweep command with --summary-only summarises them", file=sys.stderr)
    return 0


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _report(summary: Summary, args: argparse.Namespace, status: int) -> int:
    """The summary on stdout (a table and the verdicts, or JSON), summary.csv's path last."""
    where = sweep_dir(args.runs_dir, summary.spec.sweep_id) / "summary.csv"
    if args.json:
        verdicts = [{"cells": list(v.labels), "expected": v.expected, "coincide": v.coincide,
                     "max_diff": _finite(v.largest[1]), "text": v.text()} for v in summary.verdicts]
        print(json.dumps({"sweep_id": summary.spec.sweep_id, "summary_csv": str(where.resolve()),
                          "complete": summary.complete, "verdicts": verdicts, "unfinished_runs": summary.unfinished(),
                          "cells": json.loads(summary.table.to_json(orient="records"))}))
        return status
    print(display_table(summary.table).to_string(index=False))
    for verdict in summary.verdicts:
        print(("FLAGGED: " if verdict.surprising else "") + verdict.text())
    incomplete = summary.incomplete_words()
    for line in incomplete:
        print(f"INCOMPLETE: {line}")
    if incomplete:
        print("The same sweep command trains those runs again; the runs done are kept.")
    print(where.resolve())
    return status
