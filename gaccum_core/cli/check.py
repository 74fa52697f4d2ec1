"""`check`: is this model ready for exact accumulation? One window's gradient as one batch and
accumulated, per module, with the causes found when they differ; exit 0 equal, 1 not, 2 bad input or a corpus
not tokenised yet (check writes nothing: `plan` and `run` tokenise it)."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import textwrap
from typing import TYPE_CHECKING

from gaccum_core.cli.args import Commands, add_config_flags, config_from_args, flag_error
from gaccum_core.config import DEFAULT_RUN, ConfigError, RunConfig
from gaccum_core.data.load import describe_dataset
from gaccum_core.data.sources import DataError
from gaccum_core.data.text import CORPUS_DATASETS, cache_status
from gaccum_core.lab.equivalence import GradientReport, ReferenceTooLarge, compare_gradients
from gaccum_core.lab.verdict import PRECISION_NAMES
from gaccum_core.models.vision import ModelInputError
from gaccum_core.train.checks import preflight

if TYPE_CHECKING:  # pandas is imported on use: every command line, worker and rank loads this module
    import pandas as pd

WIDTH = 100  # the terminal the output is laid out for
DATA_DIR_SETS = ("mnist", "fashionmnist", "cifar10", "imagefolder")  # the data sets read from --data-dir
MAX_ROWS = 24  # modules listed; a larger model shows its 20 worst, in model order


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `check` command: a flag per config field, as `run` takes them."""
    parser = commands.add_parser(
        "check", help="is accumulation exact on this model? one window's gradient both ways, per module",
        description="From the same weights, take the gradient of the first b*k samples as one batch and "
                    "accumulated over k micro-batches of b; print the verdict and, per module, the worst "
                    "relative L2 error and the cause found (BatchNorm, dropout, a buffer updated in forward, "
                    "the textbook weighting, reduced precision). fp32 on a GPU is IEEE fp32 (TF32 off), as a run "
                    "computes it. Exit status: 0 equal up to float rounding, "
                    "1 differs (or the big batch does not fit in memory), 2 bad input or a corpus not tokenised yet. "
                    "Writes nothing (a corpus is tokenised into the token cache by `plan` or `run`). "
                    "Your own training loop, rather than gaccum's engine: `verify FILE.py`.")
    add_config_flags(parser)
    parser.set_defaults(handler=check_command)
    return parser


