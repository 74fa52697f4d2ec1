"""The process-wide RNG, used without disturbing anyone: one lock, and fork_rng around each use; and a run's own
random state (RunRng), put in place of the global generators only while the run draws from them.

fork_rng saves and restores the global generators; two threads inside it at once would interleave
their seeding, so every module that seeds goes through this one lock.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import numpy as np
import torch

_LOCK = threading.RLock()
T = TypeVar("T")
RngState = dict[str, torch.Tensor]  # "torch": the CPU generator's state, "cuda": the run's CUDA device's


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


def training_seed(seed: int, rank: int) -> int:
    """The seed of a run's training randomness on one rank: a stream of its own, apart from the initialisation's
    (seed itself) and from every other rank's (numpy's SeedSequence mixes the two numbers)."""
    return int(np.random.SeedSequence(seed, spawn_key=(rank,)).generate_state(1, np.uint64)[0])


class RunRng:
    """One run's torch generators on one rank (the CPU one, and its CUDA device's), seeded from the run's seed and
    rank. Dropout and its kin draw from the global generators, which a per-run torch.Generator cannot replace:
    active() puts this state there while the run draws, and takes it back after, under the lock, so nothing else
    in the process (another thread, another run) draws from it or moves it. A checkpoint records and restores the
    global generators within active() (gaccum_core.train.checkpoint_state).

    Python's random is not swapped (nothing in a run draws from it, and its getstate alone took 35 us per
    micro-batch, twice the torch swap): a checkpoint records and restores it as before. NumPy's is neither."""

    def __init__(self, seed: int, device: torch.device, rank: int = 0) -> None:
        """Seeded without touching the global generators."""
        self.device = device
        start = training_seed(seed, rank)
        self._state: RngState = {"torch": torch.Generator().manual_seed(start).get_state()}
        if device.type == "cuda":
            self._state["cuda"] = torch.Generator(device=device).manual_seed(start).get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within this context the global generators are the run's; on exit they are back as they were, and the
        run's state has moved on by what was drawn."""
        with _LOCK:
            outside = self._swap(self._state)
            try:
                yield
            finally:
                self._state = self._swap(outside)

    def _swap(self, state: RngState) -> RngState:
        """Put state in the global generators; what they held."""
        held: RngState = {"torch": torch.get_rng_state()}
        torch.set_rng_state(state["torch"])
        if "cuda" in state:
            held["cuda"] = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(state["cuda"], self.device)
        return held
