"""The device queue: a run (or a plan) holds every device it uses, and waits for all of them, first come first served.

Devices are named as torch numbers them in this process ("cpu", "cuda:0", "cuda:1", …). With CUDA_VISIBLE_DEVICES set,
torch numbers the visible GPUs 0..n-1 in the order that variable lists them; the worker processes and torchrun's
ranks inherit the server's environment, so "cuda:1" here is the GPU a worker's cuda:1 is. The rule: an item starts
when none of its devices is held, and no item that came before it still waits for one of them. An earlier waiter
reserves its devices, so a job waiting for cuda:0 and cuda:1 is never starved by one-GPU runs on cuda:1 submitted
after it, while a run on a device no earlier waiter wants (cuda:2) goes ahead. Pure: the owner locks around it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from gaccum_core.config import RunConfig

if TYPE_CHECKING:
    import torch


class Holder(Protocol):
    """What waits in the queue: anything that names the devices it uses."""

    devices: tuple[str, ...]


T = TypeVar("T", bound=Holder)


@dataclass(eq=False)
class Turn:
    """A hold on devices that is not a run (a page's plan, Runner.turn): `given` is set when the queue admits it."""

    devices: tuple[str, ...]
    given: threading.Event = field(default_factory=threading.Event)


def devices_of(config: RunConfig, device: torch.device) -> tuple[str, ...]:
    """The devices a run of config uses on this machine, its config.device resolved to `device`
    (train.device.resolve_device): ("cpu",) on the CPU, data-parallel jobs included; one GPU for a one-process run;
    cuda:0..nproc-1 for this machine's ranks of a data-parallel job on CUDA, whatever GPU config.device names
    (train.distributed.worker_device puts local rank r on cuda:r)."""
    if device.type != "cuda":
        return (device.type,)
    if config.world_size > 1:
        return tuple(f"cuda:{rank}" for rank in range(config.nproc))
    return (f"cuda:{0 if device.index is None else device.index}",)


class DeviceQueue(Generic[T]):
    """Which items hold devices and which wait, in arrival order (not thread-safe: its owner locks)."""

    def __init__(self) -> None:
        self._waiting: list[T] = []
        self._holding: list[T] = []

    def add(self, item: T) -> None:
        """Put an item at the back of the queue."""
        self._waiting.append(item)

    def remove(self, item: T) -> bool:
        """Take a waiting item out (it never starts); False when it does not wait."""
        if item not in self._waiting:
            return False
        self._waiting.remove(item)
        return True

    def release(self, item: T) -> None:
        """An item that held its devices has ended: they are free again."""
        if item in self._holding:
            self._holding.remove(item)

    def admit(self) -> list[T]:
        """The waiting items that may start now, in arrival order, each moved to the holders."""
        taken = {d for held in self._holding for d in held.devices}
        admitted = []
        for item in list(self._waiting):
            if taken.isdisjoint(item.devices):
                admitted.append(item)
                self._waiting.remove(item)
                self._holding.append(item)
            taken.update(item.devices)  # held now, or reserved by an earlier waiter
        return admitted

    def waits(self, item: T) -> bool:
        """Whether the item is still waiting."""
        return item in self._waiting

    def position(self, item: T) -> int:
        """1 + the waiting items ahead of it that want one of its devices; 0 when it does not wait."""
        if item not in self._waiting:
            return 0
        ahead = self._waiting[:self._waiting.index(item)]
        return 1 + sum(not set(other.devices).isdisjoint(item.devices) for other in ahead)

    def blocker(self, item: T) -> tuple[T, tuple[str, ...]] | None:
        """What a waiting item waits for first, with the devices they share: a holder, else the earliest waiter
        ahead of it; None when it does not wait or waits for nothing (it starts at the next admit)."""
        if item not in self._waiting:
            return None
        for other in [*self._holding, *self._waiting[:self._waiting.index(item)]]:
            shared = tuple(d for d in item.devices if d in other.devices)
            if shared:
                return other, shared
        return None
