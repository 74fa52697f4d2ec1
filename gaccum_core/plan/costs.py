"""What costly options cost on this machine, measured in a fraction of a second before Start.

Clearing the cache calls gc.collect() (and empty_cache() on CUDA) once per micro-batch or per step:
in a process holding torch that is ~0.1-0.2 s each time, far more than a small model's step. Its figure is
the one a run timed on the same device (the latest of this server's runs that cleared its cache), since an
idle server has nothing cached to free; until such a run, gc.collect timed here, and on a GPU without
touching it (the server holds no CUDA context: the GPU belongs to the runs).
Autocast to fp16 or bf16 on a CPU without native half-precision kernels can run ~100x slower than
fp32. A user should see the figure before choosing the option, not after a run crawls.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from gaccum_core.config import RunConfig
from gaccum_core.models.vision import build_model
from gaccum_core.seeding import seeded
from gaccum_core.train.memory import clear_cache
from gaccum_core.train.precision import DTYPES

_REPEATS = 3


_RUN_STEPS = 50  # a run's clearing figure is the median over its last steps


@dataclass(frozen=True)
class Cost:
    """One option's measured cost on one device."""

    seconds: float  # per call (cache clearing) or per probe step (autocast)
    ratio: float    # against the option off: 1.0 for cache clearing, slowdown for autocast
    source: str = "on this machine (measured just now)"  # where the figure comes from, in the warning's words


class ClearingRun(Protocol):
    """A run whose step rows may hold its cache-clearing time (a RunSnapshot is one)."""

    run_id: str
    config: RunConfig
    devices: tuple[str, ...]  # the devices it ran on ("cpu", "cuda:0", …)
    metrics: Sequence[Mapping[str, Any]]  # its step rows


def cache_clearing_cost(device_name: str, runs: Sequence[ClearingRun] = ()) -> Cost:
    """Seconds of one clear_cache() on this device: as the latest of runs that cleared its cache there timed it
    (the median of its last steps), else gc.collect timed in this process."""
    for run in reversed(runs):
        per_call = _run_clearing_seconds(run) if device_name in run.devices else []
        if per_call:
            return Cost(statistics.median(per_call), 1.0, f"as run {run.run_id} measured it on this device "
                                                          f"(the median of its last {len(per_call)} steps)")
    return _measured_here(torch.device(device_name).type)


def _run_clearing_seconds(run: ClearingRun) -> list[float]:
    """Seconds of one clearing in each of the run's last steps that timed it (none when it did not clear)."""
    mode = run.config.clear_cache
    if mode == "off":
        return []
    return [row["cache_clear_s"] / (row["micro_batches"] if mode == "micro" else 1)
            for row in run.metrics[-_RUN_STEPS:] if (row.get("cache_clear_s") or 0) > 0]  # not NaN, not None


@cache
def _measured_here(device_type: str) -> Cost:
    """Median seconds of gc.collect here; on a GPU that is all a server can time without a CUDA context."""
    seconds = statistics.median(clear_cache(torch.device("cpu")) for _ in range(_REPEATS))
    if device_type == "cpu":
        return Cost(seconds, 1.0)
    return Cost(seconds, 1.0, "for gc.collect alone (measured just now in this server; emptying the GPU's cache "
                              "adds the time to free what a run holds, which the first run that clears it measures)")


@cache
def autocast_cost(device_name: str, amp: str) -> Cost:
    """Seconds of one forward+backward of gaccum's cnn on 32 images of 32×32 under autocast(amp),
    and the ratio to fp32: a small conv net, quick to probe, whose kernels are the ones that slow down."""
    device = torch.device(device_name)
    dtype = DTYPES[amp]
    model = seeded(0, lambda: build_model("cnn", (3, 32, 32), 10)).to(device)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, 32, 32, generator=generator).to(device)
    y = torch.randint(0, 10, (32,), generator=generator).to(device)
    plain = _step_seconds(model, x, y, device, None)
    mixed = _step_seconds(model, x, y, device, dtype)
    return Cost(mixed, mixed / plain if plain > 0 else float("inf"))


def _step_seconds(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device,
                  dtype: torch.dtype | None) -> float:
    """Median seconds of one forward+backward, after one warm-up."""
    times = []
    for _ in range(_REPEATS + 1):
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def warnings_for(clear_cache_mode: str, amp: str, accum_steps: int, device_name: str,
                 runs: Sequence[ClearingRun] = ()) -> dict[str, str]:
    """{config field: plain-words warning with this machine's figure} for the costly options chosen; runs: those
    whose own cache-clearing time is the figure (the latest on this device that cleared its cache)."""
    notes = {}
    if clear_cache_mode != "off":
        cost = cache_clearing_cost(device_name, runs)
        per_step = cost.seconds * (accum_steps if clear_cache_mode == "micro" else 1)
        where = f"after each of the {accum_steps} micro-batches" if clear_cache_mode == "micro" else "once per step"
        notes["clear_cache"] = (f"Cache clearing takes {cost.seconds * 1000:.0f} ms each time {cost.source}, "
                                f"{where}: about {per_step:.2f} s added to every optimizer step.")
    if amp != "off" and torch.device(device_name).type == "cpu":
        cost = autocast_cost(device_name, amp)
        if cost.ratio >= 2:
            notes["amp"] = (f"{amp} autocast on this CPU runs a small conv net {cost.ratio:.1f}× slower than fp32 "
                            "(measured just now): expect the run to take about that much longer. It pays off on GPUs.")
    return notes
