"""How one window's micro-batches are weighted, decided before any backward of the window.

Images and token-mean text: a divisor per micro-batch from each one's count of samples or target tokens
(accumulation.micro_batch_divisors), the loss a summed cross-entropy. A records task aggregated another way
(config.loss_agg: seq-mean-token-mean, ...): one weight per record over the whole window (aggregation.record_weights),
the window described from each record's loss-token count alone, so every rank weighs it without a collective and
reads its own rows' weights by record id (RecordWeights.lookup); each micro-batch's loss is then Σ w·l and its divisor 1
(the weights carry the mean and the data-parallel average). Either way accumulate_step runs the one accumulation step.

pg (fixed rollouts) takes per-token weights in every mode, token-mean included: each loss token's loss is
-advantage · log p(token) = advantage × its cross-entropy, so a micro-batch's loss is Σ w · A · CE (A folded into
each record's weight); its epoch order keeps a group's sequences together (sample_order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from gaccum_core.config import RECORD_DATASETS, RunConfig
from gaccum_core.data.record_sequences import grouped_order
from gaccum_core.train.accumulation import MicroBatch, Window, epoch_order, micro_batch_divisors
from gaccum_core.train.aggregation import Records, RecordWeights, record_weights
from gaccum_core.train.loss import summed_cross_entropy, token_losses
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import Divisor


@dataclass(frozen=True)
class Weighting:
    """One window's weighting: its count (samples, or loss tokens: tokens/s, tokens seen), each micro-batch's
    divisor, and for per-token weighting each micro-batch's weights by record (None for divisors; pg's carry each
    record's advantage: its tokens' loss is the advantage times their cross-entropy)."""

    count: int
    divisor: Divisor
    loss_divisor: float  # what the step's loss summed over ranks divides by to be the logged loss (see below)
    weights: list[RecordWeights] | None = None

    def loss(self, index: int, forward: Callable[[torch.Tensor], torch.Tensor], precision: Precision,
             x: torch.Tensor, y: torch.Tensor, train: Any, indices: torch.Tensor) -> torch.Tensor:
        """Micro-batch `index`'s loss for its backward: Σ w·l over this rank's rows (train's records at indices), or
        with divisors its summed cross-entropy (the divisor applied by the step)."""
        if self.weights is None:
            return summed_cross_entropy(forward, precision, x, y)
        losses = token_losses(forward, precision, x, y)
        # Read on the host, where the window was described (no device sync per micro-batch), then copied over.
        weights = train.at_loss_tokens(indices, y.shape[1], self.weights[index].lookup)
        return (weights.to(losses.device, non_blocking=True) * losses).sum()


def aggregation_constant(config: RunConfig, train: Any) -> int:
    """seq-mean-token-sum-norm's C for a run: its loss_agg_norm, else (0) the longest completion of its training split
    after truncation, computed once when it starts (0 for a task without records, which takes no C)."""
    return config.loss_agg_norm or (train.longest_completion if config.dataset in RECORD_DATASETS else 0)


def uses_weights(config: RunConfig) -> bool:
    """Whether a run's windows take per-token weights: pg, or sft aggregated other than by token-mean."""
    return config.dataset == "pg" or (config.dataset == "sft" and config.loss_agg != "token-mean")


def sample_order(config: RunConfig, train: Any, epoch: int) -> torch.Tensor:
    """The epoch's sample order, fixed by (seed, epoch): epoch_order's; pg's keeps each group's sequences together,
    its groups in epoch_order's permutation of them (a group may still span micro-batches or ranks)."""
    if config.dataset != "pg":
        return epoch_order(len(train), config.seed, epoch)
    groups = train.sequence_groups
    return grouped_order(groups, epoch_order(len(np.unique(groups)), config.seed, epoch))


def window_weighting(config: RunConfig, train: Any, window: Window, order: torch.Tensor, world_size: int,
                     norm_c: int) -> Weighting:
    """The window's weighting, from its data alone (every micro-batch of the window, not only this rank's share)."""
    if not uses_weights(config):
        counts = [_count(config, train, order, micro) for micro in window.micro_batches]
        divisors = micro_batch_divisors(config.reduction, counts, world_size, config.accum_steps)
        return Weighting(sum(counts), lambda numbered: divisors[numbered[0]], sum(counts))
    grouped, pg = config.loss_agg == "group-mean-token-mean", config.dataset == "pg"
    described = []
    for micro in window.micro_batches:
        ids, counts = train.describe(order[micro.start:micro.stop])
        described.append(Records(ids, counts, np.asarray(train.groups)[ids] if grouped else None))
    weights = record_weights(config.loss_agg, config.reduction, described, config.accum_steps, world_size,
                             float(norm_c))
    # pg: -A · log p(token) = A × cross-entropy, A (stored float64, taken in the weights' float32) folded into its
    # record's weight.
    by_record = [RecordWeights.of(records, w, factors=np.asarray(train.advantages)[records.ids].astype(np.float32)
                                  if pg else None) for records, w in zip(described, weights)]
    count = int(sum(records.tokens.sum() for records in described))
    # Each rank's Σ w·l is world_size times its part of the window's loss (DDP averages): their sum, over world_size.
    return Weighting(count, 1.0, float(world_size), by_record)


def _count(config: RunConfig, train: Any, order: torch.Tensor, micro: MicroBatch) -> int:
    """What a mean divides by in this micro-batch: its samples, or its target tokens for text."""
    return train.target_tokens(order[micro.start:micro.stop]) if config.is_text else micro.size
