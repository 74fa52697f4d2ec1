"""The accumulation contract: which samples form each window and how each micro-batch is weighted.

Pure arithmetic, no torch state: a window of k micro-batches of size b holds exactly the b*k
samples that one batch of size b*k would hold, so accumulated and big-batch runs see the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch: a slice [start, stop) of the epoch's sample order."""

    start: int
    stop: int
    ends_window: bool

    @property
    def size(self) -> int:
        """Samples in this micro-batch."""
        return self.stop - self.start


@dataclass(frozen=True)
class Window:
    """The micro-batches that feed one optimizer step."""

    micro_batches: tuple[MicroBatch, ...]

    @property
    def samples(self) -> int:
        """Samples in the whole window."""
        return self.micro_batches[-1].stop - self.micro_batches[0].start


def micro_batch_divisors(reduction: str, counts: list[int], world_size: int = 1,
                         accum_steps: int | None = None) -> list[float]:
    """What each micro-batch's summed loss is divided by, given every micro-batch's count of samples (or
    target tokens) in the window: the window's count (mean, exact), 1 (sum), or its own count times k
    (mean_per_micro_batch: the textbook's mean loss / k with k = accum_steps even in a partial last
    window, as the tutorials write it; not exact when counts differ). Data-parallel ranks each divide
    by 1/world_size of it, since DDP averages their gradients."""
    k = accum_steps or len(counts)
    if reduction == "mean":
        divisors = [sum(counts)] * len(counts)
    elif reduction == "sum":
        divisors = [1] * len(counts)
    else:
        divisors = [count * k for count in counts]
    return [d / world_size for d in divisors]


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of one epoch: a permutation fixed by (seed, epoch), never by batch size."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % (2**63))
    return torch.randperm(num_samples, generator=generator)


def window_at(num_samples: int, micro_batch_size: int, accum_steps: int, index: int) -> Window:
    """Window `index` of an epoch cut into windows of accum_steps micro-batches; the last window may be partial
    (how each micro-batch is weighted is micro_batch_divisors', from their counts). Made when asked for: an
    epoch of a large corpus holds millions of windows."""
    window_size = micro_batch_size * accum_steps
    w_start = index * window_size
    if not 0 <= w_start < num_samples:
        raise IndexError(f"window {index} of an epoch of {windows_per_epoch(num_samples, micro_batch_size, accum_steps)}")
    w_stop = min(w_start + window_size, num_samples)
    return Window(tuple(MicroBatch(s, min(s + micro_batch_size, w_stop), s + micro_batch_size >= w_stop)
                        for s in range(w_start, w_stop, micro_batch_size)))


def plan_epoch(num_samples: int, micro_batch_size: int, accum_steps: int) -> list[Window]:
    """Every window of an epoch (window_at each), in order."""
    return [window_at(num_samples, micro_batch_size, accum_steps, index)
            for index in range(windows_per_epoch(num_samples, micro_batch_size, accum_steps))]


def windows_per_epoch(num_samples: int, micro_batch_size: int, accum_steps: int) -> int:
    """Optimizer steps in one epoch (ceil of samples over the effective batch)."""
    return -(-num_samples // (micro_batch_size * accum_steps))


def planned_steps(num_samples: int, micro_batch_size: int, accum_steps: int, epochs: int, max_steps: int) -> int:
    """Optimizer steps the whole run will take: epochs of windows, capped by max_steps (0 = no cap)."""
    total = epochs * windows_per_epoch(num_samples, micro_batch_size, accum_steps)
    return min(total, max_steps) if max_steps else total
