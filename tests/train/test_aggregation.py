"""Loss aggregation modes' weights: the accumulated gradient against each mode's formula on one big batch.

The references aggregate each record's per-token losses directly by the mode's formula (issue 43 part 2), record by
record, with no weights and no rows; the accumulated side weighs the window by record (record_weights) and reads
each micro-batch's per-token weights by the record each loss token belongs to (RecordWeights.lookup), on padded or packed
micro-batches.
"""

import copy
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gaccum_core.data.sequences import IGNORE
from gaccum_core.train.accumulation import micro_batch_divisors
from gaccum_core.data.record_sequences import NO_LOSS
from gaccum_core.train.aggregation import Records, RecordWeights, record_weights
from gaccum_core.values import LOSS_AGGS

V, B, K, C = 11, 3, 2, 5.0  # vocabulary, micro-batch rows, accumulation steps, seq-mean-token-sum-norm's C
GROUP_SIZE = 4  # consecutive records share a group: group 0 spans the first window's two micro-batches


def _records(n: int = 14, seed: int = 0) -> list[dict]:
    """Records of a prompt (no loss) and a completion (loss) of varied lengths; record 1 has no completion."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for r in range(n):
        prompt, completion = int(torch.randint(2, 5, (1,), generator=gen)), int(torch.randint(1, 7, (1,), generator=gen))
        completion = 0 if r == 1 else completion
        tokens = torch.randint(0, V, (prompt + completion,), generator=gen)
        y = tokens[1:].clone()
        y[:prompt - 1] = IGNORE  # targets that are prompt tokens have no loss
        records.append({"id": 100 + r, "group": r // GROUP_SIZE, "x": tokens[:-1], "y": y})
    return records


def _rows(records: list[dict], packed: bool) -> list[list[dict]]:
    """One record per row (padded), or whole records packed 2, 3, 1, 2, 3, ... per row."""
    if not packed:
        return [[r] for r in records]
    rows, i = [], 0
    for size in [2, 3, 1] * len(records):
        if i >= len(records):
            return rows
        rows.append(records[i:i + size])
        i += size
    return rows


def _batch(rows: list[list[dict]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets (IGNORE where no loss) and each loss token's record id (NO_LOSS elsewhere) of rows, padded
    to their longest."""
    width = max((sum(len(r["x"]) for r in row) for row in rows), default=1)
    x = torch.zeros(len(rows), width, dtype=torch.long)
    y = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    seq = torch.full((len(rows), width), NO_LOSS, dtype=torch.long)
    for n, row in enumerate(rows):
        at = 0
        for r in row:
            span = slice(at, at + len(r["x"]))
            x[n, span], y[n, span] = r["x"], r["y"]
            seq[n, span] = torch.where(r["y"] != IGNORE, r["id"], NO_LOSS)
            at += len(r["x"])
    return x, y, seq


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(V, 8), torch.nn.Linear(8, V))


def _grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for p in model.parameters()])


def _reference(model: torch.nn.Module, records: list[dict], mode: str) -> torch.Tensor:
    """The records' loss aggregated by the mode's formula, record by record."""
    losses = {r["id"]: F.cross_entropy(model(r["x"])[r["y"] != IGNORE], r["y"][r["y"] != IGNORE], reduction="none")
              for r in records}
    kept = [r for r in records if len(losses[r["id"]])]  # a record without loss tokens counts in no mean
    if mode == "token-mean":
        return torch.cat([losses[r["id"]] for r in kept]).mean()
    if mode == "group-mean-token-mean":
        groups = sorted({r["group"] for r in kept})
        return torch.stack([torch.cat([losses[r["id"]] for r in kept if r["group"] == g]).mean() for g in groups]).mean()
    per_seq = {"seq-mean-token-mean": lambda l: l.mean(), "seq-mean-token-sum": lambda l: l.sum(),
               "seq-mean-token-sum-norm": lambda l: l.sum() / C}[mode]
    return torch.stack([per_seq(losses[r["id"]]) for r in kept]).mean()


def _reference_grad(model: torch.nn.Module, micro_records: list[list[dict]], mode: str, textbook: bool) -> torch.Tensor:
    """The big batch's gradient (the window's records as one batch), or the textbook's: each micro-batch's / K."""
    model.zero_grad(set_to_none=True)
    if textbook:
        sum(_reference(model, records, mode) for records in micro_records).div(K).backward()
    else:
        _reference(model, [r for records in micro_records for r in records], mode).backward()
    return _grad(model)


def _records_of_ids(ids, tokens, groups=None) -> Records:
    """A micro-batch's description from any sequences of ids, loss-token counts and groups."""
    return Records(np.asarray(ids, np.int64).reshape(-1), np.asarray(tokens, np.int64).reshape(-1),
                   None if groups is None else np.asarray(groups, np.int64).reshape(-1))


