"""`doctor`: what a user needs to know before a first run on this machine; its flags and exit status."""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch

from gaccum_core import runsdir
from gaccum_core.cli.args import Commands, add_runs_dir_flag, flag_error
from gaccum_core.config import ConfigError
from gaccum_core.runs.index_place import describe as describe_index
from gaccum_core.train.device import (autocast_works, compile_works, device_name, gpu_count, memory_info,
                                      resolve_device)
from gaccum_core.train.precision import DTYPES

GIB = 1024**3


def doctor_report(device_setting: str = "auto", check_compile: bool = True, runs_dir: str | None = None) -> str:
    """A plain-text report: versions, device and memory, where the runs index is kept (of runs_dir, else the
    runs directory's rule), and which precisions and compile work."""
    device = resolve_device(device_setting)
    free, total = memory_info(device)
    lines = [
        f"python        {platform.python_version()} ({sys.executable})",
        f"torch         {torch.__version__}",
        f"CUDA (torch)  {torch.version.cuda or 'not built with CUDA'}",
        f"CUDA devices  {gpu_count()}",
        f"device        {device_name(device)}" + ("" if device.type == "cuda" else f", {os.cpu_count()} cores"),
        f"memory        {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB",
        f"runs index    {describe_index(runsdir.runs_dir(runs_dir))}",
    ]
    for amp, dtype in DTYPES.items():
        works, why = autocast_works(device, dtype)
        lines.append(f"{amp} autocast  {'yes' if works else 'no: ' + why}")
    if check_compile:
        works, why = compile_works(device)
        lines.append(f"torch.compile {'yes' if works else 'no: ' + why}")
    return "\n".join(lines)


def add_parser(commands: Commands) -> argparse.ArgumentParser:
    """The `doctor` command: which device to check."""
    parser = commands.add_parser("doctor", help="what this machine can do: torch, CUDA, memory, AMP, compile, "
                                                "and where it keeps the runs index")
    parser.add_argument("--device", default="auto", help="device to check (default: auto)")
    add_runs_dir_flag(parser)
    parser.set_defaults(handler=doctor_command)
    return parser


def doctor_command(args: argparse.Namespace) -> int:
    """Print the report; 0, or 2 with one error line for a device this machine lacks."""
    try:
        print(doctor_report(args.device, runs_dir=args.runs_dir))
    except ConfigError as exc:
        print(flag_error(exc), file=sys.stderr)
        return 2
    return 0
