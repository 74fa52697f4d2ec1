"""Per-token loss weights for every loss aggregation mode (values.LOSS_AGGS), exact under accumulation.

Every mode is a mean over units of each unit's token-loss sum divided by the unit's denominator:

    token-mean               one unit (the batch)  its loss tokens
    seq-mean-token-mean      each sequence         its loss tokens
    seq-mean-token-sum       each sequence         1
    seq-mean-token-sum-norm  each sequence         the constant C (Dr. GRPO's mean over sequences, not verl's code)
    group-mean-token-mean    each prompt group     its loss tokens (all its sequences')

so a loss token of unit u weighs 1 / (units · denominator_u), and a unit without loss tokens counts in no mean.
reduction mean counts units and tokens over the whole window: Σ_micro Σ_t w_t · l_t is the window's loss
aggregated by the mode, as one big batch would compute it (exact). mean_per_micro_batch counts them within each
micro-batch and divides by k (the textbook; k = accum_steps even in a partial last window). sum weighs every loss
token 1 (token-mean only). As in micro_batch_divisors, every weight is multiplied by world_size: DDP averages the
ranks' gradients, so each rank's Σ w · l over its share, averaged over ranks, is the window's loss. Token-mean's
weights are 1 / micro_batch_divisors(...) exactly: today's weighting is a special case.

Counts come from the window's data alone (no forward pass, no collective): every rank describes the whole window
(each sequence's loss-token count is enough: LossTokens.counted) and reads its own rows' weights from it, by
sequence id, since a sequence's tokens weigh the same within a micro-batch in every mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from gaccum_core.data.record_sequences import NO_LOSS  # LossTokens.seq where a target has no loss
from gaccum_core.data.sequences import IGNORE
from gaccum_core.values import LOSS_AGGS, REDUCTIONS



@dataclass(frozen=True)
class LossTokens:
    """One (global) micro-batch's loss tokens, row-aligned with its targets (N, T).

    seq: (N, T) long, at each target with a loss the id of the sequence (record) it belongs to, NO_LOSS elsewhere.
    Ids are unique within the window, across micro-batches and ranks; a packed row holds several ids.
    groups: each sequence id's prompt group (pg), None without groups (sft)."""

    seq: torch.Tensor
    groups: Mapping[int, int] | None = None

    @classmethod
    def rows(cls, targets: torch.Tensor, ids: torch.Tensor | list[int],
             groups: Mapping[int, int] | None = None) -> "LossTokens":
        """One sequence per row (padded): row n's targets other than IGNORE belong to sequence ids[n]."""
        column = torch.as_tensor(ids, dtype=torch.long, device=targets.device).view(-1, 1)
        return cls(torch.where(targets != IGNORE, column, NO_LOSS), groups)

    @classmethod
    def counted(cls, ids: torch.Tensor | list[int], counts: torch.Tensor | list[int],
                groups: Mapping[int, int] | None = None) -> "LossTokens":
        """A micro-batch described by its sequences' loss-token counts alone (one row, no targets built): enough to
        weigh a window, whose weights each rank then reads for its own rows (token_weights' shares)."""
        return cls(torch.repeat_interleave(torch.as_tensor(ids, dtype=torch.long),
                                           torch.as_tensor(counts, dtype=torch.long)).view(1, -1), groups)


def token_weights(mode: str, reduction: str, window: list[LossTokens], accum_steps: int | None = None,
                  world_size: int = 1, norm_c: float = 0.0, dtype: torch.dtype = torch.float32,
                  shares: list[LossTokens] | None = None) -> list[torch.Tensor]:
    """Per micro-batch, a weight per target (0 where no loss) for its Σ w · l, counted over the whole window.

    `window` describes every global micro-batch (full rows, or LossTokens.counted); the weights take the shape of
    `shares` (this rank's own rows of each micro-batch) when given, else of `window`."""
    _check(mode, reduction, norm_c)
    if reduction == "sum":
        weights = [(tokens.seq != NO_LOSS).to(torch.float64) * world_size for tokens in window]
    elif reduction == "mean":
        weights = _aggregated(mode, window, norm_c, 1, world_size)
    else:
        k = accum_steps or len(window)
        weights = [_aggregated(mode, [tokens], norm_c, k, world_size)[0] for tokens in window]
    if shares is not None:
        weights = [share_weights(tokens, w, share) for tokens, w, share in zip(window, weights, shares, strict=True)]
    return [w.to(dtype) for w in weights]


