"""Which record each loss token of a records task (sft) belongs to: what train.aggregation weighs a window by.

A record's index in its split is its sequence id (unique across the window's micro-batches and a job's ranks).
describe: the records of the samples at some indices and each one's loss tokens, from the per-record counts alone
(no batch built: every rank describes the whole window this way). loss_sequences: for a batch, the record id at
each target that is a loss token (-1 elsewhere), aligned with the batch's targets as record_sequences builds them.
"""

from __future__ import annotations

import numpy as np
import torch

from gaccum_core.data.record_sequences import PackedRecords, PaddedRecords, _Records

NO_LOSS = -1  # a target that is no loss token (prompt, a record's first token, padding)


def _rows(records: _Records, indices: torch.Tensor) -> list[range]:
    """The records each sample at these indices holds: one for a padded sequence, a packed row's several."""
    if isinstance(records, PackedRecords):
        return records._rows(indices)
    assert isinstance(records, PaddedRecords), type(records)
    return [range(r, r + 1) for r in records._records(indices).tolist()]


def describe(records: _Records, indices: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The records of the samples at these indices (ids, in batch order) and each one's loss tokens."""
    rows = _rows(records, indices)
    ids = np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in rows]) if rows else \
        np.zeros(0, np.int64)
    return ids, records.losses[ids]


def loss_sequences(records: _Records, indices: torch.Tensor, width: int) -> torch.Tensor:
    """(N, width) long: at each target that is a loss token the id of its record, NO_LOSS elsewhere (a record's
    targets from max(prompt, 1) - 1 to its kept length - 1, at its offset in the row)."""
    rows = _rows(records, indices)
    seq = torch.full((len(rows), width), NO_LOSS, dtype=torch.long)
    for n, row in enumerate(rows):
        offset = 0
        for r in row:
            kept, first = int(records.kept[r]), max(int(records.prompts[r]), 1)
            if kept > first:
                seq[n, offset + first - 1:offset + kept - 1] = r
            offset += kept
    return seq


def longest_completion(records: _Records) -> int:
    """The most loss tokens a record of the split holds after truncation (seq-mean-token-sum-norm's default C)."""
    return int(records.losses.max()) if len(records.losses) else 0
