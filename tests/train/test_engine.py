"""The engine against its oracle: accumulated runs equal the one-big-batch run on the same samples."""


import pytest
import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper, STEP_COLUMNS


def train(**fields):
    """Run one engine on the CPU and return (engine, sink)."""
    engine = Engine(RunConfig(device="cpu", **fields))
    sink = RowKeeper()
    assert engine.run(sink) == "finished"
    return engine, sink


def params(engine):
    return [p.detach().clone() for p in engine.model.parameters()]


SHAPES = [(32, 1), (8, 4), (1, 32)]


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adam", 1e-3)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_accumulated_epoch_equals_big_batch_epoch(optimizer, lr, reduction):
    # digits has 1437 training samples: 44 full windows of 32 and a partial last window of 29,
    # whose last micro-batch is short for b=8 (8, 8, 8, 5).
    if reduction == "sum":
        lr = lr / 32  # the sum loss is 32x the mean; keep training stable
    runs = [train(model="mlp", micro_batch_size=b, accum_steps=k, reduction=reduction,
                  optimizer=optimizer, lr=lr, seed=7) for b, k in SHAPES]
    reference, ref_sink = runs[0]
    for engine, sink in runs[1:]:
        assert len(sink.steps) == len(ref_sink.steps) == 45
        assert sink.steps[-1]["samples"] == 29
        for got, want in zip(params(engine), params(reference)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        losses = [r["loss"] for r in sink.steps]
        assert losses == pytest.approx([r["loss"] for r in ref_sink.steps], rel=1e-4)


def test_training_actually_moves_the_weights_and_learns():
    engine, sink = train(model="mlp", epochs=3, lr=0.1)
    assert sink.steps[-1]["loss"] < 0.5 * sink.steps[0]["loss"]
    assert sink.evals[-1]["test_accuracy"] > 0.8


def test_same_seed_same_initial_weights_and_other_seed_differs():
    a, b, c = (Engine(RunConfig(device="cpu", model="cnn", seed=s)) for s in (1, 1, 2))
    for pa, pb in zip(params(a), params(b)):
        assert torch.equal(pa, pb)
    assert not all(torch.equal(pa, pc) for pa, pc in zip(params(a), params(c)))


def test_one_optimizer_step_per_window_including_the_partial_last_one():
    _, sink = train(model="mlp", micro_batch_size=100, accum_steps=3, epochs=2)
    # 1437 samples / 300 = 4 full windows + 1 partial (237 = 2 full micro-batches + 37) per epoch.
    assert [r["micro_batches"] for r in sink.steps] == [3, 3, 3, 3, 3] * 2
    assert [r["samples"] for r in sink.steps] == [300, 300, 300, 300, 237] * 2
    assert [r["step"] for r in sink.steps] == list(range(1, 11))
    assert sink.steps[-1]["samples_seen"] == 2 * 1437


def test_max_steps_caps_the_run_and_rows_have_every_column():
    _, sink = train(model="mlp", max_steps=3, eval_every=2)
    assert len(sink.steps) == 3
    assert set(sink.steps[0]) == set(STEP_COLUMNS)
    assert [e["step"] for e in sink.evals] == [2, 3]
    row = sink.steps[-1]
    assert row["scale"] is None and row["skipped"] == 0
    assert row["mem_peak_mb"] >= row["mem_allocated_mb"] > 0
    assert row["activation_mb"] > 0 and row["samples_per_s"] > 0 and row["grad_norm"] > 0


def test_activation_bytes_scale_with_micro_batch_size():
    _, small = train(model="cnn", micro_batch_size=8, max_steps=2)
    _, large = train(model="cnn", micro_batch_size=32, max_steps=2)
    ratio = large.steps[-1]["activation_mb"] / small.steps[-1]["activation_mb"]
    assert 3.0 < ratio <= 4.5


def test_micro_batch_larger_than_training_set_is_a_config_error():
    with pytest.raises(ConfigError, match="micro_batch_size.*at most 1437"):
        Engine(RunConfig(device="cpu", micro_batch_size=5000))


def test_stop_takes_effect_within_one_micro_batch():
    engine = Engine(RunConfig(device="cpu", model="mlp", micro_batch_size=4, accum_steps=8))
    calls = []

    def should_stop():
        calls.append(1)
        return len(calls) > 11  # stop during the second window

    sink = RowKeeper()
    assert engine.run(sink, should_stop) == "stopped"
    assert len(sink.steps) == 1
    assert all(p.grad is None for p in engine.model.parameters())


def test_grad_clip_limits_the_update_and_reports_the_unclipped_norm():
    _, free = train(model="mlp", max_steps=1, lr=0.5)
    _, clipped = train(model="mlp", max_steps=1, lr=0.5, grad_clip=1e-3)
    assert clipped.steps[0]["grad_norm"] == pytest.approx(free.steps[0]["grad_norm"], rel=1e-5)
    assert clipped.steps[0]["grad_norm"] > 1e-3


@pytest.mark.parametrize("mode", ["step", "micro"])
def test_clear_cache_records_its_cost(mode):
    _, sink = train(model="mlp", max_steps=2, clear_cache=mode)
    assert all(r["cache_clear_s"] > 0 for r in sink.steps)
    _, off = train(model="mlp", max_steps=2)
    assert all(r["cache_clear_s"] == 0 for r in off.steps)


def test_batchnorm_on_a_one_sample_micro_batch_is_explained():
    # resnet18 shrinks 8x8 digits to 1x1: with one sample, BatchNorm sees one value per channel.
    engine = Engine(RunConfig(device="cpu", model="resnet18", micro_batch_size=1, accum_steps=2, max_steps=1))
    with pytest.raises(ConfigError, match="BatchNorm"):
        engine.run(RowKeeper())
