"""Token sequences read by index from one flat array of token ids (a memory-mapped token cache, or an array in
memory), padded or packed. Nothing per token or per sequence is held in Python: a batch is sliced out of the
array when it is asked for, so memory does not grow with the corpus.

Padded (packing off): each document's tokens are cut into sequences of max_seq_len + 1 (L tokens give L - 1
next-token targets), its last one shorter and padded in a batch; a last piece of one token (no target) is
dropped. Micro-batches then hold different numbers of target tokens. Only per-document arrays are kept
(where each document starts, ends, and how many sequences come before it).

Packed (packing on): the split's whole token stream, documents already joined by an end-of-text token, cut into
consecutive sequences of max_seq_len + 1 that overlap by one token (nanoGPT's x, y): every sequence holds
max_seq_len targets, so every micro-batch of b holds the same number.
"""

from __future__ import annotations

import numpy as np
import torch

IGNORE = -100  # cross_entropy's ignore_index: padding has no target


def _rows_to_batch(rows: list[np.ndarray], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, T) padded with pad and targets (N, T) with IGNORE where padded; T = the longest row - 1."""
    width = max((len(r) for r in rows), default=2) - 1  # no rows: a data-parallel rank's empty share
    inputs = torch.full((len(rows), width), pad, dtype=torch.long)
    targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for n, row in enumerate(rows):
        tokens = torch.from_numpy(row.astype(np.int64, copy=False))
        inputs[n, :len(row) - 1] = tokens[:-1]
        targets[n, :len(row) - 1] = tokens[1:]
    return inputs, targets


def _indices(indices: torch.Tensor | np.ndarray | list[int]) -> np.ndarray:
    return np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64).reshape(-1)


class PaddedSequences:
    """Each document's sequences, addressed by index; batch() pads to the micro-batch's longest with `pad`."""

    def __init__(self, ids: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_seq_len: int, pad: int) -> None:
        """ids: the token ids; document d is ids[starts[d]:ends[d]]."""
        self.ids, self.pad, self.size = ids, pad, max_seq_len + 1
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)
        lengths = self.ends - self.starts
        pieces = -(-lengths // self.size)
        last = lengths - (pieces - 1) * self.size
        pieces -= (pieces > 0) & (last == 1)  # a last piece of one token holds no target
        self.after = np.cumsum(pieces)  # sequences up to and including each document
        self.before = self.after - pieces  # sequences before each document
        self.count = int(self.after[-1]) if len(self.after) else 0
        kept = np.where((pieces > 0) & (last == 1), lengths - 1, np.where(pieces > 0, lengths, 0))
        self.total_targets = int(kept.sum() - pieces.sum())

    def __len__(self) -> int:
        return self.count

    def _spans(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first token, token count) of each sequence."""
        if len(indices) and (indices.min() < 0 or indices.max() >= self.count):
            raise IndexError(f"sequence index out of range (0 to {self.count - 1})")
        doc = np.searchsorted(self.after, indices, side="right")
        start = self.starts[doc] + (indices - self.before[doc]) * self.size
        return start, np.minimum(self.size, self.ends[doc] - start)

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Next-token targets the sequences at these indices hold."""
        _, lengths = self._spans(_indices(indices))
        return int((lengths - 1).sum())

    @property
    def targets(self) -> torch.Tensor:
        """Next-token targets of every sequence (int64, one per sequence: made when asked, for small corpora)."""
        _, lengths = self._spans(np.arange(self.count))
        return torch.from_numpy(lengths - 1)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) padded with pad and targets (N, T) with IGNORE where padded; T = longest - 1."""
        starts, lengths = self._spans(_indices(indices))
        return _rows_to_batch([np.asarray(self.ids[s:s + n]) for s, n in zip(starts, lengths)], self.pad)


class PackedSequences:
    """The token stream cut into full sequences of max_seq_len targets each, addressed by index."""

    def __init__(self, ids: np.ndarray, max_seq_len: int, pad: int) -> None:
        self.ids, self.length, self.pad = ids, max_seq_len, pad
        self.count = max((len(ids) - 1) // max_seq_len, 0)
        self.total_targets = self.count * max_seq_len

    def __len__(self) -> int:
        return self.count

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Next-token targets the sequences at these indices hold: max_seq_len each."""
        return len(_indices(indices)) * self.length

    @property
    def targets(self) -> torch.Tensor:
        """Next-token targets of every sequence: max_seq_len each (made when asked, for small corpora)."""
        return torch.full((self.count,), self.length, dtype=torch.int64)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (N, max_seq_len): sequence i is the stream's tokens i·L to i·L + L, shifted by one."""
        found = _indices(indices)
        if len(found) and (found.min() < 0 or found.max() >= self.count):
            raise IndexError(f"sequence index out of range (0 to {self.count - 1})")
        return _rows_to_batch([np.asarray(self.ids[i * self.length:(i + 1) * self.length + 1]) for i in found],
                              self.pad)