def _at(weights: RecordWeights, owners: torch.Tensor) -> torch.Tensor:
    """(N, T) weights beside owners (each loss token's record id, NO_LOSS elsewhere), each read by its record as the
    data sets read them (at_loss_tokens with weights.lookup), 0 elsewhere."""
    owners = owners.numpy()
    out = np.zeros(owners.shape, dtype=weights.weights.dtype)
    out[owners != NO_LOSS] = weights.lookup(owners[owners != NO_LOSS])
    return torch.from_numpy(out)


def _counted(rows: list[list[dict]]) -> Records:
    """A micro-batch described by its records' loss-token counts (and groups) alone."""
    records = [r for row in rows for r in row]
    return _records_of_ids([r["id"] for r in records], [int((r["y"] != IGNORE).sum()) for r in records],
                      [r["group"] for r in records])


def _token_weights(mode: str, reduction: str, window: list[Records], shares: list[torch.Tensor], world_size: int = 1,
                   dtype: type = np.float32) -> list[torch.Tensor]:
    """Each share's per-token weights (shares: each micro-batch's loss-token record ids on this rank), read from the
    window's weights by record."""
    weights = record_weights(mode, reduction, window, K, world_size, C)
    return [_at(RecordWeights.of(records, w, dtype), owners) for records, w, owners in zip(window, weights, shares,
                                                                                          strict=True)]


def _backward(model: torch.nn.Module, batches: list, weights: list[torch.Tensor]) -> torch.Tensor:
    """The gradient of Σ w · l over the micro-batches (l: per-token cross-entropy, 0 where IGNORE)."""
    model.zero_grad(set_to_none=True)
    for (x, y, _), w in zip(batches, weights):
        if len(x):  # an empty share adds nothing
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="none")
            (w * loss.view_as(y)).sum().backward()
    return _grad(model)


def _accumulated(model: torch.nn.Module, micro_rows: list[list[list[dict]]], mode: str, reduction: str,
                 shares: list[slice] | None = None) -> torch.Tensor:
    """The window's gradient from Σ w · l per micro-batch; with shares, ranks averaged as DDP averages them,
    each weighing its own rows (padded to their own longest) from the window's counts alone."""
    window = [_counted(rows) for rows in micro_rows]
    if shares is None:
        batches = [_batch(rows) for rows in micro_rows]
        return _backward(model, batches, _token_weights(mode, reduction, window, [t for *_, t in batches]))
    grads = []
    for share in shares:
        batches = [_batch(rows[share]) for rows in micro_rows]
        weights = _token_weights(mode, reduction, window, [t for *_, t in batches], len(shares))
        grads.append(_backward(copy.deepcopy(model), batches, weights))
    return torch.stack(grads).mean(0)


def _windows(packed: bool) -> list[list[list[list[dict]]]]:
    """Windows of K micro-batches of B rows (the last window partial: B rows, then 1 or 2), each a list of rows."""
    rows = _rows(_records(), packed)
    windows = [rows[i:i + B * K] for i in range(0, len(rows), B * K)]
    assert len(windows[-1]) < B * K
    return [[window[i:i + B] for i in range(0, len(window), B)] for window in windows]


def _records_of(micro_rows: list[list[list[dict]]]) -> list[list[dict]]:
    return [[r for row in rows for r in row] for rows in micro_rows]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("mode", LOSS_AGGS)
def test_exact_weights_give_the_big_batch_gradient_and_the_textbook_does_not(mode, packed):
    model, textbook_errors = _model(), []
    for micro_rows in _windows(packed):
        expected = _reference_grad(model, _records_of(micro_rows), mode, textbook=False)
        assert (_accumulated(model, micro_rows, mode, "mean") - expected).abs().max() <= 1e-6
        textbook = _accumulated(model, micro_rows, mode, "mean_per_micro_batch")
        assert (textbook - _reference_grad(model, _records_of(micro_rows), mode, textbook=True)).abs().max() <= 1e-6
        textbook_errors.append(float((textbook - expected).abs().max()))
    # The partial window (uneven tokens and sequences per micro-batch) tells the exact weighting from the textbook's.
    assert max(textbook_errors) > 1e-4


@pytest.mark.parametrize("mode", LOSS_AGGS)
def test_two_uneven_ranks_averaged_as_ddp_weigh_as_one_process(mode):
    model = _model()
    for micro_rows in _windows(packed=False) + _windows(packed=True):
        expected = _reference_grad(model, _records_of(micro_rows), mode, textbook=False)
        ranks = _accumulated(model, micro_rows, mode, "mean", shares=[slice(0, 2), slice(2, None)])
        assert (ranks - expected).abs().max() <= 1e-6
        # The textbook's micro-batch is the global one, as micro_batch_divisors counts it on every rank.
        textbook = _accumulated(model, micro_rows, mode, "mean_per_micro_batch", shares=[slice(0, 1), slice(1, None)])
        assert (textbook - _reference_grad(model, _records_of(micro_rows), mode, textbook=True)).abs().max() <= 1e-6


