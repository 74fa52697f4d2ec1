"""The one accumulation step against its oracle: k micro-batches give the one-big-batch update.

Each run feeds the same windows (the last one partial) to two copies of one model: one batch of
the window's samples, and micro-batches of b. Clipping, a warmup + cosine schedule and fp16 with
skipped steps are checked here against the big batch, not against a second implementation.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gaccum_core.train.engine
import gaccum_core.lab.equivalence
import gaccum_core.lab.pitfalls.kit
import gaccum_core.train.step
from gaccum_core.train.accumulation import micro_batch_divisors, plan_epoch
from gaccum_core.config import RunConfig
from gaccum_core.lab.equivalence import compare_gradients, train_side_by_side
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.lab.pitfalls.harness import run_pitfall
from gaccum_core.train.step import Divisor, Optimization, accumulate_step

SAMPLES = 70  # windows of b*k = 16: four full, then a partial one of 6 (micro-batches 4 and 2)
B, K = 4, 4


def _data(poison_window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 10, generator=generator)
    y = torch.randint(0, 3, (SAMPLES,), generator=generator)
    if poison_window is not None:  # one inf input: that window's gradient is NaN on both sides
        x[poison_window * B * K, 0] = float("inf")
    return x, y


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))


def _weighting(reduction: str, micro: list[tuple[torch.Tensor, torch.Tensor]]) -> Divisor:
    """Each micro-batch's divisor: for one big batch the oracle's own count (its samples for a mean, 1 for a
    sum), never the production rule; for micro-batches the engine's rule, micro_batch_divisors with k = K."""
    if len(micro) == 1:
        count = len(micro[0][1]) if reduction == "mean" else 1
        return lambda numbered: count
    divisors = micro_batch_divisors(reduction, [len(y) for _, y in micro], accum_steps=K)
    return lambda numbered: divisors[numbered[0]]


def _train(config: RunConfig, model: nn.Module, micro_batch_size: int, x: torch.Tensor, y: torch.Tensor,
           epochs: int = 2) -> list[dict]:
    """Every window through accumulate_step in micro-batches of micro_batch_size; one record per step."""
    windows = plan_epoch(SAMPLES, B, K) * epochs
    opt = Optimization.from_config(config, model, torch.device("cpu"), len(windows))
    records = []
    for window in windows:
        start, stop = window.micro_batches[0].start, window.micro_batches[-1].stop
        micro = list(zip(x[start:stop].split(micro_batch_size), y[start:stop].split(micro_batch_size)))
        lr = opt.optimizer.param_groups[0]["lr"]
        result = accumulate_step(opt, list(enumerate(micro)),
                                 lambda n: summed_cross_entropy(model, opt.precision, *n[1]),
                                 _weighting(config.reduction, micro))
        records.append({"lr": lr, "skipped": result.skipped, "scale": result.scale,
                        "loss": result.loss_sum.item(), "grad_norm": result.grad_norm.item(),
                        "weights": [p.detach().clone() for p in model.parameters()]})
    return records


def _both(config: RunConfig, x: torch.Tensor, y: torch.Tensor) -> tuple[list[dict], list[dict]]:
    model = _model()
    big = _train(config, copy.deepcopy(model), B * K, x, y)
    accumulated = _train(config, model, B, x, y)
    return big, accumulated


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("adam", 1e-2)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fp32_step_equals_the_big_batch_with_a_partial_last_window(optimizer, lr, reduction):
    config = RunConfig(optimizer=optimizer, lr=lr / (16 if reduction == "sum" else 1), reduction=reduction)
    big, accumulated = _both(config, *_data())
    assert len(big) == 10
    for b, a in zip(big, accumulated):
        for got, want in zip(a["weights"], b["weights"]):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_clipping_and_a_cosine_schedule_equal_the_big_batch():
    config = RunConfig(optimizer="adam", lr=5e-2, grad_clip=0.05, lr_schedule="cosine", warmup_steps=3)
    big, accumulated = _both(config, *_data())
    # The clip bites on every step (norms well above 0.05), and the lr warms up, then decays.
    assert min(r["grad_norm"] for r in big) > 0.05
    lrs = [r["lr"] for r in big]
    assert lrs[0] < lrs[2] < lrs[3] and lrs[3] > lrs[6] > lrs[-1]
    assert [r["lr"] for r in accumulated] == lrs
    for b, a in zip(big, accumulated):
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        for got, want in zip(a["weights"], b["weights"]):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_clipping_changes_the_update():
    """The clipped runs above would prove little if clipping did nothing."""
    x, y = _data()
    clipped = _train(RunConfig(optimizer="sgd", lr=0.1, grad_clip=0.05), _model(), B, x, y)
    free = _train(RunConfig(optimizer="sgd", lr=0.1), _model(), B, x, y)
    assert not torch.allclose(clipped[0]["weights"][0], free[0]["weights"][0])