def share_weights(described: LossTokens, weights: torch.Tensor, share: LossTokens) -> torch.Tensor:
    """A rank's share's weights, read by sequence id from its micro-batch's `weights` (as token_weights gave them
    for `described`): a window weighed once, then each micro-batch's share as its batch is built."""
    ids, where = torch.unique(described.seq, return_inverse=True)  # sorted; a sequence's tokens weigh the same
    per_id = torch.zeros(len(ids), dtype=weights.dtype, device=weights.device).scatter_(0, where.flatten(),
                                                                                       weights.flatten())
    ids, per_id = ids.to(share.seq.device), per_id.to(share.seq.device)  # counts on the host, a share on the device
    wanted = share.seq[share.seq != NO_LOSS]
    missing = wanted[~torch.isin(wanted, ids)]
    if len(missing):
        raise ValueError(f"loss tokens: sequence {int(missing[0])} of a rank's share is not in its micro-batch's "
                         "description")
    out = torch.zeros(share.seq.shape, dtype=weights.dtype, device=share.seq.device)
    out[share.seq != NO_LOSS] = per_id[torch.searchsorted(ids, wanted)]
    return out


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


def _aggregated(mode: str, micro_batches: list[LossTokens], norm_c: float, k: int,
                world_size: int) -> list[torch.Tensor]:
    """Weights aggregating the micro-batches' loss tokens as one batch by the mode, divided by k / world_size."""
    masks = [tokens.seq != NO_LOSS for tokens in micro_batches]
    seqs = torch.cat([tokens.seq[mask] for tokens, mask in zip(micro_batches, masks)])
    _, unit, tokens_per_unit = torch.unique(_units(mode, seqs, micro_batches), return_inverse=True,
                                            return_counts=True)
    denominator = tokens_per_unit.to(torch.float64)
    if mode == "seq-mean-token-sum":
        denominator = torch.ones_like(denominator)
    elif mode == "seq-mean-token-sum-norm":
        denominator = torch.full_like(denominator, float(norm_c))
    # In micro_batch_divisors' order of operations (count · k / world_size), so token-mean's weights are its 1 / divisor.
    weight = 1 / (len(tokens_per_unit) * denominator[unit] * k / world_size)
    out, offset = [], 0
    for tokens, mask in zip(micro_batches, masks):
        w = torch.zeros(tokens.seq.shape, dtype=torch.float64, device=tokens.seq.device)
        count = int(mask.sum())
        w[mask] = weight[offset:offset + count]
        out.append(w)
        offset += count
    return out


def _units(mode: str, seqs: torch.Tensor, micro_batches: list[LossTokens]) -> torch.Tensor:
    """The unit each loss token (sequence ids `seqs`) is averaged in: the batch, its sequence, or its group."""
    if mode == "token-mean":
        return torch.zeros_like(seqs)
    if mode != "group-mean-token-mean":
        return seqs
    groups = {seq: group for tokens in micro_batches for seq, group in (tokens.groups or {}).items()}
    ids, index = torch.unique(seqs, return_inverse=True)
    missing = [seq for seq in ids.tolist() if seq not in groups]
    if missing:
        raise ValueError(f"loss_agg: group-mean-token-mean needs every sequence's group (pg data); "
                         f"sequence {missing[0]} has none")
    return torch.tensor([groups[seq] for seq in ids.tolist()], dtype=torch.long, device=seqs.device)[index]
