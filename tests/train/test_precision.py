"""AMP through the engine: GradScaler scale, skipped steps and the schedule, on the CPU."""

import itertools
import math

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine


class ParamTrail:
    """Records each step's row and a copy of the weights after it."""

    def __init__(self, engine):
        self.engine, self.steps, self.weights = engine, [], []

    def log_step(self, row):
        self.steps.append(row)
        self.weights.append([p.detach().clone() for p in self.engine.model.parameters()])

    def log_eval(self, row):
        pass


def run(**fields):
    engine = Engine(RunConfig(device="cpu", model="mlp", **fields))
    before = [p.detach().clone() for p in engine.model.parameters()]
    trail = ParamTrail(engine)
    assert engine.run(trail) == "finished"
    return before, trail


def test_overflow_backs_off_the_scale_skips_without_touching_weights_then_trains():
    # A scale of 2**24 overflows fp16 gradients: the scaler must halve it until they fit.
    before, trail = run(amp="fp16", init_scale=2.0**24, max_steps=20, lr=0.05)
    rows = trail.steps
    assert rows[0]["skipped"] == 1 and rows[0]["scale"] == 2.0**24
    weights_before = [before] + trail.weights[:-1]
    for i, row in enumerate(rows):
        unchanged = all(torch.equal(p, q) for p, q in zip(trail.weights[i], weights_before[i]))
        assert unchanged == bool(row["skipped"])  # a skipped step leaves the weights alone
        if row["skipped"] and i + 1 < len(rows):
            assert rows[i + 1]["scale"] == row["scale"] / 2  # backoff_factor 0.5
    assert [r["skipped_total"] for r in rows] == list(itertools.accumulate(r["skipped"] for r in rows))
    taken = [r for r in rows if not r["skipped"]]
    assert len(taken) >= len(rows) // 2
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_scale_grows_after_growth_interval_clean_steps():
    _, trail = run(amp="fp16", init_scale=256.0, growth_interval=3, max_steps=7)
    scales = [r["scale"] for r in trail.steps]
    assert scales == [256.0, 256.0, 256.0, 512.0, 512.0, 512.0, 1024.0]


def test_scheduler_advances_once_per_taken_step_never_per_micro_batch_nor_on_skips():
    _, trail = run(amp="fp16", init_scale=2.0**24, max_steps=10, warmup_steps=20, lr=0.1, accum_steps=4)
    taken = 0
    for row in trail.steps:
        assert row["lr"] == pytest.approx(0.1 * (taken + 1) / 21)
        taken += 1 - row["skipped"]


def test_cosine_schedule_decays_towards_zero_over_the_planned_steps():
    _, trail = run(lr_schedule="cosine", max_steps=10, lr=0.1)
    lrs = [r["lr"] for r in trail.steps]
    assert lrs == pytest.approx([0.05 * (1 + math.cos(math.pi * t / 10)) for t in range(10)])
    assert lrs[5] == pytest.approx(0.05) and lrs[-1] < 0.003


def test_bf16_runs_without_a_scaler():
    _, trail = run(amp="bf16", max_steps=5)
    assert all(r["scale"] is None and r["skipped"] == 0 for r in trail.steps)
    assert trail.steps[-1]["loss"] < trail.steps[0]["loss"]


def test_fp16_unscaled_grad_norm_matches_fp32():
    _, fp32 = run(max_steps=1)
    _, fp16 = run(amp="fp16", init_scale=1024.0, max_steps=1)
    assert fp16.steps[0]["grad_norm"] == pytest.approx(fp32.steps[0]["grad_norm"], rel=2e-2)
    assert fp16.steps[0]["loss"] == pytest.approx(fp32.steps[0]["loss"], rel=1e-2)


def test_clipped_fp16_takes_the_clipped_fp32_step():
    """fp16 gradients are unscaled before clipping: clipped at the scale of 1024 they would move 1024x less."""
    before, fp32 = run(max_steps=2, lr=0.5, grad_clip=0.1)
    _, fp16 = run(amp="fp16", init_scale=1024.0, max_steps=2, lr=0.5, grad_clip=0.1)
    assert min(r["grad_norm"] for r in fp32.steps) > 0.3  # the clip bites on both steps
    assert not any(r["skipped"] for r in fp16.steps)
    for got, want in zip(fp16.steps, fp32.steps):
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=2e-3)  # measured: 2e-4 apart
    moved = max((p - q).abs().max().item() for p, q in zip(fp32.weights[-1], before))
    assert moved > 5e-3  # the two steps move weights by far more than the tolerance below
    # Measured: fp16 autocast's rounding leaves the weights at most 1.3e-4 from fp32's after two steps.
    for got, want in zip(fp16.weights[-1], fp32.weights[-1]):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=0)
