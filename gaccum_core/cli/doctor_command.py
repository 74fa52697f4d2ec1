"""`doctor`'s flags and exit status; the report itself is cli/doctor.py's doctor_report."""

from __future__ import annotations

import argparse
import sys

from gaccum_core.cli.args import Commands, flag_error
from gaccum_core.cli.doctor import doctor_report
from gaccum_core.config import ConfigError


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `doctor` command: which device to check."""
    parser = commands.add_parser("doctor", help="what this machine can do: torch, CUDA, memory, AMP, compile")
    parser.add_argument("--device", default="auto", help="device to check (default: auto)")
    parser.set_defaults(handler=doctor_command)
    return parser


def doctor_command(args: argparse.Namespace) -> int:
    """Print the report; 0, or 2 with one error line for a device this machine lacks."""
    try:
        print(doctor_report(args.device))
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    return 0
