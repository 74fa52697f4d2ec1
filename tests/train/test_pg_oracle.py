"""pg (fixed rollouts) on the engine: every loss aggregation mode, padded and packed, b·k accumulated (reduction mean)
equals one batch of b·k on the same records (a partial last window, groups split across micro-batches); the textbook
(mean_per_micro_batch) does not. One step of group-mean-token-mean against the reference written here: per group,
Σ over its records' loss tokens of -A·log p over its loss tokens, averaged over the groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.config import LOSS_AGGS
from gaccum_core.data import record_sequences
from gaccum_core.data.sequences import IGNORE
from gaccum_core.train import engine
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.train.weighting import sample_order
from records_data import pg, rollouts  # noqa: F401  (the rollouts fixture)
from training import trained


@pytest.fixture(autouse=True)
def no_sample(monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds


def _train_records(text_file: str) -> list[dict]:
    """The training split's records, in order: those of groups not held out (group g: g % 10 != 0)."""
    records = [json.loads(line) for line in Path(text_file).read_text(encoding="utf-8").splitlines()]
    return [r for r in records if int(r["group"][1:]) % 10]


@pytest.mark.parametrize("packing", ["off", "on"])
@pytest.mark.parametrize("mode", LOSS_AGGS)
def test_each_mode_accumulated_equals_one_big_batch_and_its_textbook_does_not(rollouts, token_cache_dir, mode,
                                                                              packing):
    runs = {name: trained(pg(rollouts, packing=packing, micro_batch_size=b, accum_steps=k, reduction=reduction,
                             loss_agg=mode))
            for name, (b, k, reduction) in {"accumulated": (2, 4, "mean"), "big": (8, 1, "mean"),
                                            "textbook": (2, 4, "mean_per_micro_batch")}.items()}
    (accumulated, rows), (big, big_rows), (textbook, _) = runs["accumulated"], runs["big"], runs["textbook"]
    samples = [r["samples"] for r in rows.steps]
    assert samples[-1] < 8 and (sum(samples) == 20) == (packing == "off")  # a partial window; packed: rows of several
    exact, drift = (accumulated - big).abs().max().item(), (textbook - big).abs().max().item()
    assert exact <= 1e-6, f"{mode}: accumulated vs one big batch: {exact:.2e}"
    assert drift > 1000 * max(exact, 1e-9), f"{mode}: textbook {drift:.2e} vs exact {exact:.2e}"
    assert [r["loss"] for r in rows.steps] == pytest.approx([r["loss"] for r in big_rows.steps], rel=1e-5, abs=1e-7)


def test_the_epoch_order_keeps_groups_together_and_splits_one_across_micro_batches(rollouts, token_cache_dir):
    config = pg(rollouts, micro_batch_size=2, accum_steps=4)
    train = Engine(config).data.train
    groups = [r["group"] for r in _train_records(rollouts)]
    order = [groups[i] for i in sample_order(config, train, 0).tolist()]
    runs = [g for n, g in enumerate(order) if n == 0 or order[n - 1] != g]
    assert sorted(runs) == sorted(set(groups)), f"a group's records apart: {order}"
    assert runs != sorted(runs) or [groups[i] for i in sample_order(config, train, 1).tolist()] != order
    assert any(order[n] == order[n + 1] for n in range(1, len(order) - 1, 2))  # a group across micro-batches


def _aggregated(mode: str, parts: list[tuple[str, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """token-mean: Σ -A·log p over every loss token / their count; group-mean-token-mean: that within each group,
    averaged over the groups. parts: each record's (group, Σ -A·log p over its loss tokens, its loss tokens)."""
    if mode == "token-mean":
        return torch.stack([total for _, total, _ in parts]).sum() / sum(int(n) for _, _, n in parts)
    groups = {group: [] for group, _, _ in parts}
    for group, total, tokens in parts:
        groups[group].append((total, tokens))
    return torch.stack([torch.stack([t for t, _ in g]).sum() / sum(int(n) for _, n in g)
                        for g in groups.values()]).mean()


@pytest.mark.parametrize("mode", ["token-mean", "group-mean-token-mean"])
def test_one_step_is_the_advantage_weighted_loss_aggregated_by_the_mode(rollouts, token_cache_dir, mode):
    """The first window's records (padded: one a row), each loss token's -A·log p with A read from the file,
    aggregated by the mode as written in _aggregated; one SGD step."""
    config = pg(rollouts, micro_batch_size=2, accum_steps=4, max_steps=1, loss_agg=mode)
    reference = Engine(config)
    model, records = reference.model, _train_records(rollouts)
    indices = sample_order(config, reference.data.train, 0)[:8]
    x, y = reference.data.train.batch(indices)
    model.train()
    with reference.rng.active():
        nll = F.cross_entropy(model(x).float().transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    counted = y != IGNORE
    parts = [(records[i]["group"], records[i]["advantage"] * nll[n][counted[n]].sum(), counted[n].sum())
             for n, i in enumerate(indices.tolist())]
    assert len({group for group, _, _ in parts}) >= 2
    loss = _aggregated(mode, parts)
    loss.backward()
    expected = torch.cat([(p - config.lr * p.grad).detach().flatten() for p in model.parameters()])
    got, rows = trained(config)
    assert (got - expected).abs().max().item() <= 1e-6
    assert rows.steps[0]["loss"] == pytest.approx(loss.item(), rel=1e-5)


def test_a_micro_batch_reads_which_record_each_loss_token_belongs_to_once_for_its_weights_and_advantages(
        rollouts, token_cache_dir, monkeypatch):
    """pg's loss weighs each loss token by its record's weight and advantage: both read from one pass over the
    micro-batch's records, the advantage folded into its record's weight (a second pass, for the advantages, was the
    engine's own cost over a plain loop's)."""
    passes = []
    real = record_sequences._Records._at_loss_targets
    monkeypatch.setattr(record_sequences._Records, "_at_loss_targets",
                        lambda self, rows, *args: passes.append(len(rows)) or real(self, rows, *args))
    run = Engine(pg(rollouts, micro_batch_size=2, accum_steps=4))
    run.run(RowKeeper(), steps=1, evaluate=False)
    assert passes == [2, 2] * 4  # per micro-batch: its batch's targets, then its loss tokens' weights
