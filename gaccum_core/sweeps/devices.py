"""Where a sweep's runs train: on a machine with several GPUs, one run per GPU at a time. Pure: the GPU
count is given (lanes_words asks train.device for it when it is not)."""

from __future__ import annotations

from dataclasses import dataclass

from gaccum_core.config import RunConfig
from gaccum_core.train.device import gpu_count

_ANY_GPU = ("auto", "cuda")  # devices a sweep may place: a run set to cuda:N or cpu stays where it is set


@dataclass(frozen=True)
class Lane:
    """Runs that train one after another (by index into the sweep's runs), each on `device` when set."""

    device: str | None
    runs: tuple[int, ...]


def lanes(configs: list[RunConfig], gpu_count: int) -> list[list[Lane]]:
    """Phases of lanes: the lanes of a phase train side by side, a phase starts when the one before ended.

    With two GPUs or more, the one-process runs set to auto or cuda are dealt round-robin to cuda:0,
    cuda:1, … (a lane each); the data-parallel runs, which hold cuda:0 to cuda:N-1 (execution.device_queue.devices_of),
    follow in a phase of their own. Otherwise every run goes in one lane, in order. The device queue keeps each GPU
    to one run whatever the lanes say: the lanes only let a sweep's runs train side by side."""
    if gpu_count < 2:
        return [[Lane(None, tuple(range(len(configs))))]] if configs else []
    spread = [i for i, c in enumerate(configs) if c.world_size == 1 and c.device in _ANY_GPU]
    rest = tuple(i for i in range(len(configs)) if i not in set(spread))
    per_gpu = [Lane(f"cuda:{g}", tuple(spread[g::gpu_count])) for g in range(gpu_count)]
    phases = [[lane for lane in per_gpu if lane.runs]]
    if rest:
        phases.append([Lane(None, rest)])
    return [phase for phase in phases if phase]



def lanes_words(gpus: int | None = None) -> str:
    """How a sweep's runs train on a machine with `gpus` CUDA devices (this one's when None): 'one run per GPU
    at a time on the 2 GPUs', 'one run at a time on the GPU' or 'one run at a time on the CPU'."""
    gpus = gpu_count() if gpus is None else gpus
    if gpus > 1:
        return f"one run per GPU at a time on the {gpus} GPUs"
    return "one run at a time on " + ("the GPU" if gpus else "the CPU")
