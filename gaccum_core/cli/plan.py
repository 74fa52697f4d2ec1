"""The command line's planner: `plan` prints a measured table and a recommendation; `run
--micro-batch-size auto` plans, then runs with the recommendation."""

from __future__ import annotations

import argparse
import json
import sys

from tqdm import tqdm

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.plan.planner import (MEMORY_SOURCES, TABLE_COLUMNS, Plan, PlanRequest, config_from_plan, default_budget_mb,
                              make_plan)
from gaccum_core.plan.search import Candidate, mb


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def budget_from_args(base: RunConfig, args: argparse.Namespace) -> float:
    """--memory-budget-mb, or on CUDA the device's free memory less the margin; ConfigError on the CPU."""
    from gaccum_core.train.device import resolve_device

    budget = args.memory_budget_mb
    if budget is None:
        budget = default_budget_mb(resolve_device(base.device))
        if budget is None:
            raise ConfigError("memory_budget_mb", None, "a number of megabytes, required on the CPU: its resident "
                                                        "memory is mostly the interpreter, not training")
    return budget


def measure_with_progress(request: PlanRequest) -> Plan:
    """make_plan with a progress bar on stderr (candidates measured, of at most how many, time left)."""
    bar = tqdm(total=None, unit="candidate", desc="planning", file=sys.stderr, dynamic_ncols=True)

    def progress(done: int, at_most: int, candidate: Candidate | None, _seconds: float) -> None:
        if bar.total != at_most:
            bar.total = at_most
        bar.n = done
        if candidate is not None:
            bar.set_postfix_str(f"{candidate.options.label()} b={candidate.micro_batch_size}: {candidate.status}",
                                refresh=False)
        bar.refresh()

    try:
        return make_plan(request, progress)
    finally:
        bar.close()


def format_table(plan: Plan) -> str:
    """The candidates as an aligned text table, in the order measured."""
    import pandas as pd

    frame = pd.DataFrame(plan.rows())
    names = [name for name, _ in TABLE_COLUMNS if name in frame]
    frame = frame[names].rename(columns=dict(TABLE_COLUMNS))
    formats = {"peak MB": "{:.3g}", "activations MB": "{:.3g}", "samples/s": "{:.0f}", "tokens/s": "{:.0f}", "s/step": "{:.3f}"}
    return frame.to_string(index=False, na_rep="-",
                           formatters={c: f.format for c, f in formats.items() if c in frame})


def summary(plan: Plan) -> str:
    """The lines printed under the table: what was measured, where, how long, and the recommendation."""
    lines = [f"device {plan.device}; peak = {MEMORY_SOURCES[plan.memory_source]}",
             f"effective batch {plan.request.effective_batch}, budget {mb(plan.request.budget_mb)}, "
             f"{len(plan.candidates)} candidates in {plan.seconds:.1f} s"]
    choice = plan.recommended
    if choice is not None:
        o = choice.options
        lines.append(f"recommended: --micro-batch-size {choice.micro_batch_size} --accum-steps {choice.accum_steps} "
                     f"--amp {o.amp} --clear-cache {o.clear_cache} --compile {o.compile}")
    lines.append(plan.reason)
    return "\n".join(lines)


def plan_command(args: argparse.Namespace) -> int:
    """Plan, print the table and the recommendation (or one JSON object); 0 when something fits, else 1."""
    from gaccum_core.cli.main import _config_from_args, _flag_error
    from gaccum_core.train.engine import preflight

    try:
        # --amp, --clear-cache and --compile are the plan's lists to cross: the base run has them off.
        base = _config_from_args(args, micro_batch_size=1, accum_steps=1, amp="off", clear_cache="off", compile="off")
        preflight(base)
        request = PlanRequest(base, args.effective_batch, budget_from_args(base, args), _split(args.amp),
                              _split(args.clear_cache), _split(args.compile), args.timed_steps)
    except ConfigError as exc:
        print(_flag_error(exc), file=sys.stderr)
        return 2
    except ValueError as exc:  # data and model errors explain themselves
        print(f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    plan = measure_with_progress(request)
    if args.json:
        print(json.dumps(plan.to_dict()))
    else:
        print(format_table(plan))
        print(summary(plan))
    return 0 if plan.recommended is not None else 1


def planned_config(args: argparse.Namespace) -> tuple[RunConfig, Plan | None]:
    """The run's config; with --micro-batch-size auto, the planner's b and k for --effective-batch (per
    process: E is divided by the processes), with the plan that chose them."""
    from gaccum_core.cli.main import _config_from_args

    if args.micro_batch_size != "auto":
        config = _config_from_args(args)
        if args.effective_batch is not None and args.effective_batch != config.effective_batch_size:
            raise ConfigError("effective_batch", args.effective_batch,
                              f"b*k*processes = {config.effective_batch_size} for the micro-batch and accumulation "
                              "steps given, or --micro-batch-size auto to let the planner choose them")
        return config, None
    if args.effective_batch is None:
        raise ConfigError("effective_batch", None, "an integer, required with --micro-batch-size auto")
    base = _config_from_args(args, micro_batch_size=1, accum_steps=1)
    if args.effective_batch % base.world_size:
        raise ConfigError("effective_batch", args.effective_batch,
                          f"a multiple of the {base.world_size} processes, each planned for E / processes")
    # Only b is planned: the run keeps its own amp, cache clearing and compile.
    request = PlanRequest(base, args.effective_batch // base.world_size, budget_from_args(base, args),
                          (base.amp,), (base.clear_cache,), (base.compile,))
    plan = measure_with_progress(request)
    config = config_from_plan(base, plan)  # nothing fits: ConfigError with the reason, the one error line
    print(f"gaccum: planned: {plan.reason}", file=sys.stderr)
    return config, plan
