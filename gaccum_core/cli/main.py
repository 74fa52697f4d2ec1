"""Command line: `python -m gaccum_core run ...` trains one run with a progress bar; `doctor` checks the machine."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any, Sequence

from tqdm import tqdm

from gaccum_core.config import FIELD_HELP, ConfigError, RunConfig
from gaccum_core.runs.supervisor import Launch
from gaccum_core.runs.executors import EXECUTORS
from gaccum_core.runs.runner import Runner
from gaccum_core.runs.snapshot import RunSnapshot
from gaccum_core.states import RunState

_CHOICES = {"reduction", "amp", "clear_cache", "compile", "optimizer", "lr_schedule", "model", "dataset"}


# argparse takes only -N and -N.N for negative numbers; anything else after a flag (--lr -inf,
# --lr -1e-3) would be read as an unknown flag, hiding the bad value behind "expected one argument".
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"gaccum: error: {message}\n")


def _typed(kind: str, flag: str):
    def convert(text: str) -> Any:
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            noun = "an integer" if kind == "int" else "a number"
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not allowed: {noun}") from None
    convert.__name__ = kind
    return convert


def _micro_batch_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else _typed("int", "--micro-batch-size")(text)


def _add_config_flags(parser: argparse.ArgumentParser, leave_out: frozenset[str] = frozenset()) -> None:
    import gaccum_core.config as config_module

    for f in dataclasses.fields(RunConfig):
        if f.name in leave_out:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        help_text = f"{FIELD_HELP[f.name]} (default: {default})"
        if f.name == "micro_batch_size":
            parser.add_argument(flag, type=_micro_batch_or_auto, default=default, dest=f.name, metavar="INT|auto",
                                help=help_text[:-1] + "; auto: the planner's choice for --effective-batch)")
        elif f.type == "bool":
            parser.add_argument(flag, action="store_true", dest=f.name, help=help_text)
        elif f.type in ("int", "float"):
            parser.add_argument(flag, type=_typed(f.type, flag), default=default, dest=f.name,
                                metavar=f.type.upper(), help=help_text)
        else:
            choices = _choices(config_module, f.name) if f.name in _CHOICES else None
            parser.add_argument(flag, default=default, dest=f.name, choices=choices,
                                metavar=f.name.upper() if choices is None else None, help=help_text)


def _choices(module: Any, name: str) -> tuple[str, ...]:
    table = {"reduction": "REDUCTIONS", "amp": "AMP_MODES", "clear_cache": "CLEAR_CACHE_MODES",
             "compile": "COMPILE_MODES", "optimizer": "OPTIMIZERS", "lr_schedule": "LR_SCHEDULES",
             "model": "MODELS", "dataset": "DATASETS"}
    return getattr(module, table[name])


def build_parser() -> argparse.ArgumentParser:
    """The `gaccum` argument parser with its run, plan, resume, worker and doctor commands."""
    parser = _OneLineParser(prog="python -m gaccum_core", description="Exact gradient accumulation experiments.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    run = commands.add_parser("run", help="train one run in the foreground with a progress bar",
                              description="Train one run; prints the run directory as the last line.")
    _add_config_flags(run)
    run.add_argument("--runs-dir", default="runs", help="directory that holds one folder per run (default: runs)")
    run.add_argument("--name", default=None, help="a label appended to the run id")
    run.add_argument("--executor", choices=EXECUTORS, default="thread",
                     help="train in this process (thread) or in a worker process (process); "
                          "--nproc above 1 always uses torchrun's worker processes (default: thread)")
    run.add_argument("--node-rank", type=_typed("int", "--node-rank"), default=0, metavar="INT",
                     help="this machine's rank in the job; rank 0 writes the run directory (default: 0)")
    run.add_argument("--rdzv-endpoint", default="", metavar="HOST:PORT",
                     help="where the machines meet: host and free port of node rank 0 (torchrun --rdzv-endpoint)")
    _add_plan_flags(run, for_run=True)
    plan = commands.add_parser(
        "plan", help="which micro-batch fits the memory budget for an effective batch, with which k and options",
        description="Measure, for each combination of the chosen options, the largest micro-batch b that divides "
                    "the effective batch and fits the memory budget (doubling, then bisection over its divisors; "
                    "each candidate a short burst of real training), then recommend the fastest that fits with "
                    "a margin.")
    _add_config_flags(plan, leave_out=_PLANNED)
    _add_plan_flags(plan, for_run=False)
    worker = commands.add_parser("worker", help="internal: train one run in this process (started by the runner "
                                                "or torchrun)")
    worker.add_argument("--run-dir", default=None, help="the run directory (global rank 0)")
    worker.add_argument("--config", default=None, help="the run's config as JSON (ranks on other machines)")
    worker.add_argument("--spare", action="store_true", help="warm up, then read the run directory from stdin")
    resume = commands.add_parser(
        "resume", help="continue a stopped, interrupted or failed run from its checkpoint (or extend a finished one)",
        description="Continue a run in its own directory from checkpoint.pt, exactly as if it had never "
                    "stopped; prints the run directory as the last line. --epochs/--max-steps extend it: the "
                    "cosine schedule then does NOT equal a run planned that long from the start (its length "
                    "changes mid-way); config.json's history records the change.")
    resume.add_argument("run", metavar="RUN_ID_OR_DIR", help="the run's id (in --runs-dir) or its directory")
    resume.add_argument("--runs-dir", default="runs", help="directory that holds one folder per run (default: runs)")
    resume.add_argument("--epochs", type=_typed("int", "--epochs"), default=None, metavar="INT",
                        help="a new, larger number of epochs")
    resume.add_argument("--max-steps", type=_typed("int", "--max-steps"), default=None, metavar="INT",
                        help="a new, larger step limit (0 = none)")
    resume.add_argument("--executor", choices=EXECUTORS, default="thread", help="as for run (default: thread)")
    doctor = commands.add_parser("doctor", help="what this machine can do: torch, CUDA, memory, AMP, compile")
    doctor.add_argument("--device", default="auto", help="device to check (default: auto)")
    return parser


_PLANNED = frozenset({"micro_batch_size", "accum_steps", "amp", "clear_cache", "compile", "epochs", "max_steps",
                      "eval_every", "checkpoint_every", "nproc", "nnodes", "sync_every_micro_batch"})


def _add_plan_flags(parser: argparse.ArgumentParser, for_run: bool) -> None:
    parser.add_argument("--effective-batch", type=_typed("int", "--effective-batch"), default=None, metavar="INT",
                        required=not for_run, help="the effective batch E = b*k to plan for"
                        + (" (with --micro-batch-size auto)" if for_run else ""))
    parser.add_argument("--memory-budget-mb", type=_typed("float", "--memory-budget-mb"), default=None,
                        metavar="MB", help="training memory allowed (default on CUDA: the device's free memory "
                                           "less 10%%; required on the CPU)")
    if for_run:
        return
    import gaccum_core.config as config_module

    for name in ("amp", "clear_cache", "compile"):
        allowed = ",".join(_choices(config_module, name))
        parser.add_argument("--" + name.replace("_", "-"), default="off", metavar="A,B", dest=name,
                            help=f"comma-separated values to cross, from {allowed} (default: off)")
    parser.add_argument("--timed-steps", type=_typed("int", "--timed-steps"), default=2, metavar="INT",
                        help="optimizer steps timed per candidate, after one warm-up and one memory step (default: 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def _config_from_args(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    return RunConfig(**{**values, **overrides})


def _flag_error(exc: ConfigError) -> str:
    flag = "--" + exc.field.replace("_", "-")
    return f"gaccum: error: {flag}={exc.value!r} is not allowed: {exc.allowed}"


def run_command(args: argparse.Namespace) -> int:
    """Validate, train with a progress bar, print the run directory; 0 when finished."""
    from gaccum_core.train.engine import preflight
    from gaccum_core.cli.plan import planned_config

    try:
        config, plan = planned_config(args)
        preflight(config)
    except ConfigError as exc:
        print(_flag_error(exc), file=sys.stderr)
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
        return _join_job(config, launch)
    runner = Runner(args.runs_dir, executor=args.executor, launch=launch, warm_spare=False)  # one run: no spare
    try:
        run_id = runner.submit(config, args.name, plan=None if plan is None else plan.to_dict())
    except (ValueError, OSError) as exc:  # StoreError says which directory and why; the store removed the run
        print(f"gaccum: error: --runs-dir: {exc}", file=sys.stderr)
        return 2
    return _follow_to_the_end(runner, run_id)


def _follow_to_the_end(runner: Runner, run_id: str) -> int:
    """Progress bar until the run ends, its message, its directory last; exit status 0, 130 (stopped) or 1."""
    snapshot = _follow(runner, run_id)
    if snapshot.message:
        print(f"{snapshot.state}: {snapshot.message}", file=sys.stderr)
    print(runner.store.path(run_id).resolve())
    return {RunState.FINISHED: 0, RunState.STOPPED: 130}.get(snapshot.state, 1)


def _launch_from_args(args: argparse.Namespace, config: RunConfig) -> Launch:
    """torchrun's rendezvous for this machine; ValueError naming the flag that does not fit."""
    if not 0 <= args.node_rank < config.nnodes:
        raise ValueError(f"--node-rank={args.node_rank} is not allowed: 0 to {config.nnodes - 1} (--nnodes={config.nnodes})")
    if config.nnodes > 1 and not re.match(r"^[^:\s]+:\d+$", args.rdzv_endpoint):
        raise ValueError(f"--rdzv-endpoint={args.rdzv_endpoint!r} is not allowed: HOST:PORT of node rank 0's "
                         f"machine, required with --nnodes={config.nnodes}")
    return Launch(args.node_rank, args.rdzv_endpoint)


