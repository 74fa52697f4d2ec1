"""`python -m gaccum_core`: the parser made of each command module's add_parser, and the entry point."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Mapping, Sequence

from gaccum_core import runsdir
from gaccum_core.cli import check, doctor, export, import_runs, plan, resume, run, sweep, verify, worker
from gaccum_core.cli.args import OneLineParser

# Each module adds its command (add_parser) and names the function that carries it out (the handler
# default); in the order the help lists them.
COMMANDS = (run, sweep, plan, check, verify, worker, resume, import_runs, export, doctor)


def program() -> str:
    """How the user called the command line, for its usage lines: `gaccum` (the installed script) or
    `python -m gaccum_core`."""
    return "gaccum" if os.path.basename(sys.argv[0]) == "gaccum" else "python -m gaccum_core"


def _parsers() -> tuple[OneLineParser, Mapping[str, argparse.ArgumentParser]]:
    """The `gaccum` parser, and each command's parser by name."""
    parser = OneLineParser(prog=program(), description="Exact gradient accumulation experiments.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser, commands.choices


def build_parser() -> OneLineParser:
    """The `gaccum` argument parser with its run, sweep, plan, check, verify, worker, resume, import, export
    and doctor commands."""
    return _parsers()[0]


def command_help(name: str) -> str:
    """What `python -m gaccum_core NAME --help` prints (run, sweep, plan, check, verify, worker, resume,
    import, export or doctor)."""
    return _parsers()[1][name].format_help()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m gaccum_core`: parse, then carry out the command; its exit status."""
    args = build_parser().parse_args(argv)
    with runsdir.exported(getattr(args, "runs_dir", None)):  # the token cache beside --runs-dir, in every process
        return args.handler(args)
