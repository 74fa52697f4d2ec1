"""Fault injection that tests arm: out-of-memory, a NaN loss or a slow micro-batch at a chosen step.

The engine asks `due(step, micro)` before each micro-batch; with nothing armed that is one empty-list
check. A child process (a server under test) can be armed through GACCUM_FAULTS="oom@3,nan@5,slow@1".
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

KINDS = ("oom", "nan", "slow")


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
    if fault.kind == "slow":
        time.sleep(fault.seconds)
    value = loss()
    return value * float("nan") if fault.kind == "nan" else value


def _arm_from_env(text: str) -> None:
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, step = item.partition("@")
        arm(Fault(kind, int(step)))


_arm_from_env(os.environ.get("GACCUM_FAULTS", ""))