def _join_job(config: RunConfig, launch: Launch) -> int:
    """On a machine of node rank > 0: start this machine's ranks; rank 0's machine writes the run."""
    import subprocess

    from gaccum_core.runs.supervisor import torchrun_command

    command = torchrun_command(config, launch, None, ["--config", config.to_json()])
    print(f"gaccum: joining the job at {launch.rdzv_endpoint} as node {launch.node_rank} of {config.nnodes}; "
          "stop it from node 0", file=sys.stderr)
    return subprocess.call(command)


def resume_command(args: argparse.Namespace) -> int:
    """Resume a run from its checkpoint with a progress bar; exit codes as for run."""
    from pathlib import Path

    from gaccum_core.train.checkpoint import CheckpointError
    from gaccum_core.runs.store import StoreError

    given = Path(args.run)
    runs_dir, run_id = (given.parent, given.name) if given.is_dir() else (Path(args.runs_dir), args.run)
    runner = Runner(runs_dir, executor=args.executor, warm_spare=False)
    try:
        runner.resume(run_id, epochs=args.epochs, max_steps=args.max_steps)
    except ConfigError as exc:
        print(_flag_error(exc), file=sys.stderr)
        return 2
    except (CheckpointError, StoreError, RuntimeError) as exc:
        print(f"gaccum: error: resume {args.run}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gaccum: error: resume {args.run}: no such run ({exc.strerror}: {exc.filename})", file=sys.stderr)
        return 2
    return _follow_to_the_end(runner, run_id)


