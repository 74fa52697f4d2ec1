"""`doctor`: what a user needs to know before a first run on this machine; its flags and exit status."""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch

from gaccum_core.cli.args import Commands, flag_error
from gaccum_core.config import ConfigError
from gaccum_core.train.device import (autocast_works, compile_works, device_name, gpu_count, memory_info,
                                      resolve_device)
from gaccum_core.train.precision import DTYPES

GIB = 1024**3


def doctor_report(device_setting: str = "auto", check_compile: bool = True) -> str:
    """A plain-text report: versions, device and memory, and which precisions and compile work."""
    device = resolve_device(device_setting)
    free, total = memory_info(device)
    lines = [
        f"python        {platform.python_version()} ({sys.executable})",
        f"torch         {torch.__version__}",
        f"CUDA (torch)  {torch.version.cuda or 'not built with CUDA'}",
        f"CUDA devices  {gpu_count()}",
        f"device        {device_name(device)}" + ("" if device.type == "cuda" else f", {os.cpu_count()} cores"),
        f"memory        {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB",
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
