"""Fault injection that tests arm: out-of-memory, a NaN loss, an error, a slow micro-batch at a chosen
step, or a cleanup that raises as a CUDA error would.

The engine asks `due(step, micro)` before each micro-batch; with nothing armed that is one empty-list
check. A child process (a server or worker under test) is armed through the environment:
GACCUM_FAULTS="oom@3,nan@5,slow@1:2*30,cleanup@0" (kind@step[:micro][*seconds]); with
GACCUM_FAULTS_RANK=R only global rank R of a data-parallel job arms them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

KINDS = ("oom", "nan", "slow", "error", "cleanup")  # cleanup: fires when the run releases its memory


@dataclass(frozen=True)
class Fault:
    """Fire `kind` at optimizer step `step` (1-based), micro-batch `micro` (0-based) of its window."""

    kind: str
    step: int
    micro: int = 0
    seconds: float = 0.5  # for "slow"


_lock = threading.Lock()
ARMED: list[Fault] = []


def arm(fault: Fault) -> None:
    """Arm a fault for the next run that reaches its step; it fires once."""
    if fault.kind not in KINDS:
        raise ValueError(f"fault kind {fault.kind!r} is not allowed: one of {', '.join(KINDS)}")
    with _lock:
        ARMED.append(fault)


def disarm() -> None:
    """Remove every armed fault."""
    with _lock:
        ARMED.clear()


def due(step: int, micro: int) -> Fault | None:
    """The armed fault for this step and micro-batch, removed as it fires, or None."""
    with _lock:
        for fault in ARMED:
            if fault.step == step and fault.micro == micro:
                ARMED.remove(fault)
                return fault
    return None


def inject(fault: Fault, loss: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Compute one micro-batch's loss with the fault applied: raise instead, sleep first, or make it NaN."""
    if fault.kind == "oom":
        raise torch.OutOfMemoryError("injected fault: out of memory (Tried to allocate 20.00 GiB)")
    if fault.kind == "error":
        raise RuntimeError(f"injected fault: an error at step {fault.step}")
    if fault.kind == "slow":
        time.sleep(fault.seconds)
    value = loss()
    return value * float("nan") if fault.kind == "nan" else value


def check_cleanup() -> None:
    """Raise as a poisoned CUDA context would when the run's memory is released, if a cleanup fault is armed."""
    with _lock:
        fault = next((f for f in ARMED if f.kind == "cleanup"), None)
        if fault is None:
            return
        ARMED.remove(fault)
    raise RuntimeError("injected fault: CUDA error: an illegal memory access was encountered")


def _arm_from_env(text: str, only_rank: str) -> None:
    if only_rank and only_rank != os.environ.get("RANK", "0"):
        return
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, where = item.partition("@")
        where, _, seconds = where.partition("*")
        step, _, micro = where.partition(":")
        arm(Fault(kind, int(step), int(micro or 0), float(seconds or 0.5)))


_arm_from_env(os.environ.get("GACCUM_FAULTS", ""), os.environ.get("GACCUM_FAULTS_RANK", ""))