def _follow(runner: Runner, run_id: str) -> RunSnapshot:
    """Draw a progress bar until the run ends; Ctrl-C stops the run and waits for it."""
    bar = tqdm(total=None, unit="step", desc=run_id, file=sys.stderr, dynamic_ncols=True)
    try:
        while not (snap := runner.wait(run_id, timeout=0.2)).done:
            _draw(bar, snap)
    except KeyboardInterrupt:
        runner.stop(run_id)
        snap = runner.wait(run_id)
    _draw(bar, snap)
    bar.close()
    return snap


def _draw(bar: tqdm, snap: RunSnapshot) -> None:
    if snap.total_steps and bar.total != snap.total_steps:
        bar.reset(total=snap.total_steps)
    bar.n = snap.steps_done
    if snap.metrics:
        last = snap.metrics[-1]
        postfix = {"loss": f"{last['loss']:.4f}", "skipped": last["skipped_total"]}
        if last["scale"] is not None:
            postfix["scale"] = f"{last['scale']:g}"
        if last.get("tokens_per_s") is not None:  # a language run
            postfix["tokens/s"] = f"{last['tokens_per_s']:.0f}"
        bar.set_postfix(postfix, refresh=False)
    bar.set_description(f"{snap.run_id} [{snap.state}]", refresh=False)
    bar.refresh()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m gaccum_core`."""
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from gaccum_core.cli.doctor import doctor_report

        try:
            print(doctor_report(args.device))
        except ConfigError as exc:
            print(_flag_error(exc), file=sys.stderr)
            return 2
        return 0
    if args.command == "resume":
        return resume_command(args)
    if args.command == "plan":
        from gaccum_core.cli.plan import plan_command

        return plan_command(args)
    if args.command == "worker":
        from gaccum_core.runs.worker import main as worker_main

        worker_main(args.run_dir, args.config, args.spare)  # exits the process
    return run_command(args)