def test_a_group_split_across_micro_batches_is_one_unit_of_group_mean():
    micro_rows = _windows(packed=False)[0]
    first, second = _records_of(micro_rows)
    assert {r["group"] for r in first} & {r["group"] for r in second} == {0}
    weights = _token_weights("group-mean-token-mean", "mean", [_counted(rows) for rows in micro_rows],
                             [_batch(rows)[2] for rows in micro_rows])
    # Group 0's tokens weigh the same in both micro-batches: 1 / (groups · group 0's tokens in the window).
    tokens0 = sum(int((r["y"] != IGNORE).sum()) for r in first + second if r["group"] == 0)
    for (_, _, owners), w in zip(map(_batch, micro_rows), weights):
        in_group0 = torch.isin(owners, torch.tensor([r["id"] for r in first + second if r["group"] == 0]))
        assert in_group0.any() and torch.allclose(w[in_group0], torch.tensor(1 / (2 * tokens0)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "mean_per_micro_batch"])
def test_token_mean_weights_are_todays_divisors(reduction):
    rng = random.Random(0)
    for _ in range(50):
        k, world_size = rng.randint(1, 4), rng.randint(1, 3)
        counts = [rng.randint(1, 30) for _ in range(rng.randint(1, k))]  # a partial window now and then
        window, owners, first = [], [], 0
        for count in counts:
            # One record without loss tokens, two sharing the count.
            records = _records_of_ids(range(first, first + 3), [0, *_split(count, rng)])
            first += 3
            row = torch.full((2 * rng.randint(count // 2 + 1, 20),), NO_LOSS)  # room for count loss tokens and more
            row[torch.randperm(len(row))[:count]] = torch.from_numpy(np.repeat(records.ids, records.tokens))
            window.append(records)
            owners.append(row.view(2, -1))
        weights = record_weights("token-mean", reduction, window, k, world_size)
        for records, w, at, divisor in zip(window, weights, owners, micro_batch_divisors(reduction, counts, world_size,
                                                                                          k)):
            token = _at(RecordWeights.of(records, w, np.float64), at)
            assert set(token[at != NO_LOSS].tolist()) == {1 / divisor}
            assert not token[at == NO_LOSS].any()


def _split(count: int, rng: random.Random) -> list[int]:
    """count loss tokens over two records."""
    first = rng.randint(0, count)
    return [first, count - first]


@pytest.mark.parametrize("mode,reduction,norm_c,groups,message", [
    ("seq-mean-token-mean", "sum", C, None, "reduction sum takes token-mean only"),
    ("seq-mean-token-sum-norm", "mean", 0.0, None, "loss_agg_norm: 0.0 for seq-mean-token-sum-norm"),
    ("group-mean-token-mean", "mean", C, None, "sequence 7 has none"),
    ("token-avg", "mean", C, None, "loss_agg: 'token-avg' is not one of token-mean,"),
    ("token-mean", "average", C, None, "reduction: 'average' is not one of mean,"),
])
def test_what_cannot_be_weighed_is_refused_in_one_line(mode, reduction, norm_c, groups, message):
    with pytest.raises(ValueError, match=message) as refused:
        record_weights(mode, reduction, [_records_of_ids([7], [2], groups)], 2, norm_c=norm_c)
    assert "\n" not in str(refused.value)


def test_a_share_with_a_record_its_micro_batch_lacks_is_refused():
    records = _records_of_ids([7], [2])
    weights = RecordWeights.of(records, record_weights("token-mean", "mean", [records])[0])
    assert _at(weights, torch.tensor([[7, 7, NO_LOSS]])).tolist() == [[0.5, 0.5, 0.0]]
    for owners, record in ((torch.tensor([[7, 9]]), 9), (torch.tensor([[3, NO_LOSS]]), 3)):
        with pytest.raises(ValueError, match=f"record {record} of a rank's share is not in its micro-batch's"):
            _at(weights, owners)
    with pytest.raises(ValueError, match="record 7 of a rank's share"):  # a micro-batch described with no records
        _at(RecordWeights.of(_records_of_ids([], []), np.zeros(0)), torch.tensor([[7]]))


def test_a_record_weighs_the_same_whatever_order_its_micro_batch_lists_it_in():
    """Weights are read by record id: a micro-batch's records listed out of order (pg's grouped epoch order) still
    give each loss token its own record's weight."""
    records = _records_of_ids([30, 10, 20], [1, 2, 4])
    weights = RecordWeights.of(records, record_weights("seq-mean-token-mean", "mean", [records])[0],
                               np.float64, factors=np.array([3.0, 5.0, 7.0]))
    owners = torch.tensor([[20, 10, NO_LOSS, 30]])
    assert _at(weights, owners).tolist() == [pytest.approx([7 / (3 * 4), 5 / (3 * 2), 0.0, 3 / (3 * 1)], rel=1e-15)]
