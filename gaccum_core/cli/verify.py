"""`verify`: does your own training loop accumulate as one big batch does? Your file's window run on every split
of one batch, the gradients compared, the mistake named; exit 0 invariant (and matching the objective, where one is
given), 1 not, 2 bad input. Writes nothing but its output. `check` asks the same of gaccum's own engine."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from gaccum_core.cli.args import Commands, typed
from gaccum_core.cli.check import WIDTH
from gaccum_core.verify.check import check_file
from gaccum_core.verify.loop import VerifyError
from gaccum_core.verify.report import VerifyReport
from gaccum_core.verify.splits import describe


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `verify` command: FILE.py and how to read it."""
    parser = commands.add_parser(
        "verify", help="does your own training loop accumulate as one big batch? (FILE.py: setup and window)",
        description="Import FILE.py (as you run it), call setup() for (model, batch), then run window(model, "
                    "micro_batches) on the batch split several ways, each from the same weights, buffers and random "
                    "state, and compare the .grad it leaves: a correct accumulation loop gives the same gradient for "
                    "every split. When they differ, name the accumulation mistake that fits, with a one-line fix. "
                    "The tolerances are `check`'s, which asks the same of gaccum's own engine. Exit status: 0 "
                    "split-invariant (and matching the objective, where FILE.py defines one), 1 not, 2 bad input. "
                    "Writes nothing but its output.")
    parser.add_argument("file", metavar="FILE.py", help="your loop: setup() -> (model, batch); window(model, "
                        "micro_batches) runs forward, loss scaling and backward per micro-batch (no step, no zero_grad)")
    parser.add_argument("--setup", default="setup", metavar="NAME", help="the function returning (model, batch): "
                        "a dict of tensors (first dimension: samples) or a list of samples (default: setup)")
    parser.add_argument("--window", default="window", metavar="NAME", help="the function running one optimizer "
                        "step's micro-batches, k = len(micro_batches) (default: window)")
    parser.add_argument("--objective", default=None, metavar="NAME", help="objective(model, batch): the loss the "
                        "loop means on the whole batch (default: objective, when FILE.py defines it)")
    parser.add_argument("--splits", default=None, metavar="SPLITS", help="the splits to try, micro-batch sizes "
                        "between commas and splits between slashes: 12/6,6/1,11 (default: the whole batch, halves, "
                        "[1, B-1], [B-1, 1], one sample each when B <= 16, and a seeded uneven three-way split)")
    parser.add_argument("--fixed-k", type=typed("int", "--fixed-k"), default=None, metavar="K",
                        help="for loops configured with K micro-batches per step (gradient_accumulation_steps): "
                        "passed as window(model, micro_batches, fixed_k=K); splits hold at most K micro-batches, "
                        "fewer being a partial window")
    parser.add_argument("--device", default=None, metavar="DEVICE", help="cpu, cuda, cuda:N or auto: moves the "
                        "model and a dict batch's tensors (a list batch is passed as it is; default: as setup left them)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=verify_command)
    return parser


def verify_command(args: argparse.Namespace) -> int:
    """Check the loop and print the verdict (or JSON); 0 passed, 1 not, 2 bad input, one line on stderr."""
    try:
        report = check_file(args.file, args.setup, args.window, args.objective, args.splits, args.fixed_k,
                            args.device, objective_flag="--objective")
    except VerifyError as exc:
        print(f"gaccum: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict()) if args.json else render_verify(report))
    return 0 if report.passed else 1


def render_verify(report: VerifyReport) -> str:
    """The verdict wrapped to WIDTH, one line per split, and the fix."""
    lines = textwrap.wrap(report.verdict, WIDTH, break_long_words=False, break_on_hyphens=False) + [""]
    width = max(len("split"), *(len(describe(s.sizes)) for s in report.splits))
    lines.append(f"{'split':<{width}}  {'k':>3}  {'rel. difference':>15}  {'scale':>8}")
    lines += [f"{describe(s.sizes):<{width}}  {len(s.sizes):>3}  {s.difference:>15.1e}  {s.scale:>8.4g}"
              for s in report.splits]
    return "\n".join(lines + ["", *textwrap.wrap(f"Fix: {report.fix}", WIDTH, break_long_words=False)])
