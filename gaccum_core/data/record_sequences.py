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

import numpy as np
import torch

from gaccum_core.data.sequences import IGNORE, _indices, _rows_to_batch


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

    def _row(self, records: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The row's tokens (its records one after another), whether each is a loss token's target, and the
        advantage of the record each belongs to."""
        tokens = [np.asarray(self.ids[self.starts[r]:self.starts[r] + self.kept[r]]) for r in records]
        counted = np.zeros(int(sum(self.kept[r] for r in records)), dtype=bool)
        kept = self.kept[records.start:records.stop]
        advantage = (np.zeros(int(kept.sum())) if self.advantages is None
                     else np.repeat(np.asarray(self.advantages[records.start:records.stop], np.float64), kept))
        offset = 0
        for r in records:
            counted[offset + max(int(self.prompts[r]), 1):offset + int(self.kept[r])] = True
            offset += int(self.kept[r])
        return np.concatenate(tokens) if tokens else np.zeros(0, np.int64), counted, advantage

    def _batch(self, rows: list[range]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) padded with pad and targets (N, T): IGNORE but where a loss token is predicted."""
        made = [self._row(records) for records in rows]
        inputs, targets = _rows_to_batch([tokens for tokens, _, _ in made], self.pad)
        for n, (_, counted, _) in enumerate(made):
            keep = torch.from_numpy(counted[1:])
            targets[n, :len(keep)][~keep] = IGNORE
        return inputs, targets

    def _advantages(self, rows: list[range]) -> torch.Tensor:
        """(N, T) float32 beside _batch's targets: each loss token's record's advantage, 0 elsewhere (pg)."""
        made = [self._row(records) for records in rows]
        width = max((len(tokens) for tokens, _, _ in made), default=2) - 1
        found = torch.zeros((len(made), width), dtype=torch.float32)
        for n, (_, counted, advantage) in enumerate(made):
            found[n, :len(counted) - 1] = torch.from_numpy(np.where(counted[1:], advantage[1:], 0.0))
        return found

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

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) and targets (N, T), IGNORE on the prompt and padding; T = the longest record kept - 1."""
        return self._batch([range(r, r + 1) for r in self._records(indices).tolist()])

    def spans(self, indices: torch.Tensor) -> list[np.ndarray]:
        """Each sequence's record as (start, end, prompt length) in its row: one (1, 3) array per sequence."""
        return [self._spans(range(r, r + 1)) for r in self._records(indices).tolist()]

    def token_advantages(self, indices: torch.Tensor) -> torch.Tensor:
        """(N, T) beside batch()'s targets: each loss token's record's advantage, 0 elsewhere (pg)."""
        return self._advantages([range(r, r + 1) for r in self._records(indices).tolist()])

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

    def _rows(self, indices: torch.Tensor | np.ndarray | list[int]) -> list[range]:
        found = _indices(indices)
        if len(found) and (found.min() < 0 or found.max() >= self.count):
            raise IndexError(f"sequence index out of range (0 to {self.count - 1})")
        return [range(int(self.firsts[i]), int(self.firsts[i + 1])) for i in found]

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Loss tokens (completion targets) the rows at these indices hold."""
        return int(self.row_losses[_indices(indices)].sum()) if len(self._rows(indices)) else 0

    @property
    def targets(self) -> torch.Tensor:
        """Loss tokens of every row (int64, one per row)."""
        return torch.from_numpy(self.row_losses.astype(np.int64))

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) and targets (N, T), IGNORE on prompts, records' first tokens and padding."""
        return self._batch(self._rows(indices))

    def spans(self, indices: torch.Tensor) -> list[np.ndarray]:
        """Each row's records as (start, end, prompt length) in the row: one (records, 3) array per row."""
        return [self._spans(records) for records in self._rows(indices)]

    def token_advantages(self, indices: torch.Tensor) -> torch.Tensor:
        """(N, T) beside batch()'s targets: each loss token's record's advantage, 0 elsewhere (pg)."""
        return self._advantages(self._rows(indices))

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
