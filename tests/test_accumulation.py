"""The accumulation contract on its own: windows, weights and sample order."""

import pytest
import torch

from gaccum_core.accumulation import epoch_order, plan_epoch, planned_steps, windows_per_epoch


@pytest.mark.parametrize("b,k", [(32, 1), (8, 4), (1, 32), (5, 3), (7, 7)])
def test_windows_hold_the_samples_of_one_big_batch(b, k):
    n = 110
    windows = plan_epoch(n, b, k, "mean")
    big = plan_epoch(n, b * k, 1, "mean")
    assert [(w.micro_batches[0].start, w.micro_batches[-1].stop) for w in windows] == \
           [(w.micro_batches[0].start, w.micro_batches[-1].stop) for w in big]
    for window in windows:
        assert len(window.micro_batches) <= k
        assert window.micro_batches[-1].ends_window
        assert not any(m.ends_window for m in window.micro_batches[:-1])
        assert all(m.size == b for m in window.micro_batches[:-1])


def test_partial_last_window_has_a_short_last_micro_batch_and_is_weighted_by_its_own_size():
    windows = plan_epoch(110, 8, 4, "mean")
    assert len(windows) == 4 == windows_per_epoch(110, 8, 4)
    last = windows[-1]
    assert [m.size for m in last.micro_batches] == [8, 6]
    assert last.samples == 14
    # Each micro-batch's summed loss is divided by the window's samples: weights sum to one.
    assert sum(m.size / m.weight_divisor for m in last.micro_batches) == pytest.approx(1.0)
    assert all(m.weight_divisor == 32 for w in windows[:-1] for m in w.micro_batches)


def test_sum_reduction_never_divides():
    assert {m.weight_divisor for w in plan_epoch(50, 4, 3, "sum") for m in w.micro_batches} == {1}


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
