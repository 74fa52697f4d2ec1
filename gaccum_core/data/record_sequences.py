"""Records (prompt tokens, then completion tokens) as sequences whose loss counts completion tokens only (sft).

A target is a loss token iff the token it predicts is a completion token of the same record: the prompt's
targets are IGNORE, and so is the prediction of a record's first token (from nothing, or from the record before
it in a packed row). Record r's loss tokens are therefore max(0, L_r - max(p_r, 1)), L_r its kept tokens, p_r
its prompt length: padded or packed, every count is the record's own.

Padded (packing off): one record per sequence, truncated to max_seq_len + 1 tokens (a record left with no
completion token has all its targets IGNORE and counts in no mean, but still takes its place as a sample).
Packed (packing on): whole records packed in order into rows of at most max_seq_len + 1 tokens, never split
across rows (a record longer than a row is truncated to a row of its own); a sample is a row, padded at the
end in a batch. Only per-record and per-row arrays are kept (numpy, from the memory-mapped cache).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from gaccum_core.data.sequences import IGNORE, _indices, _rows_to_batch

NO_LOSS = -1  # loss_owners where a target is no loss token (a prompt's, a record's first token's, padding's)


class _Records:
    """Records d = ids[starts[d]:ends[d]] with prompts[d] prompt ids, each kept to max_seq_len + 1 tokens; pg's
    also with groups[d] (its group's index) and advantages[d]."""

    def __init__(self, ids: np.ndarray, spans: np.ndarray, prompts: np.ndarray, max_seq_len: int, pad: int,
                 groups: np.ndarray | None = None, advantages: np.ndarray | None = None) -> None:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        self.groups, self.advantages = groups, advantages  # None: sft's records (no group, no advantage)
        self.ids, self.pad, self.size = ids, pad, max_seq_len + 1
        self.starts = spans[:, 0]
        self.kept = np.minimum(spans[:, 1] - self.starts, self.size)  # L_r
        self.prompts = np.minimum(np.asarray(prompts, dtype=np.int64), self.kept)  # p_r, within what is kept
        self.losses = np.maximum(self.kept - np.maximum(self.prompts, 1), 0)  # loss tokens of each record

    def _tokens(self, records: range) -> np.ndarray:
        """The row's tokens: its records one after another."""
        tokens = [np.asarray(self.ids[self.starts[r]:self.starts[r] + self.kept[r]]) for r in records]
        return np.concatenate(tokens) if tokens else np.zeros(0, np.int64)

    def _owners(self, rows: list[range], width: int) -> torch.Tensor:
        """(N, width) long: at each target that is a loss token the index of its record, NO_LOSS elsewhere."""
        return self._at_loss_targets(rows, width, lambda records: records, NO_LOSS)

    def _at_loss_targets(self, rows: list[range], width: int, per_record: Callable[[np.ndarray], np.ndarray],
                         fill: float | int) -> torch.Tensor:
        """(N, width): at each loss target the value per_record gives its record (per_record(records) for the
        records of the rows, in order), fill elsewhere. The one rule: record r's targets from max(p_r, 1) - 1 to
        L_r - 1 at its offset in the row predict its completion (losses[r] of them). A few array operations over the
        rows' records, not a loop over them."""
        per_row = np.fromiter((len(records) for records in rows), np.int64, len(rows))
        records = np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in rows]) if rows else \
            np.zeros(0, np.int64)
        values = np.asarray(per_record(records))
        out = np.full((len(rows), width), fill, dtype=values.dtype)
        if len(records):
            kept, losses = self.kept[records], self.losses[records]
            starts = np.cumsum(kept) - kept  # each record's start counted over all the rows, then within its row
            row_starts = starts[np.cumsum(per_row) - per_row][per_row > 0]
            offsets = starts - np.repeat(row_starts, per_row[per_row > 0])
            first = offsets + np.maximum(self.prompts[records], 1) - 1  # each record's first loss target in its row
            within = np.arange(int(losses.sum())) - np.repeat(np.cumsum(losses) - losses, losses)
            out[np.repeat(np.repeat(np.arange(len(rows)), per_row), losses),
                np.repeat(first, losses) + within] = np.repeat(values, losses)
        return torch.from_numpy(out)

    def _batch(self, rows: list[range]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) padded with pad and targets (N, T): IGNORE but where a loss token is predicted."""
        inputs, targets = _rows_to_batch([self._tokens(records) for records in rows], self.pad)
        targets[self._owners(rows, targets.shape[1]) == NO_LOSS] = IGNORE
        return inputs, targets

    def _rows_at(self, indices: torch.Tensor | np.ndarray | list[int]) -> list[range]:
        raise NotImplementedError  # the records each sample at these indices holds

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) and targets (N, T), IGNORE on prompts, records' first tokens and padding; T = the longest
        sample's tokens - 1."""
        return self._batch(self._rows_at(indices))

    def spans(self, indices: torch.Tensor) -> list[np.ndarray]:
        """Each sample's records as (start, end, prompt length) in its row: one (records, 3) array per sample."""
        return [self._spans(records) for records in self._rows_at(indices)]

    def loss_owners(self, indices: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """(N, T) beside batch(indices)'s targets (T: theirs unless given): each loss token's record index,
        NO_LOSS elsewhere (which record each loss token belongs to: what the aggregation modes weigh by)."""
        rows = self._rows_at(indices)
        return self._owners(rows, self._width(rows) if width is None else width)

    def _width(self, rows: list[range]) -> int:
        """batch's T for these rows: the longest row's tokens - 1."""
        return max((int(self.kept[records.start:records.stop].sum()) for records in rows), default=2) - 1

    def describe(self, indices: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The records of the samples at these indices (in batch order) and each one's loss tokens: a micro-batch
        described from the per-record counts alone (no batch built)."""
        rows = self._rows_at(indices)
        ids = np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in rows]) if rows else \
            np.zeros(0, np.int64)
        return ids, self.losses[ids]

    def at_loss_tokens(self, indices: torch.Tensor, width: int, per_record: Callable[[np.ndarray], np.ndarray],
                       fill: float | int = 0) -> torch.Tensor:
        """(N, width) beside batch(indices)'s targets: at each loss token the value per_record gives its record
        (per_record(records): one value per record of the samples, in batch order), fill elsewhere. How a
        micro-batch's per-token weights are read from its records' (the aggregation modes weigh by record)."""
        return self._at_loss_targets(self._rows_at(indices), width, per_record, fill)

    def token_advantages(self, indices: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """(N, width) float32 beside batch(indices)'s targets: each loss token's record's advantage, 0 elsewhere
        (pg; 0 everywhere for sft's records)."""
        rows = self._rows_at(indices)
        width = self._width(rows) if width is None else width
        if self.advantages is None:
            return torch.zeros((len(rows), width), dtype=torch.float32)
        # Only the records read: never the whole (memory-mapped, float64) column.
        return self._at_loss_targets(rows, width, lambda records: np.asarray(self.advantages)[records].astype(
            np.float32), 0.0)

    @property
    def longest_completion(self) -> int:
        """The most loss tokens a record keeps after truncation (seq-mean-token-sum-norm's default C)."""
        return int(self.losses.max()) if len(self.losses) else 0

    def _spans(self, records: range) -> np.ndarray:
        """(start, end, prompt length) of each record in its row: int64 (records, 3)."""
        kept = self.kept[records.start:records.stop]
        ends = np.cumsum(kept)
        return np.stack([ends - kept, ends, self.prompts[records.start:records.stop]], axis=1)


class PaddedRecords(_Records):
    """One record per sequence, addressed by index."""

    def __init__(self, ids: np.ndarray, spans: np.ndarray, prompts: np.ndarray, max_seq_len: int, pad: int,
                 groups: np.ndarray | None = None, advantages: np.ndarray | None = None) -> None:
        super().__init__(ids, spans, prompts, max_seq_len, pad, groups, advantages)
        self.count, self.total_targets = len(self.kept), int(self.losses.sum())

    def __len__(self) -> int:
        return self.count

    def _records(self, indices: torch.Tensor | np.ndarray | list[int]) -> np.ndarray:
        found = _indices(indices)
        if len(found) and (found.min() < 0 or found.max() >= self.count):
            raise IndexError(f"sequence index out of range (0 to {self.count - 1})")
        return found

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Loss tokens (completion targets) the sequences at these indices hold."""
        return int(self.losses[self._records(indices)].sum())

    @property
    def targets(self) -> torch.Tensor:
        """Loss tokens of every sequence (int64, one per sequence)."""
        return torch.from_numpy(self.losses.copy())

    def _rows_at(self, indices: torch.Tensor | np.ndarray | list[int]) -> list[range]:
        """The record of each sequence at these indices."""
        return [range(r, r + 1) for r in self._records(indices).tolist()]

    @property
    def sequence_groups(self) -> np.ndarray:
        """Each sequence's group index (pg; -1 for none), for a group-aware epoch order (grouped_order)."""
        return np.full(self.count, -1, np.int64) if self.groups is None else np.asarray(self.groups, np.int64)


class PackedRecords(_Records):
    """Whole records packed in order into rows of at most max_seq_len + 1 tokens, addressed by row."""

    def __init__(self, ids: np.ndarray, spans: np.ndarray, prompts: np.ndarray, max_seq_len: int, pad: int,
                 groups: np.ndarray | None = None, advantages: np.ndarray | None = None) -> None:
        super().__init__(ids, spans, prompts, max_seq_len, pad, groups, advantages)
        firsts, used = [], self.size
        for r, length in enumerate(self.kept.tolist()):  # greedy, in order: a record that does not fit starts a row
            if used + length > self.size:
                firsts.append(r)
                used = 0
            used += length
        self.firsts = np.array([*firsts, len(self.kept)], dtype=np.int64)  # row i holds firsts[i] to firsts[i + 1]
        self.count = len(firsts)
        self.row_losses = np.add.reduceat(self.losses, firsts) if firsts else np.zeros(0, np.int64)
        self.total_targets = int(self.losses.sum())

    def __len__(self) -> int:
        return self.count

    def _rows_at(self, indices: torch.Tensor | np.ndarray | list[int]) -> list[range]:
        found = _indices(indices)
        if len(found) and (found.min() < 0 or found.max() >= self.count):
            raise IndexError(f"sequence index out of range (0 to {self.count - 1})")
        return [range(int(self.firsts[i]), int(self.firsts[i + 1])) for i in found]

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Loss tokens (completion targets) the rows at these indices hold."""
        return int(self.row_losses[_indices(indices)].sum()) if len(self._rows_at(indices)) else 0

    @property
    def targets(self) -> torch.Tensor:
        """Loss tokens of every row (int64, one per row)."""
        return torch.from_numpy(self.row_losses.astype(np.int64))


    @property
    def sequence_groups(self) -> np.ndarray:
        """Each row's group index: its first record's (pg keeps a group's records one after another)."""
        if self.groups is None:
            return np.full(self.count, -1, np.int64)
        return np.asarray(self.groups, np.int64)[self.firsts[:-1]]


def grouped_order(groups: np.ndarray, permutation: torch.Tensor) -> torch.Tensor:
    """Sequence indices with each group's sequences together, in their own order, the groups in the order of
    permutation (a permutation of the distinct groups, sorted: the epoch's order of groups); pg's epoch order."""
    distinct, inverse = np.unique(np.asarray(groups), return_inverse=True)
    rank = np.empty(len(distinct), np.int64)
    rank[np.asarray(permutation, dtype=np.int64)] = np.arange(len(distinct))
    return torch.from_numpy(np.argsort(rank[inverse], kind="stable"))
