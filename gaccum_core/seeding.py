"""The process-wide RNG, used without disturbing anyone: one lock, and fork_rng around each use.

fork_rng saves and restores the global generators; two threads inside it at once would interleave
their seeding, so every module that seeds goes through this one lock.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import torch

_LOCK = threading.RLock()
T = TypeVar("T")


@contextmanager
def isolated_rng(include_cuda: bool = False) -> Iterator[None]:
    """Within this context the global RNG may be reseeded; it is restored on exit, one thread at a time."""
    devices = list(range(torch.cuda.device_count())) if include_cuda and torch.cuda.is_available() else []
    with _LOCK, torch.random.fork_rng(devices=devices):
        yield


def seeded(seed: int, build: Callable[[], T]) -> T:
    """build() run right after torch.manual_seed(seed), leaving the global RNG as it was."""
    with isolated_rng():
        torch.manual_seed(seed)
        return build()
