"""Training memory per rank for N ranks under each sharding mode, counted from one process's measurement at the
same micro-batch b (what the probe counts: weights, gradients, optimizer state, activations).

- ddp: everything whole on each rank: the single-process figures.
- fsdp/every: weights, gradients and optimizer state 1/N per rank (FSDP2 splits each parameter along its
  first dimension, so a rank holds ceil(rows / N) of its rows: rank 0 the most, as the runs' columns report the
  largest rank's); plus, while a unit computes, its weights gathered whole in the param dtype (bf16/fp16 under
  AMP, else the parameters' own): the root's own parameters (the root stays gathered from its forward through
  its backward) and the two largest blocks (the one computing and the one FSDP prefetches in backward).
- fsdp/last: as every, but with k > 1 each rank keeps the whole fp32 gradient between micro-batches (its
  reduce-scatter waits for the window's last micro-batch); with k = 1 it is every.

Assumptions, said where they are taken: buffers stay whole on each rank (FSDP2 does not shard them); the
optimizer state splits as its parameters' bytes do (its per-parameter step counters, a few bytes, stay whole);
activations are one rank's micro-batch of b, as in one process (with AMP a sharded rank gathers its weights in
the low precision, so autocast's cast copies, counted as activations in one process, are a little less);
DDP's communication buckets are the gradients themselves (each .grad a view into them: train.distributed.Replicated),
so ddp's gradients are counted once, as a rank holds them. The gathered weights are transient: counted in the
peak, not in weights_mb.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

from torch import nn

from gaccum_core.plan.search import FITS, OVER_BUDGET, Candidate, Options
from gaccum_core.train.fsdp import blocks
from gaccum_core.train.precision import DTYPES

MB = 1024 * 1024
DDP, EVERY, LAST = "ddp", "fsdp/every", "fsdp/last"
SHARDING_MODES = (DDP, EVERY, LAST)
COLLECTIVES_ORDER = (DDP, LAST, EVERY)  # fewest collectives first: the tie-break between modes fitting one b
PREFETCHED = 2  # blocks gathered at once in backward: the one computing and the next, prefetched


@dataclass(frozen=True)
class ParamShape:
    """One parameter as FSDP2 shards it: its elements, its first dimension's rows, bytes per element, its unit."""

    numel: int
    rows: int
    element_size: int
    unit: int  # index of its block in blocks(model); -1: the root's own

    def shard_bytes(self, world_size: int) -> int:
        """Bytes rank 0 holds: ceil(rows / N) of the rows, the most any rank holds."""
        per_row = self.numel // self.rows if self.rows else 0
        return math.ceil(self.rows / world_size) * per_row * self.element_size


@dataclass(frozen=True)
class Layout:
    """What a model's per-rank memory depends on: its parameters by unit and its buffers' bytes."""

    params: tuple[ParamShape, ...]
    buffer_bytes: int

    @property
    def param_bytes(self) -> int:
        """Every parameter, whole."""
        return sum(p.numel * p.element_size for p in self.params)

    def shard_bytes(self, world_size: int) -> int:
        """The parameters' bytes on rank 0 of N."""
        return sum(p.shard_bytes(world_size) for p in self.params)

    def gathered_bytes(self, element_size: int | None) -> int:
        """The weights gathered whole at once: the root's own and the PREFETCHED largest blocks, in the
        param dtype (element_size bytes each; None: the parameters' own)."""
        units: dict[int, int] = {}
        for p in self.params:
            units[p.unit] = units.get(p.unit, 0) + p.numel * (element_size or p.element_size)
        root = units.pop(-1, 0)
        return root + sum(sorted(units.values(), reverse=True)[:PREFETCHED])


def layout(model: nn.Module) -> Layout:
    """The model's parameters by the unit the engine shards them in (gaccum_core.train.fsdp.blocks)."""
    unit_of = {id(p): i for i, block in enumerate(blocks(model)) for p in block.parameters()}
    params = tuple(ParamShape(p.numel(), p.shape[0] if p.dim() else 1, p.element_size(), unit_of.get(id(p), -1))
                   for p in model.parameters())
    return Layout(params, sum(b.numel() * b.element_size() for b in model.buffers()))


def gather_element_size(amp: str) -> int | None:
    """Bytes per element FSDP gathers weights in: 2 under bf16/fp16 AMP, None (the parameters' own) without."""
    return DTYPES[amp].itemsize if amp in DTYPES else None


def per_rank(parts: Mapping[str, float], shape: Layout, mode: str, world_size: int, accum_steps: int,
             amp: str = "off") -> dict[str, float]:
    """One rank's training memory in MB under `mode`, from one process's parts at the same b (weights_mb,
    gradients_mb, optimizer_mb, activations_mb): those four per rank, gathered_mb (transient) and their
    sum, counted_mb."""
    if mode not in SHARDING_MODES:
        raise ValueError(f"sharding mode {mode!r}: one of {', '.join(SHARDING_MODES)}")
    weights, gradients, optimizer = parts["weights_mb"], parts["gradients_mb"], parts["optimizer_mb"]
    gathered = 0.0
    if mode != DDP:
        share = shape.shard_bytes(world_size) / shape.param_bytes if shape.param_bytes else 1.0
        weights += (shape.shard_bytes(world_size) - shape.param_bytes) / MB  # buffers stay whole
        if not (mode == LAST and accum_steps > 1):
            gradients *= share
        optimizer *= share
        gathered = shape.gathered_bytes(gather_element_size(amp)) / MB
    figures = {"weights_mb": weights, "gradients_mb": gradients, "optimizer_mb": optimizer,
               "activations_mb": parts["activations_mb"], "gathered_mb": gathered}
    return {**figures, "counted_mb": sum(figures.values())}


def run_fields(mode: str) -> dict[str, str]:
    """The RunConfig fields a mode sets: sharding, and fsdp_sync for the sharded ones."""
    return {"sharding": "ddp"} if mode == DDP else {"sharding": "fsdp", "fsdp_sync": mode.split("/")[1]}


def sharded_candidate(one: Candidate, options: Options, shape: Layout, world_size: int, budget_mb: float) -> Candidate:
    """A sharded mode's candidate from one process's at the same b: its per-rank count as the peak (the
    allocator's peak, on a GPU, is one process's: it stands for ddp only). A probe that ran out of memory or
    failed has no parts to count from: its status and message carry over."""
    if one.status not in (FITS, OVER_BUDGET) or "weights_mb" not in one.detail:
        return dataclasses.replace(one, options=options)
    counted = per_rank(one.detail, shape, options.sharding, world_size, one.accum_steps, options.amp)
    peak = counted["counted_mb"]
    return Candidate(options, one.micro_batch_size, one.accum_steps, FITS if peak <= budget_mb else OVER_BUDGET,
                     peak, detail=counted)
