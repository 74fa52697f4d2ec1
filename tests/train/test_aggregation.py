"""Loss aggregation modes' per-token weights: the accumulated gradient against each mode's formula on one big batch.

The references aggregate each record's per-token losses directly by the mode's formula (issue 43 part 2), record by
record, with no weights and no rows; the accumulated side runs the weights on padded or packed micro-batches.
"""

import copy
import random

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.data.sequences import IGNORE
from gaccum_core.train.accumulation import micro_batch_divisors
from gaccum_core.train.aggregation import NO_LOSS, LossTokens, token_weights
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


def _batch(rows: list[list[dict]]) -> tuple[torch.Tensor, torch.Tensor, LossTokens]:
    """Inputs, targets (IGNORE where no loss) and loss tokens of rows, padded to their longest."""
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
    return x, y, LossTokens(seq, {r["id"]: r["group"] for row in rows for r in row})


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


def _counted(rows: list[list[dict]]) -> LossTokens:
    """A micro-batch described by its records' loss-token counts alone."""
    records = [r for row in rows for r in row]
    return LossTokens.counted([r["id"] for r in records], [int((r["y"] != IGNORE).sum()) for r in records],
                              {r["id"]: r["group"] for r in records})


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
    if shares is None:
        batches = [_batch(rows) for rows in micro_rows]
        return _backward(model, batches, token_weights(mode, reduction, [t for *_, t in batches], K, 1, C))
    window, grads = [_counted(rows) for rows in micro_rows], []
    for share in shares:
        batches = [_batch(rows[share]) for rows in micro_rows]
        weights = token_weights(mode, reduction, window, K, len(shares), C, shares=[t for *_, t in batches])
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
    weights = token_weights("group-mean-token-mean", "mean", [_batch(rows)[2] for rows in micro_rows])
    # Group 0's tokens weigh the same in both micro-batches: 1 / (groups · group 0's tokens in the window).
    tokens0 = sum(int((r["y"] != IGNORE).sum()) for r in first + second if r["group"] == 0)
    for (_, _, tokens), w in zip(map(_batch, micro_rows), weights):
        in_group0 = torch.isin(tokens.seq, torch.tensor([r["id"] for r in first + second if r["group"] == 0]))
        assert torch.allclose(w[in_group0], torch.tensor(1 / (2 * tokens0)))


def test_padded_rows_describe_their_loss_tokens():
    rows = _rows(_records()[:4], packed=False)
    _, y, tokens = _batch(rows)
    assert torch.equal(LossTokens.rows(y, [row[0]["id"] for row in rows]).seq, tokens.seq)


@pytest.mark.parametrize("reduction", ["mean", "sum", "mean_per_micro_batch"])
def test_token_mean_weights_are_todays_divisors(reduction):
    rng = random.Random(0)
    for _ in range(50):
        k, world_size = rng.randint(1, 4), rng.randint(1, 3)
        counts = [rng.randint(1, 30) for _ in range(rng.randint(1, k))]  # a partial window now and then
        window = []
        for count in counts:
            seq = torch.full((2 * rng.randint(count // 2 + 1, 20),), NO_LOSS)  # room for count loss tokens and more
            seq[torch.randperm(len(seq))[:count]] = torch.randint(0, 5, (count,))
            window.append(LossTokens(seq.view(2, -1)))
        weights = token_weights("token-mean", reduction, window, k, world_size, dtype=torch.float64)
        for tokens, w, divisor in zip(window, weights, micro_batch_divisors(reduction, counts, world_size, k)):
            assert set(w[tokens.seq != NO_LOSS].tolist()) == {1 / divisor}
            assert not w[tokens.seq == NO_LOSS].any()


@pytest.mark.parametrize("mode,reduction,norm_c,groups,message", [
    ("seq-mean-token-mean", "sum", C, None, "reduction sum takes token-mean only"),
    ("seq-mean-token-sum-norm", "mean", 0.0, None, "loss_agg_norm: 0.0 for seq-mean-token-sum-norm"),
    ("group-mean-token-mean", "mean", C, None, "sequence 7 has none"),
    ("token-avg", "mean", C, None, "loss_agg: 'token-avg' is not one of token-mean,"),
    ("token-mean", "average", C, None, "reduction: 'average' is not one of mean,"),
])
def test_what_cannot_be_weighed_is_refused_in_one_line(mode, reduction, norm_c, groups, message):
    with pytest.raises(ValueError, match=message) as refused:
        token_weights(mode, reduction, [LossTokens(torch.tensor([[7, 7, NO_LOSS]]), groups)], 2, norm_c=norm_c)
    assert "\n" not in str(refused.value)


def test_a_share_with_a_sequence_its_micro_batch_lacks_is_refused():
    with pytest.raises(ValueError, match="sequence 9 of a rank's share is not in its micro-batch's description"):
        token_weights("token-mean", "mean", [LossTokens.counted([7], [2])], shares=[LossTokens(torch.tensor([[7, 9]]))])
