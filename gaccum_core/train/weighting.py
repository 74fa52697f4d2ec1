"""How one window's micro-batches are weighted, decided before any backward of the window.

Images and token-mean text: a divisor per micro-batch from each one's count of samples or target tokens
(accumulation.micro_batch_divisors), the loss a summed cross-entropy. A records task aggregated another way
(config.loss_agg: seq-mean-token-mean, ...): per-token weights over the whole window (aggregation.token_weights),
the window described from each record's loss-token count alone, so every rank weighs it without a collective and
reads its own rows' weights by record id; each micro-batch's loss is then Σ w·l and its divisor 1 (the weights
carry the mean and the data-parallel average). Either way accumulate_step runs the one accumulation step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from gaccum_core.config import RunConfig
from gaccum_core.data import record_tokens
from gaccum_core.train.accumulation import MicroBatch, Window, micro_batch_divisors
from gaccum_core.train.aggregation import LossTokens, share_weights, token_weights
from gaccum_core.train.loss import token_losses
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import Divisor


@dataclass(frozen=True)
class Weighting:
    """One window's weighting: its count (samples, or loss tokens: tokens/s, tokens seen), each micro-batch's
    divisor, and for per-token weighting the window's description and weights (None for divisors)."""

    count: int
    divisor: Divisor
    loss_divisor: float  # what the step's loss summed over ranks divides by to be the logged loss (see below)
    described: list[LossTokens] | None = None
    weights: list[torch.Tensor] | None = None

    def loss(self, index: int, forward: Callable[[torch.Tensor], torch.Tensor], precision: Precision,
             x: torch.Tensor, y: torch.Tensor, seq: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """Micro-batch `index`'s loss for its backward: Σ w·l over this rank's rows (seq(width): their record ids)."""
        assert self.weights is not None and self.described is not None
        losses = token_losses(forward, precision, x, y)
        share = LossTokens(seq(y.shape[1]).to(losses.device))
        return (share_weights(self.described[index], self.weights[index], share) * losses).sum()


def uses_weights(config: RunConfig) -> bool:
    """Whether a run's windows take per-token weights: a records task aggregated other than by token-mean."""
    return config.dataset == "sft" and config.loss_agg != "token-mean"


def window_weighting(config: RunConfig, train: Any, window: Window, order: torch.Tensor, world_size: int,
                     norm_c: int) -> Weighting:
    """The window's weighting, from its data alone (every micro-batch of the window, not only this rank's share)."""
    if not uses_weights(config):
        counts = [_count(config, train, order, micro) for micro in window.micro_batches]
        divisors = micro_batch_divisors(config.reduction, counts, world_size, config.accum_steps)
        return Weighting(sum(counts), lambda numbered: divisors[numbered[0]], sum(counts))
    described = []
    for micro in window.micro_batches:
        ids, counts = record_tokens.describe(train, order[micro.start:micro.stop])
        described.append(LossTokens.counted(ids, counts))
    weights = token_weights(config.loss_agg, config.reduction, described, config.accum_steps, world_size,
                            float(norm_c))
    count = sum(int((tokens.seq != record_tokens.NO_LOSS).sum()) for tokens in described)
    # Each rank's Σ w·l is world_size times its part of the window's loss (DDP averages): their sum, over world_size.
    return Weighting(count, 1.0, float(world_size), described, weights)


def _count(config: RunConfig, train: Any, order: torch.Tensor, micro: MicroBatch) -> int:
    """What a mean divides by in this micro-batch: its samples, or its target tokens for text."""
    return train.target_tokens(order[micro.start:micro.stop]) if config.is_text else micro.size
