"""sft's loss aggregation modes on the engine (issue 43 part 2): b·k accumulated (reduction mean) equals one batch
of b·k on the same records for every sequence mode, padded and packed, a partial last window included; the
textbook (mean_per_micro_batch: each micro-batch aggregated alone, over k) does not. One step of seq-mean-token-mean
against the mean of each record's token mean computed here in plain torch, its logged loss that mean."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.data.sequences import IGNORE
from gaccum_core.train import engine
from gaccum_core.train.accumulation import epoch_order
from gaccum_core.train.engine import Engine
from records_data import records, sft  # noqa: F401  (the records fixture: short, long, prompt-only)
from training import trained

SEQUENCE_MODES = ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@pytest.fixture(autouse=True)
def no_sample(monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds


@pytest.mark.parametrize("packing", ["off", "on"])
@pytest.mark.parametrize("mode", SEQUENCE_MODES)
def test_each_mode_accumulated_equals_one_big_batch_and_its_textbook_does_not(records, token_cache_dir, mode,
                                                                              packing):
    runs = {name: trained(sft(records, packing=packing, micro_batch_size=b, accum_steps=k, reduction=reduction,
                              loss_agg=mode, lr=0.1))
            for name, (b, k, reduction) in {"accumulated": (2, 4, "mean"), "big": (8, 1, "mean"),
                                            "textbook": (2, 4, "mean_per_micro_batch")}.items()}
    (accumulated, rows), (big, big_rows), (textbook, _) = runs["accumulated"], runs["big"], runs["textbook"]
    assert [r["samples"] for r in rows.steps] == {"off": [8, 8, 3], "on": [8, 3]}[packing]  # a partial window
    exact, drift = (accumulated - big).abs().max().item(), (textbook - big).abs().max().item()
    assert exact <= 1e-6, f"{mode}: accumulated vs one big batch: {exact:.2e}"
    assert drift > 1000 * max(exact, 1e-9), f"{mode}: textbook {drift:.2e} vs exact {exact:.2e}"
    assert [r["loss"] for r in rows.steps] == pytest.approx([r["loss"] for r in big_rows.steps], rel=1e-5)


def test_one_step_of_seq_mean_token_mean_is_the_mean_of_each_records_token_mean(records, token_cache_dir):
    """The reference written here: the window's records (padded: one a row), each one's mean token loss over its
    completion targets, averaged over the records that have any; one SGD step (momentum's first is the gradient)."""
    config = sft(records, micro_batch_size=2, accum_steps=4, loss_agg="seq-mean-token-mean", max_steps=1, lr=0.1)
    reference = Engine(config)
    model = reference.model
    indices = epoch_order(len(reference.data.train), config.seed, 0)[:8]
    x, y = reference.data.train.batch(indices)
    model.train()
    with reference.rng.active():
        losses = F.cross_entropy(model(x).float().transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    counted = (y != IGNORE).sum(dim=1)
    means = losses.sum(dim=1)[counted > 0] / counted[counted > 0]
    assert len(means) > 0
    loss = means.mean()
    loss.backward()
    expected = torch.cat([(p - config.lr * p.grad).detach().flatten() for p in model.parameters()])
    got, rows = trained(config)
    assert (got - expected).abs().max().item() <= 1e-6
    assert rows.steps[0]["loss"] == pytest.approx(loss.item(), rel=1e-6)
