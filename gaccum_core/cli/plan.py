"""The command line's planner: `plan` prints a measured table and a recommendation; `run
--micro-batch-size auto` plans, then runs with the recommendation."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from gaccum_core.cli.args import Commands, add_config_flags, config_from_args, flag_error, typed
from gaccum_core.cli.progress import measure_with_progress
from gaccum_core.config import CHOICES, ConfigError, RunConfig, fields_with
from gaccum_core.data.text import CORPUS_DATASETS, cache_status, tokenise_corpus
from gaccum_core.data.tokenising import BuildProgress
from gaccum_core.plan.planner import Plan, PlanRequest, config_from_plan, default_budget_mb
from gaccum_core.plan.search import mb
from gaccum_core.plan.sharding import DDP, SHARDING_MODES, run_fields
from gaccum_core.train.device import resolve_device
from gaccum_core.train.checks import preflight
from gaccum_core.views.plan import format_table

# RunConfig fields `plan` has no config flag for: what it chooses or crosses (--sharding and --nproc are its
# own), a run's length and its processes.
PLANNED = frozenset((*fields_with("planner", "chooses"), *fields_with("planner", "ignores")))
# The options whose plan flags take a list of values to cross.
CROSSED = ("amp", "clear_cache", "compile", "activation_checkpointing")
FSDP_MODES = tuple(m for m in SHARDING_MODES if m != DDP)  # what --sharding fsdp stands for
LINE_EVERY_S = 10.0  # away from a terminal: seconds between tokenising progress lines
REDRAW_EVERY_S = 0.2  # on a terminal: between redraws of the tokenising line


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `plan` command: its config flags less PLANNED, the target, the options to cross and the output."""
    parser = commands.add_parser(
        "plan", help="which micro-batch fits the memory budget for an effective batch, with which k and options",
        description="Measure, for each combination of the chosen options, the largest micro-batch b that divides "
                    "the effective batch and fits the memory budget (memory grows linearly in b: a few sizes "
                    "measured around where that line crosses the budget, each a step of real training), time "
                    "the sizes near it until their samples/s is known within --precision (95% interval) or "
                    "--time-cap-s, then recommend, among the settings that fit with a margin, the largest b of "
                    "those the timing cannot tell from the fastest (within twice that precision, compared turn "
                    "by turn).")
    add_config_flags(parser, leave_out=PLANNED)
    add_target_flags(parser, for_run=False)
    for name in CROSSED:
        parser.add_argument("--" + name.replace("_", "-"), default="off", metavar="A,B", dest=name,
                            help=f"comma-separated values to cross, from {','.join(CHOICES[name])} (default: off)")
    parser.add_argument("--sharding", default=DDP, metavar="A,B",
                        help=f"comma-separated sharding modes to cross, from {','.join(SHARDING_MODES)} (fsdp: both "
                             "fsdp modes), per rank over --nproc processes; the sharded ones are counted, not timed "
                             "(default: ddp)")
    parser.add_argument("--nproc", type=typed("int", "--nproc"), default=1, metavar="N",
                        help="the processes (ranks) the effective batch is split over: each trains E/N per step and "
                             "the budget is per rank (default: 1)")
    parser.add_argument("--timed-steps", type=typed("int", "--timed-steps"), default=PlanRequest.timed_steps,
                        metavar="INT", help="at most this many optimizer steps timed per timed size, after one "
                                            f"warm-up (default: {PlanRequest.timed_steps})")
    parser.add_argument("--time-cap-s", type=typed("float", "--time-cap-s"), default=PlanRequest.time_cap_s,
                        metavar="S", help="seconds of timed steps per timed size, unless its speed is known sooner "
                                          f"(default: {PlanRequest.time_cap_s:g})")
    parser.add_argument("--precision", type=typed("float", "--precision"), default=PlanRequest.precision,
                        metavar="FRACTION", help="timing stops once the 95%% interval's half-width is within this "
                                                 f"share of the speed (default: {PlanRequest.precision:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.set_defaults(handler=plan_command)
    return parser


def add_target_flags(parser: argparse.ArgumentParser, for_run: bool) -> None:
    """--effective-batch and --memory-budget-mb: what `plan`, and `run --micro-batch-size auto`, plan for."""
    parser.add_argument("--effective-batch", type=typed("int", "--effective-batch"), default=None, metavar="INT",
                        required=not for_run, help="the effective batch E = b*k to plan for"
                        + (" (with --micro-batch-size auto)" if for_run else ""))
    parser.add_argument("--memory-budget-mb", type=typed("float", "--memory-budget-mb"), default=None,
                        metavar="MB", help="training memory allowed (default on CUDA: the GPU's whole memory "
                                           "less 10%%; required on the CPU)")


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _modes(text: str) -> tuple[str, ...]:
    """--sharding's modes, fsdp standing for fsdp/every and fsdp/last."""
    return tuple(mode for part in _split(text) for mode in (FSDP_MODES if part == "fsdp" else (part,)))


def run_mode(config: RunConfig) -> str:
    """The planner's sharding mode of a run's config: ddp, fsdp/every or fsdp/last."""
    return DDP if config.sharding == DDP else f"{config.sharding}/{config.fsdp_sync}"


def budget_from_args(base: RunConfig, args: argparse.Namespace) -> float:
    """--memory-budget-mb, or on CUDA the GPU's whole memory less the margin; ConfigError on the CPU."""
    budget = args.memory_budget_mb
    if budget is None:
        budget = default_budget_mb(resolve_device(base.device))
        if budget is None:
            raise ConfigError("memory_budget_mb", None, "a number of megabytes, required on the CPU: its resident "
                                                        "memory is mostly the interpreter, not training")
    return budget


def summary(plan: Plan) -> str:
    """The lines printed under the table: what was measured, where, how long, and the recommendation."""
    ranks = plan.request.world_size
    lines = [f"device {plan.device}; peak = {plan.memory_words()}",
             f"effective batch {plan.request.effective_batch}"
             + (f" over {ranks} ranks ({plan.request.per_rank_batch} each), budget per rank " if ranks > 1 else
                ", budget ") + f"{mb(plan.request.budget_mb)}, "
             f"{len(plan.candidates)} candidates in {plan.seconds:.1f} s "
             f"({sum(c.timed_steps is not None for c in plan.candidates)} timed; samples/s: mean ± 95% interval)"]
    choice = plan.recommended
    if choice is not None:
        o = choice.options
        sharded = "".join(f" --{k.replace('_', '-')} {v}" for k, v in run_fields(o.sharding).items())
        lines.append(f"recommended: --micro-batch-size {choice.micro_batch_size} --accum-steps {choice.accum_steps} "
                     f"--amp {o.amp} --clear-cache {o.clear_cache} --compile {o.compile} "
                     f"--activation-checkpointing {o.activation_checkpointing}"
                     + (f"{sharded} --nproc {ranks}" if ranks > 1 else ""))
    lines.append(plan.reason)
    return "\n".join(lines)


def plan_command(args: argparse.Namespace) -> int:
    """Plan, print the table and the recommendation (or one JSON object); 0 when something fits, else 1."""
    try:
        # --amp, --clear-cache, --compile, --activation-checkpointing and --sharding are the plan's lists to cross:
        # the base run has them off, in one process (--nproc is the plan's world size).
        base = config_from_args(args, micro_batch_size=1, accum_steps=1, amp="off", clear_cache="off", compile="off",
                                activation_checkpointing="off", sharding=DDP, nproc=1)
        preflight(base)
        request = PlanRequest(base, args.effective_batch, budget_from_args(base, args), _split(args.amp),
                              _split(args.clear_cache), _split(args.compile), _modes(args.sharding), args.nproc,
                              args.timed_steps, time_cap_s=args.time_cap_s, precision=args.precision,
                              activation_checkpointing=_split(args.activation_checkpointing))
        tokenise_with_progress(base)
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    except ValueError as exc:  # data and model errors explain themselves
        print(f"gaccum: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gaccum: stopped while tokenising the corpus: nothing was cached", file=sys.stderr)
        return 130
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
    if args.micro_batch_size != "auto":
        if args.memory_budget_mb is not None:
            raise ConfigError("memory_budget_mb", args.memory_budget_mb, "left out unless --micro-batch-size auto "
                              "(the budget is what the planner chooses b for)")
        config = config_from_args(args)
        if args.effective_batch is not None and args.effective_batch != config.effective_batch_size:
            raise ConfigError("effective_batch", args.effective_batch,
                              f"b*k*processes = {config.effective_batch_size} for the micro-batch and accumulation "
                              "steps given, or --micro-batch-size auto to let the planner choose them")
        return config, None
    if args.effective_batch is None:
        raise ConfigError("effective_batch", None, "an integer, required with --micro-batch-size auto")
    base = config_from_args(args, micro_batch_size=1, accum_steps=1)
    tokenise_with_progress(base)
    # Only b is planned: the run keeps its own amp, cache clearing, compile, checkpointing and sharding, over its
    # processes.
    request = PlanRequest(base, args.effective_batch, budget_from_args(base, args), (base.amp,), (base.clear_cache,),
                          (base.compile,), (run_mode(base),), base.world_size,
                          activation_checkpointing=(base.activation_checkpointing,))
    plan = measure_with_progress(request)
    config = config_from_plan(base, plan)  # nothing fits: ConfigError with the reason, the one error line
    print(f"gaccum: planned: {plan.reason}", file=sys.stderr)
    return config, plan


def tokenise_with_progress(config: RunConfig, every_s: float = LINE_EVERY_S) -> None:
    """Tokenise config's corpus into its token cache before planning, unless it is there (the planner's steps read
    it), saying how far on stderr: a line redrawn on a terminal, else one every every_s seconds and the last."""
    if config.dataset not in CORPUS_DATASETS or cache_status(config).cached:
        return
    shown = _TokenisingLine(every_s)
    try:
        tokenise_corpus(config, shown)
    finally:
        shown.close()


class _TokenisingLine:
    """A build's progress on stderr: 'gaccum: tokenising c.jsonl: 12 of 100 MB · 3.1 MB/s · ... · 28 s left'."""

    def __init__(self, every_s: float) -> None:
        self.terminal = sys.stderr.isatty()
        self.every_s = REDRAW_EVERY_S if self.terminal else every_s
        self.said_at, self.last, self.unsaid = -math.inf, None, False

    def __call__(self, where: BuildProgress) -> None:
        self.last, self.unsaid = where, True
        if where.waiting or time.monotonic() - self.said_at >= self.every_s:
            self._say(where.words())

    def _say(self, text: str) -> None:
        start, end = ("\r\x1b[K", "") if self.terminal else ("", "\n")  # a terminal's line is redrawn in place
        print(f"{start}gaccum: {text}", end=end, file=sys.stderr, flush=True)
        self.said_at, self.unsaid = time.monotonic(), False

    def close(self) -> None:
        """The last progress if it was not shown, and the line ended."""
        if self.last is None:
            return
        if self.unsaid:
            self._say(self.last.words())
        if self.terminal:
            print(file=sys.stderr)
