"""What every command shares: the parser whose errors are one line, typed flag values, a flag per
RunConfig field, the config (or the one error line) those flags make, and the refusal of flags it ignores."""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable, Iterable

from gaccum_core.config import CHOICES, DEFAULT_RUN, ConfigError, RunConfig
from gaccum_core.runsdir import RUNS_DIR_HELP, runs_dir

# The fields only FSDP reads: set away from their defaults with DDP, they would change nothing.
FSDP_ONLY = ("fsdp_sync", "fsdp_reshard_after_backward")

# argparse takes only -N and -N.N for negative numbers; anything else after a flag (--lr -inf,
# --lr -1e-3) would be read as an unknown flag, hiding the bad value behind "expected one argument".
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)
# What add_subparsers returns: each command module's add_parser(commands) adds its command to it.
Commands = argparse._SubParsersAction


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"gaccum: error: {message}\n")


def typed(kind: str, flag: str) -> Callable[[str], Any]:
    """An argparse type for an int or float ("int" or "float") flag whose refusal names the flag and value."""
    def convert(text: str) -> Any:
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            noun = "an integer" if kind == "int" else "a number"
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not allowed: {noun}") from None
    convert.__name__ = kind
    return convert


def _micro_batch_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else typed("int", "--micro-batch-size")(text)


def add_config_flags(parser: argparse.ArgumentParser, leave_out: frozenset[str] = frozenset()) -> None:
    """A flag per RunConfig field (--micro-batch-size for micro_batch_size), with its help and default."""
    for f in dataclasses.fields(RunConfig):
        if f.name in leave_out:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(DEFAULT_RUN, f.name)  # the Train page's defaults too
        help_text = f"{f.metadata['help']} (default: {default})"
        if f.name == "micro_batch_size":
            parser.add_argument(flag, type=_micro_batch_or_auto, default=default, dest=f.name, metavar="INT|auto",
                                help=help_text[:-1] + "; auto: the planner's choice for --effective-batch)")
        elif f.type == "bool":
            parser.add_argument(flag, action="store_true", dest=f.name, help=help_text)
        elif f.type in ("int", "float"):
            parser.add_argument(flag, type=typed(f.type, flag), default=default, dest=f.name,
                                metavar=f.type.upper(), help=help_text)
        else:
            # A fixed set (amp: off, fp16, bf16) as argparse choices; model, dataset and the other strings any
            # value (timm:NAME, hf:DIR, MODULE:FUNCTION), checked by the config.
            allowed = CHOICES.get(f.name)
            parser.add_argument(flag, default=default, dest=f.name, choices=allowed,
                                metavar=f.name.upper() if allowed is None else None, help=help_text)


def add_runs_dir_flag(parser: argparse.ArgumentParser) -> None:
    """--runs-dir, parsed as gaccum_core.runsdir's rule: the flag, else GACCUM_RUNS_DIR, else ./runs (the dashboard's)."""
    # argparse passes a string default through `type` too: left out, the flag is runs_dir("") as parsed.
    parser.add_argument("--runs-dir", type=runs_dir, default="", help=RUNS_DIR_HELP)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    """The RunConfig of the parsed flags, with `overrides` in place of some; ConfigError if refused."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    return RunConfig(**{**values, **overrides})


def flag_error(exc: ConfigError) -> str:
    """A refused value as the one error line, named by its flag: "gaccum: error: --lr=0.0 is not allowed: ..."."""
    flag = "--" + exc.field.replace("_", "-")
    return f"gaccum: error: {flag}={exc.value!r} is not allowed: {exc.allowed}"


def refuse_unused_fsdp_flags(configs: Iterable[RunConfig]) -> None:
    """ConfigError naming --fsdp-sync (or --fsdp-reshard-after-backward) set when none of the configs (a run,
    or a sweep's cells) shards with FSDP: the flag would be silently ignored."""
    configs = list(configs)
    if any(run.sharding == "fsdp" for run in configs):
        return
    for name in FSDP_ONLY:
        default = getattr(DEFAULT_RUN, name)
        for run in configs:
            if getattr(run, name) != default:
                raise ConfigError(name, getattr(run, name), f"{default} (the default) without --sharding fsdp: "
                                                            "only FSDP reads it")