def check_command(args: argparse.Namespace) -> int:
    """Compare and print the verdict, the modules and any advice; 0 equal, 1 differs, 2 bad input."""
    if args.micro_batch_size == "auto":
        print("gaccum: error: --micro-batch-size='auto' is not allowed: an integer (the check compares the b "
              "you give; `plan` finds one that fits)", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        _refuse_processes(config)
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    try:
        preflight(config, whole_window=True)  # the device, data and model refuse bad input in one line first
        untokenised = _not_tokenised(config)
        if untokenised:
            print(untokenised, file=sys.stderr)
            return 2
        report = compare_gradients(config)
    except ReferenceTooLarge as exc:
        print(f"gaccum: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(_input_error(exc, config), file=sys.stderr)
        return 2
    print(render_check(config, report))
    return 0 if report.equal else 1


def _refuse_processes(config: RunConfig) -> None:
    """ConfigError naming --nproc or --nnodes above 1: the check compares in one process, so they would be ignored."""
    for field in ("nproc", "nnodes"):
        if getattr(config, field) != 1:
            raise ConfigError(field, getattr(config, field), "1: check compares the two gradients in one process "
                              "(run trains on several; the one-process verdict holds for each rank's window)")


def _not_tokenised(config: RunConfig) -> str | None:
    """The line saying config's corpus is not in its token cache yet (check never tokenises it), else None."""
    if config.dataset not in CORPUS_DATASETS or cache_status(config).cached:
        return None
    flag, value = ("--data-dir", config.data_dir) if config.dataset == "hf-dataset" else ("--text-file", config.text_file)
    return (f"gaccum: {flag}={value!r} is not tokenised yet ({describe_dataset(config)}); check reads windows of the "
            "tokenised corpus and writes nothing: `plan` or `run` on it tokenises it once into the token cache, "
            "then check compares on it")


def _input_error(exc: ValueError, config: RunConfig) -> str:
    """The one error line of refused input, named by the flag it came from where that is known."""
    if isinstance(exc, ConfigError):
        return flag_error(exc)
    message = " ".join(str(exc).split())  # one line, whatever the message
    if isinstance(exc, ModelInputError):
        return f"gaccum: error: --model={config.model!r} is not allowed: {message}"
    if isinstance(exc, DataError) and config.dataset in DATA_DIR_SETS:
        return f"gaccum: error: --data-dir={config.data_dir!r} is not allowed: {message}"
    if isinstance(exc, DataError):
        return f"gaccum: error: --dataset={config.dataset!r} is not allowed: {message}"
    return f"gaccum: error: {message}"


def render_check(config: RunConfig, report: GradientReport) -> str:
    """The verdict wrapped to WIDTH, the per-module table, and how to re-run without dropout if it is on."""
    b, k = config.micro_batch_size, config.accum_steps
    lines = textwrap.wrap(report.verdict, WIDTH, break_long_words=False, break_on_hyphens=False)
    lines += ["", f"{len(report.modules)} modules with parameters; one batch of b*k = {b * k} against {k} "
                  f"micro-batches of b = {b} ({config.dataset}, {PRECISION_NAMES[config.amp]}):", ""]
    lines += module_lines(report.modules)
    if "dropout" in report.reasons:
        lines += ["", "Dropout is on. To check the model without it, run:",
                  "  " + shlex.join(["python", "-m", "gaccum_core", "check", *config_flags(config), "--no-dropout"])]
    return "\n".join(lines)


def module_lines(modules: pd.DataFrame, limit: int = MAX_ROWS) -> list[str]:
    """The modules as a table of name, parameter tensors, worst relative L2 error and verdict."""
    shown = modules if len(modules) <= limit else modules.loc[
        modules["worst_rel_l2"].fillna(float("inf")).nlargest(limit - 4).index.sort_values()]
    verdicts = ["equal" if row.equal else f"differs: {row.reason}" for row in shown.itertuples()]
    fixed = 2 + 6 + 2 + 13 + 2  # the columns between the name and the verdict
    room = WIDTH - fixed - max(map(len, verdicts), default=7)
    name_width = max(6, min(max(map(len, shown["module"]), default=6), max(room, 24)))
    lines = [f"{'module':<{name_width}}  {'params':>6}  {'worst rel. L2':>13}  verdict"]
    for row, verdict in zip(shown.itertuples(), verdicts):
        lines.append(f"{_left_cut(row.module, name_width):<{name_width}}  {row.parameters:>6}  "
                     f"{row.worst_rel_l2:>13.1e}  {_right_cut(verdict, WIDTH - fixed - name_width)}")
    if len(shown) < len(modules):
        hidden = modules.drop(shown.index)
        differing = int((~hidden["equal"]).sum())
        lines.append(f"… and {len(hidden)} more modules, " + (f"{differing} of them differing" if differing
                                                               else "all equal"))
    return lines


def _left_cut(name: str, width: int) -> str:
    # The end of a module path (layers.11.attn.q_proj) tells which layer it is; its start repeats.
    return name if len(name) <= width else "…" + name[len(name) - width + 1:]


def _right_cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def config_flags(config: RunConfig) -> list[str]:
    """The command-line flags that give this config: one per field not at its default."""
    flags = []
    for f in dataclasses.fields(RunConfig):
        value = getattr(config, f.name)
        if value == getattr(DEFAULT_RUN, f.name):  # the flags' own defaults
            continue
        flag = "--" + f.name.replace("_", "-")
        flags += [flag] if isinstance(value, bool) else [flag, str(value)]
    return flags