def test_fp16_skipped_step_leaves_weights_and_schedule_alone_and_matches_the_big_batch():
    # Window 2 of each epoch holds an inf input: its gradient is NaN, so the GradScaler skips the step.
    config = RunConfig(amp="fp16", init_scale=256.0, growth_interval=1000, optimizer="sgd", lr=0.1,
                       lr_schedule="cosine", warmup_steps=2, grad_clip=1.0)
    big, accumulated = _both(config, *_data(poison_window=2))
    skipped = [r["skipped"] for r in big]
    assert skipped == [False, False, True, False, False] * 2
    assert [r["skipped"] for r in accumulated] == skipped
    assert [r["scale"] for r in accumulated] == [r["scale"] for r in big] == [256.0] * 3 + [128.0] * 5 + [64.0] * 2
    for records in (big, accumulated):
        for before, after in zip(records, records[1:]):
            if after["skipped"]:
                assert all(torch.equal(p, q) for p, q in zip(before["weights"], after["weights"]))
    # The schedule counts taken steps only: the step after a skip gets the lr the skipped one had.
    lrs = [r["lr"] for r in big]
    assert lrs[3] == lrs[2] and lrs[8] == lrs[7]
    assert [r["lr"] for r in accumulated] == lrs
    # fp16 autocast rounds each matmul to 11 bits, differently for one batch of 16 and four of 4.
    for b, a in zip(big, accumulated):
        for got, want in zip(a["weights"], b["weights"]):
            torch.testing.assert_close(got, want, atol=2e-4, rtol=0)  # measured: at most 3.0e-5 apart


def test_stop_mid_window_takes_no_step_and_leaves_no_gradient():
    config = RunConfig(optimizer="sgd", lr=0.1)
    model, (x, y) = _model(), _data()
    opt = Optimization.from_config(config, model, torch.device("cpu"), 1)
    before = [p.detach().clone() for p in model.parameters()]
    calls = iter([False, False, True])  # stop before the third micro-batch
    result = accumulate_step(opt, list(zip(x[:16].split(B), y[:16].split(B))),
                             lambda xy: summed_cross_entropy(model, opt.precision, *xy), 16, lambda: next(calls))
    assert result is None
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


@pytest.fixture
def counted(monkeypatch):
    """Counts accumulate_step calls made through each module that must use the shared step."""
    counts: dict[str, int] = {}
    # The pitfalls' reference and correct loop take it through their kit (gaccum_core.lab.pitfalls.kit).
    for name, module in (("engine", gaccum_core.train.engine), ("equivalence", gaccum_core.lab.equivalence),
                         ("pitfalls", gaccum_core.lab.pitfalls.kit)):
        def counting(*args, _name=name, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return gaccum_core.train.step.accumulate_step(*args, **kwargs)

        monkeypatch.setattr(module, "accumulate_step", counting)
    return counts


def test_every_loop_but_the_deliberate_bugs_takes_the_shared_step(counted):
    gaccum_core.train.engine.Engine(RunConfig(model="mlp", max_steps=2, device="cpu")).run(gaccum_core.train.metrics.NullSink())
    assert counted.pop("engine") == 2
    train_side_by_side(RunConfig(model="mlp", device="cpu"), steps=3)
    assert counted.pop("equivalence") == 6  # big batch and accumulated, 3 steps each
    # #6 is the engine three times (big batch, mean, the textbook mean_per_micro_batch), exactly 3 steps each
    # (Engine.run(steps=3), no evaluation): the textbook bug is a divisor, not a loop.
    run_pitfall("mean_of_means_sequences", steps=3)
    assert counted.pop("engine") == 3 * 3 and "pitfalls" not in counted
    run_pitfall("partial_window_divided_by_k", steps=3)
    assert counted.pop("pitfalls") == 6  # the reference and the correct loop; the pitfall is written apart


def test_the_gradient_check_accumulates_with_the_shared_weighting(monkeypatch):
    calls = []
    real = gaccum_core.train.step.accumulate

    def counting(*args, **kwargs):
        numbered, divisor = list(args[1]), args[3]
        calls.append([divisor(n) for n in numbered])  # each micro-batch's divisor
        return real(args[0], numbered, *args[2:], **kwargs)

    monkeypatch.setattr(gaccum_core.lab.equivalence, "accumulate", counting)
    assert compare_gradients(RunConfig(model="mlp", device="cpu", micro_batch_size=8, accum_steps=4)).equal
    assert calls == [[32], [32] * 4]  # the big batch and the accumulated side, both over the window's 32 samples
