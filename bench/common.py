"""What the benchmarks share: the --device and --json flags (the device chosen once, one JSON line of the
headline figures at the end), clocks read after the device's queued work, the CPU-only quieting (one
pinned core, one torch thread) applied only on the CPU, the machine's load, and quartiles."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.config import ConfigError  # noqa: E402
from gaccum_core.train.device import device_name, resolve_device  # noqa: E402


def _device_setting(value: str) -> str:
    if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise argparse.ArgumentTypeError(f"{value!r} is none of cpu, cuda, cuda:N")
    return value


def add_device_flags(parser: argparse.ArgumentParser) -> None:
    """--device (cpu by default) and --json."""
    parser.add_argument("--device", default="cpu", type=_device_setting,
                        help="cpu, cuda or cuda:N (on CUDA the CPU-only parts are skipped)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the headline figures")


def chosen_device(setting: str) -> torch.device:
    """The torch.device of a --device setting; exit status 2 with one line where this machine has none."""
    prog = Path(sys.argv[0]).name
    if setting != "cpu" and not torch.cuda.is_available():
        print(f"{prog}: --device {setting}: this machine has no CUDA device (torch.cuda.is_available() is False); "
              "use --device cpu", file=sys.stderr)
        raise SystemExit(2)
    try:
        return resolve_device(setting)
    except ConfigError as exc:
        print(f"{prog}: --device {setting}: allowed are {exc.allowed}", file=sys.stderr)
        raise SystemExit(2) from None


def quiet_cpu(device: torch.device, threads: int) -> None:
    """On the CPU, `threads` torch threads pinned to as many cores (the last ones); nothing elsewhere."""
    if device.type != "cpu":
        return
    torch.set_num_threads(threads)
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > threads:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-threads:])


def say_skipped(device: torch.device, parts: str) -> None:
    """Off the CPU, one line naming the CPU-only parts of the bench that were skipped."""
    if device.type != "cpu":
        print(f"CPU-only parts skipped on {device}: {parts}", flush=True)


def clock(device: torch.device) -> float:
    """time.perf_counter() once the work queued on the device is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (the box is shared: they say how busy it was)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} CPUs"


def plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               grad_clip: float) -> None:
    """A plain loop's optimizer step after its window's backwards, as the tutorials write it: unscale and clip
    (when asked), step, update the scale, zero the gradients."""
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def quartile_values(values: list[float]) -> list[float] | None:
    """[Q1, Q3], or None for fewer than 2 values."""
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4)
    return [q1, q3]


def quartiles(values: list[float], spec: str = ".3f") -> str:
    """'Q1-Q3', or 'n/a' for fewer than 2 values."""
    q = quartile_values(values)
    return "n/a" if q is None else f"{q[0]:{spec}}-{q[1]:{spec}}"


def headline(bench: str, device: torch.device, **figures: object) -> dict:
    """The JSON line's common head (bench, device, device_name) and the figures."""
    return {"bench": bench, "device": str(device), "device_name": device_name(device), **figures}


def print_json(figures: dict) -> None:
    """The machine-readable last line of a bench's output."""
    print(json.dumps(figures), flush=True)
