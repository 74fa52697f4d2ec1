"""Loss weights for every loss aggregation mode (values.LOSS_AGGS), exact under accumulation, one per record.

Every mode is a mean over units of each unit's token-loss sum divided by the unit's denominator:

    token-mean               one unit (the batch)  its loss tokens
    seq-mean-token-mean      each sequence         its loss tokens
    seq-mean-token-sum       each sequence         1
    seq-mean-token-sum-norm  each sequence         the constant C (Dr. GRPO's mean over sequences, not verl's code)
    group-mean-token-mean    each prompt group     its loss tokens (all its sequences')

so a loss token of unit u weighs 1 / (units · denominator_u), and a unit without loss tokens counts in no mean.
Every loss token of a record weighs the same in every mode (its unit is the batch, the record or the record's
group): a window is weighed once per record, from each record's loss-token count (and group) alone, and each
micro-batch's per-token weights are one gather by the record each loss token belongs to (RecordWeights.lookup,
through the data set's at_loss_tokens).

reduction mean counts units and tokens over the whole window: Σ_micro Σ_t w_t · l_t is the window's loss aggregated
by the mode, as one big batch would compute it (exact). mean_per_micro_batch counts them within each micro-batch and
divides by k (the textbook; k = accum_steps even in a partial last window). sum weighs every loss token 1 (token-mean
only). As in micro_batch_divisors, every weight is multiplied by world_size: DDP averages the ranks' gradients, so
each rank's Σ w · l over its share, averaged over ranks, is the window's loss. Token-mean's weights are
1 / micro_batch_divisors(...) exactly: today's weighting is a special case.

Counts come from the window's data alone (no forward pass, no collective): every rank describes the whole window
(Records: each record's loss-token count) and reads its own rows' weights from it, by record id.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaccum_core.values import LOSS_AGGS, REDUCTIONS


@dataclass(frozen=True)
class Records:
    """One (global) micro-batch described by its records: ids (unique within the window, across micro-batches and
    ranks), each one's loss tokens, and each one's prompt group (pg; None without groups)."""

    ids: np.ndarray
    tokens: np.ndarray
    groups: np.ndarray | None = None


@dataclass(frozen=True)
class RecordWeights:
    """One micro-batch's weights by record: its record ids, sorted, and the weight of each one's loss tokens."""

    ids: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, records: Records, weights: np.ndarray, dtype: np.dtype | type = np.float32,
           factors: np.ndarray | None = None) -> "RecordWeights":
        """record_weights' weights for `records` (float64, in their order) in `dtype`, each times its factor when
        given (pg: the record's advantage, in dtype), sorted by id for lookup()."""
        order = np.argsort(records.ids, kind="stable")
        weights = weights[order].astype(dtype)
        return cls(records.ids[order], weights if factors is None else weights * factors[order].astype(dtype))

    def lookup(self, records: np.ndarray) -> np.ndarray:
        """The weight of each of these records' loss tokens; a record these weights do not hold is refused (a rank's
        rows must be among its micro-batch's)."""
        position = np.searchsorted(self.ids, records)
        found = position < len(self.ids)
        found[found] = self.ids[position[found]] == records[found]
        if not found.all():
            raise ValueError(f"loss tokens: record {int(records[~found][0])} of a rank's share is not in its "
                             "micro-batch's description")
        return self.weights[position]


def record_weights(mode: str, reduction: str, window: list[Records], accum_steps: int | None = None,
                   world_size: int = 1, norm_c: float = 0.0) -> list[np.ndarray]:
    """Per micro-batch of the window (each global micro-batch described), the weight of each record's loss tokens
    (float64, in the records' order; 0 for a record without loss tokens), counted over the whole window."""
    _check(mode, reduction, norm_c)
    if reduction == "sum":
        return [np.where(records.tokens > 0, float(world_size), 0.0) for records in window]
    if reduction == "mean":
        return _aggregated(mode, window, norm_c, 1, world_size)
    k = accum_steps or len(window)
    return [_aggregated(mode, [records], norm_c, k, world_size)[0] for records in window]


def _check(mode: str, reduction: str, norm_c: float) -> None:
    """A ValueError in one line for a mode, reduction or C this module cannot weigh."""
    if mode not in LOSS_AGGS:
        raise ValueError(f"loss_agg: {mode!r} is not one of {', '.join(LOSS_AGGS)}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    if reduction == "sum" and mode != "token-mean":
        raise ValueError(f"loss_agg: {mode} averages over sequences or groups; reduction sum takes token-mean only")
    if mode == "seq-mean-token-sum-norm" and not norm_c > 0:
        raise ValueError(f"loss_agg_norm: {norm_c!r} for seq-mean-token-sum-norm; C must be a number > 0")


def _aggregated(mode: str, micro_batches: list[Records], norm_c: float, k: int, world_size: int) -> list[np.ndarray]:
    """Weights aggregating the micro-batches' records as one batch by the mode, divided by k / world_size."""
    tokens = np.concatenate([records.tokens for records in micro_batches]).astype(np.float64)
    counted = tokens > 0  # a record without loss tokens counts in no mean
    if mode == "token-mean":
        units, denominator = 1, np.full_like(tokens, tokens.sum())
    elif mode == "group-mean-token-mean":
        missing = next((records for records in micro_batches if records.groups is None), None)
        if missing is not None:
            raise ValueError(f"loss_agg: group-mean-token-mean needs every sequence's group (pg data); "
                             f"sequence {int(missing.ids[0]) if len(missing.ids) else '?'} has none")
        groups = np.concatenate([records.groups for records in micro_batches])
        distinct, group = np.unique(groups, return_inverse=True)
        per_group = np.bincount(group, weights=tokens, minlength=len(distinct))  # its records' loss tokens
        units, denominator = int((per_group > 0).sum()), per_group[group]
    else:
        units = int(counted.sum())
        denominator = {"seq-mean-token-mean": tokens, "seq-mean-token-sum": np.ones_like(tokens),
                       "seq-mean-token-sum-norm": np.full_like(tokens, float(norm_c))}[mode]
    # In micro_batch_divisors' order of operations (count · k / world_size), so token-mean's weights are its 1 / divisor.
    weight = np.zeros_like(tokens)
    np.divide(1.0, units * denominator * k / world_size, out=weight, where=counted)
    return np.split(weight, np.cumsum([len(records.ids) for records in micro_batches])[:-1])
