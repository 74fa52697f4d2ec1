"""The equivalence check: accumulation matches the big batch where it should, and says why where not."""

import pytest
import torch
from torch import nn

import gaccum_core.models.vision
from gaccum_core.config import RunConfig
from gaccum_core.lab.equivalence import (COLUMNS, SIDE_BY_SIDE_COLUMNS, ReferenceTooLarge, compare_gradients,
                                     largest_fitting_effective_batch, train_side_by_side)


def config(**fields):
    return RunConfig(**{"device": "cpu", "micro_batch_size": 8, "accum_steps": 4, **fields})


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mlp_fp32_accumulated_gradient_equals_the_big_batch(reduction):
    report = compare_gradients(config(model="mlp", reduction=reduction))
    table = report.table
    assert list(table.columns) == COLUMNS
    assert table["name"].tolist() == ["1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
    assert table.loc[0, "shape"] == "64×64" and table.loc[0, "numel"] == 4096
    assert report.equal
    assert (table["rel_l2"] < 1e-5).all() and (table["cosine"] > 0.99999).all()
    assert report.verdict.startswith("equal up to float rounding")


def test_batchnorm_makes_micro_batches_differ_and_the_verdict_names_its_layers():
    report = compare_gradients(config(model="cnn_bn", micro_batch_size=2, accum_steps=8))
    assert not report.equal
    assert (report.table["rel_l2"] > 1e-3).any()
    # cnn_bn on 8×8 digits: conv 0, BatchNorm2d 1, relu, conv 3, BatchNorm2d 4, ...
    assert "BatchNorm layers '1', '4'" in report.verdict
    assert "micro-batch of 2" in report.verdict and "batch of 16" in report.verdict


def _mlp_with_dropout(p):
    def build(name, input_shape, num_classes, image_size=0):
        channels, height, width = input_shape
        return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.ReLU(),
                             nn.Dropout(p), nn.Linear(32, num_classes))
    return build


def test_active_dropout_is_blamed(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.vision, "build_model", _mlp_with_dropout(0.5))
    report = compare_gradients(config())
    assert not report.equal
    assert "dropout layers '3'" in report.verdict and "BatchNorm" not in report.verdict


def test_dropout_with_p_zero_changes_nothing(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.vision, "build_model", _mlp_with_dropout(0.0))
    assert compare_gradients(config()).equal


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_reduced_precision_rounds_a_little_and_counts_as_equal(amp):
    report = compare_gradients(config(amp=amp))
    worst = report.table["rel_l2"].max()
    assert 1e-5 < worst < 2e-2  # visible rounding, far below a real difference
    assert report.equal
    assert "equal up to float rounding" in report.verdict and f"{amp} tolerance" in report.verdict


def test_fp16_overflow_of_the_scaled_loss_is_reported_and_backed_off():
    # A summed loss scaled by 65536 overflows fp16 gradients; the GradScaler would halve the scale.
    report = compare_gradients(config(amp="fp16", reduction="sum"))
    assert "overflowed to inf/NaN at loss scale 65536" in report.verdict
    assert "compared at loss scale" in report.verdict
    assert report.equal


def test_mlp_fp32_trains_the_same_either_way():
    frame = train_side_by_side(config(), 10)
    assert list(frame.columns) == SIDE_BY_SIDE_COLUMNS and frame["step"].tolist() == list(range(1, 11))
    assert (frame["weight_distance"] < 1e-5).all()
    assert frame["loss_accum"].tolist() == pytest.approx(frame["loss_big"].tolist(), rel=1e-5)
    assert frame["loss_big"].iloc[-1] < frame["loss_big"].iloc[0]


def test_side_by_side_runs_into_the_next_epoch_through_a_partial_window():
    # digits: 1437 samples = 44 windows of 32 and a last window of 29 (8, 8, 8, 5); step 46 is epoch 1.
    frame = train_side_by_side(config(), 46)
    assert (frame["weight_distance"] < 1e-5).all()
    assert frame["loss_accum"].tolist() == pytest.approx(frame["loss_big"].tolist(), rel=1e-5)


def test_batchnorm_training_drifts_apart():
    frame = train_side_by_side(config(model="cnn_bn", micro_batch_size=2, accum_steps=8), 3)
    assert frame["weight_distance"].iloc[-1] > 1e-4
    assert frame["weight_distance"].iloc[-1] > frame["weight_distance"].iloc[0]


def test_side_by_side_needs_a_step():
    with pytest.raises(ValueError, match="steps=0"):
        train_side_by_side(config(), 0)


def _out_of_memory_above(limit, error):
    """A model builder whose models fail like an allocator does on batches over `limit` samples."""
    real = gaccum_core.models.vision.build_model

    class Limited(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            if x.shape[0] > limit:
                raise error
            return self.net(x)

    return lambda *args, **kwargs: Limited(real(*args, **kwargs))


CUDA_OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
CPU_OOM = RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory")


@pytest.mark.parametrize("error", [CUDA_OOM, CPU_OOM], ids=["cuda", "cpu"])
def test_a_reference_too_large_names_the_largest_that_fits(monkeypatch, error):
    monkeypatch.setattr(gaccum_core.models.vision, "build_model", _out_of_memory_above(20, error))
    cfg = config(micro_batch_size=8, accum_steps=8)  # tries 64, 32, then 16 fits
    assert largest_fitting_effective_batch(cfg) == 16
    with pytest.raises(ReferenceTooLarge) as raised:
        compare_gradients(cfg)
    assert (raised.value.effective_batch, raised.value.largest_fitting) == (64, 16)
    assert "64 samples" in str(raised.value) and "largest that fits is 16 (accum_steps=2)" in str(raised.value)
    with pytest.raises(ReferenceTooLarge, match="largest that fits is 16"):
        train_side_by_side(cfg, 2)


def test_when_not_even_a_micro_batch_fits_the_message_says_so(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.vision, "build_model", _out_of_memory_above(4, CUDA_OOM))
    with pytest.raises(ReferenceTooLarge, match="not even one micro-batch fits") as raised:
        compare_gradients(config())
    assert raised.value.largest_fitting == 0
    assert largest_fitting_effective_batch(config()) == 0


def test_other_errors_are_not_mistaken_for_out_of_memory(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.vision, "build_model", _out_of_memory_above(20, RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        compare_gradients(config(micro_batch_size=8, accum_steps=8))
