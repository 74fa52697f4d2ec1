"""The accumulation contract on its own: windows, weights and sample order; the textbook weighting through the engine."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from gaccum_core.config import RunConfig
from gaccum_core.train.accumulation import (epoch_order, micro_batch_divisors, plan_epoch, planned_steps, window_at,
                                            windows_per_epoch)
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink


@pytest.mark.parametrize("b,k", [(32, 1), (8, 4), (1, 32), (5, 3), (7, 7)])
def test_windows_hold_the_samples_of_one_big_batch(b, k):
    n = 110
    windows = plan_epoch(n, b, k)
    big = plan_epoch(n, b * k, 1)
    assert [(w.micro_batches[0].start, w.micro_batches[-1].stop) for w in windows] == \
           [(w.micro_batches[0].start, w.micro_batches[-1].stop) for w in big]
    for window in windows:
        assert len(window.micro_batches) <= k
        assert window.micro_batches[-1].ends_window
        assert not any(m.ends_window for m in window.micro_batches[:-1])
        assert all(m.size == b for m in window.micro_batches[:-1])


def test_partial_last_window_has_a_short_last_micro_batch_and_is_weighted_by_its_own_size():
    windows = plan_epoch(110, 8, 4)
    assert len(windows) == 4 == windows_per_epoch(110, 8, 4)
    last = windows[-1]
    assert [m.size for m in last.micro_batches] == [8, 6]
    assert last.samples == 14
    # Each micro-batch's summed loss is divided by the window's samples: weights sum to one.
    sizes = [m.size for m in last.micro_batches]
    assert sum(size / d for size, d in zip(sizes, micro_batch_divisors("mean", sizes))) == pytest.approx(1.0)
    assert all(d == 32 for w in windows[:-1] for d in micro_batch_divisors("mean", [m.size for m in w.micro_batches]))


def test_sum_reduction_never_divides():
    assert {d for w in plan_epoch(50, 4, 3) for d in micro_batch_divisors("sum", [m.size for m in w.micro_batches])} == {1}


def test_epoch_order_depends_on_seed_and_epoch_only():
    a = epoch_order(100, seed=3, epoch=0)
    assert torch.equal(a, epoch_order(100, seed=3, epoch=0))
    assert sorted(a.tolist()) == list(range(100))
    assert not torch.equal(a, epoch_order(100, seed=3, epoch=1))
    assert not torch.equal(a, epoch_order(100, seed=4, epoch=0))


def test_planned_steps_caps_at_max_steps():
    assert planned_steps(110, 8, 4, epochs=3, max_steps=0) == 12
    assert planned_steps(110, 8, 4, epochs=3, max_steps=5) == 5
    assert planned_steps(110, 8, 4, epochs=1, max_steps=50) == 4


def test_micro_batch_divisors_for_each_reduction():
    counts = [8, 8, 5]  # a partial window of k=4: three micro-batches, the last short
    assert micro_batch_divisors("mean", counts) == [21, 21, 21]
    assert micro_batch_divisors("sum", counts) == [1, 1, 1]
    # The textbook: each micro-batch's mean over its own count, divided by k (accum_steps, not 3).
    assert micro_batch_divisors("mean_per_micro_batch", counts, accum_steps=4) == [32, 32, 20]
    assert micro_batch_divisors("mean_per_micro_batch", [8, 8]) == [16, 16]  # k defaults to the micro-batches
    assert micro_batch_divisors("mean", counts, world_size=2) == [10.5, 10.5, 10.5]  # DDP averages the ranks


class _Trail(NullSink):
    """The model's weights, flat, after each step."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.weights = model, []

    def log_step(self, row: dict) -> None:
        self.weights.append(parameters_to_vector(self.model.parameters()).detach().clone())


def _trained(reduction: str, max_steps: int) -> tuple[Engine, list[torch.Tensor]]:
    """mlp on 118 fake 8x8 images in windows of 8x4 (the 4th, last, holds 22: 8, 8, 6), plain SGD at lr 0.1:
    the engine and its weights after each step."""
    config = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=118, micro_batch_size=8,
                       accum_steps=4, reduction=reduction, max_steps=max_steps, device="cpu", eval_every=10**9,
                       optimizer="sgd", momentum=0.0, lr=0.1)
    engine = Engine(config)
    trail = _Trail(engine.model)
    engine.run(trail)
    return engine, trail.weights


def test_the_textbook_weighting_on_images_is_exact_until_a_partial_window():
    """mean_per_micro_batch on images: equal micro-batches make it the mean, until the epoch's partial last
    window (118 samples, windows of 32: the last holds 22), which it divides by k as the tutorials do."""
    textbook, weights = _trained("mean_per_micro_batch", 4)
    torch.testing.assert_close(weights[2], _trained("mean", 3)[1][2], rtol=0, atol=1e-7)
    # The textbook's 4th step by hand, from the weights after three: each micro-batch's mean loss over k = 4
    # (not over the 3 micro-batches the window holds), summed; then plain SGD.
    model = copy.deepcopy(textbook.model)
    vector_to_parameters(weights[2], model.parameters())
    x, y = textbook.data.train.batch(epoch_order(118, seed=textbook.config.seed, epoch=0)[96:118])
    loss = sum(F.cross_entropy(model(xs), ys) for xs, ys in zip(x.split(8), y.split(8))) / 4
    by_hand = weights[2] - 0.1 * parameters_to_vector(torch.autograd.grad(loss, list(model.parameters())))
    assert (by_hand - weights[2]).abs().max() > 1e-3  # the step moves weights by far more than the tolerance
    torch.testing.assert_close(weights[3], by_hand, rtol=0, atol=1e-6)


def test_a_window_is_made_when_asked_for_and_equals_the_epochs_plan():
    for n, b, k in [(110, 8, 4), (96, 8, 4), (7, 3, 5), (1, 1, 1)]:
        plan = plan_epoch(n, b, k)
        assert [window_at(n, b, k, i) for i in range(windows_per_epoch(n, b, k))] == plan
        with pytest.raises(IndexError):
            window_at(n, b, k, len(plan))
    huge = 10**12  # an epoch of a trillion samples: its last window, made alone
    last = window_at(huge, 8, 4, windows_per_epoch(huge, 8, 4) - 1)
    assert last.samples == (huge % 32 or 32) and last.micro_batches[-1].stop == huge
