"""`doctor`: what a user needs to know before a first run on this machine."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys

import torch

from gaccum_core.train.device import autocast_works, device_name, memory_info, resolve_device

GIB = 1024**3
COMPILE_TIMEOUT_S = 300
_COMPILE_PROBE = (
    "import torch\n"
    "f = torch.compile(lambda x: torch.nn.functional.relu(x @ x) + 1)\n"
    "x = torch.ones(8, 8, device={device!r})\n"
    "assert torch.allclose(f(x), torch.relu(x @ x) + 1)\n"
)


def compile_works(device: torch.device, timeout_s: float = COMPILE_TIMEOUT_S) -> tuple[bool, str]:
    """Compile and run a tiny function in a child process, so a broken toolchain cannot hang us."""
    try:
        done = subprocess.run([sys.executable, "-c", _COMPILE_PROBE.format(device=str(device))],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"no result after {timeout_s:.0f} s"
    if done.returncode == 0:
        return True, "works"
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1][:300] if lines else f"exit status {done.returncode}"


@functools.lru_cache(maxsize=8)
def compile_works_here(device: str) -> tuple[bool, str]:
    """compile_works, probed once per process and device: a broken toolchain is found before a run
    starts (a model-specific compile failure still surfaces on the run's first step)."""
    return compile_works(torch.device(device))


def doctor_report(device_setting: str = "auto", check_compile: bool = True) -> str:
    """A plain-text report: versions, device and memory, and which precisions and compile work."""
    device = resolve_device(device_setting)
    free, total = memory_info(device)
    lines = [
        f"python        {platform.python_version()} ({sys.executable})",
        f"torch         {torch.__version__}",
        f"CUDA (torch)  {torch.version.cuda or 'not built with CUDA'}",
        f"CUDA devices  {torch.cuda.device_count() if torch.cuda.is_available() else 0}",
        f"device        {device_name(device)}" + ("" if device.type == "cuda" else f", {os.cpu_count()} cores"),
        f"memory        {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB",
    ]
    for label, dtype in (("fp16 autocast", torch.float16), ("bf16 autocast", torch.bfloat16)):
        works, why = autocast_works(device, dtype)
        lines.append(f"{label}  {'yes' if works else 'no: ' + why}")
    if check_compile:
        works, why = compile_works(device)
        lines.append(f"torch.compile {'yes' if works else 'no: ' + why}")
    return "\n".join(lines)
