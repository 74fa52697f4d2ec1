"""Sequences read by index from a flat array of token ids: padded ones equal the chunks of each document cut
in memory (the text data set's rule), packed ones are full windows of the joined stream."""

import numpy as np
import pytest
import torch

from gaccum_core.data.sequences import IGNORE, PackedSequences, PaddedSequences


def _chunks(documents: list[list[int]], max_seq_len: int) -> list[list[int]]:
    """The rule, written plainly: each document cut into pieces of max_seq_len + 1, pieces of one token dropped."""
    size = max_seq_len + 1
    pieces = [doc[i:i + size] for doc in documents for i in range(0, len(doc), size)]
    return [p for p in pieces if len(p) >= 2]


def _flat(documents: list[list[int]], gap: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The documents in one uint16 array (gap separator tokens after each), their starts and ends."""
    ids, starts, ends = [], [], []
    for doc in documents:
        starts.append(len(ids))
        ids.extend(doc)
        ends.append(len(ids))
        ids.extend([7] * gap)
    return np.array(ids, dtype=np.uint16), np.array(starts), np.array(ends)


@pytest.mark.parametrize("max_seq_len", [1, 3, 4, 9])
@pytest.mark.parametrize("gap", [0, 1])
def test_padded_sequences_are_the_documents_chunks(max_seq_len, gap):
    rng = np.random.default_rng(0)
    lengths = [0, 1, 2, 5, 6, 10, 11, 1, 23, 4]  # empty, single-token and exact-multiple documents among them
    documents = [[int(t) for t in rng.integers(10, 60000, n)] for n in lengths]
    expected = _chunks(documents, max_seq_len)
    sequences = PaddedSequences(*_flat(documents, gap), max_seq_len=max_seq_len, pad=0)
    assert len(sequences) == len(expected)
    assert sequences.total_targets == sum(len(c) - 1 for c in expected)
    order = torch.randperm(len(expected), generator=torch.Generator().manual_seed(1))
    for begin in range(0, len(order), 3):
        picked = order[begin:begin + 3]
        inputs, targets = sequences.batch(picked)
        assert sequences.target_tokens(picked) == int((targets != IGNORE).sum())
        for row, index in enumerate(picked.tolist()):
            chunk = expected[index]
            assert inputs[row, :len(chunk) - 1].tolist() == chunk[:-1]
            assert targets[row, :len(chunk) - 1].tolist() == chunk[1:]
            assert (targets[row, len(chunk) - 1:] == IGNORE).all() and (inputs[row, len(chunk) - 1:] == 0).all()


def test_packed_sequences_are_full_windows_of_the_stream():
    stream = np.arange(100, 150, dtype=np.uint32)  # 50 tokens: 4 sequences of 12 targets, 1 token left over
    sequences = PackedSequences(stream, max_seq_len=12, pad=0)
    assert len(sequences) == 4 and sequences.total_targets == 48
    inputs, targets = sequences.batch(torch.tensor([3, 0]))
    assert inputs[0].tolist() == list(range(136, 148)) and targets[0].tolist() == list(range(137, 149))
    assert inputs[1].tolist() == list(range(100, 112)) and sequences.target_tokens(torch.tensor([3, 0])) == 24
    with pytest.raises(IndexError):
        sequences.batch(torch.tensor([4]))


def test_an_empty_share_gives_an_empty_batch():
    sequences = PaddedSequences(*_flat([[1, 2, 3]]), max_seq_len=4, pad=0)
    inputs, targets = sequences.batch(torch.tensor([], dtype=torch.long))
    assert inputs.shape == (0, 1) and targets.shape == (0, 1) and sequences.target_tokens(torch.tensor([])) == 0
