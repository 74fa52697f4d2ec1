"""The planner's measurements on the real engine (CPU, tiny models): truthful memory figures (the short
probe window counts what a whole window does), speeds timed in turns, out of memory as a result, and
make_plan end to end; PlanRequest's validation."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

import gaccum_core.train.engine
import gaccum_core.train.weighting
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.train.memory import MB, SavedBytesPeak
from gaccum_core.models.vision import build_model
from gaccum_core.plan.planner import PlanRequest, make_plan
from gaccum_core.plan.search import FITS, OUT_OF_MEMORY, OVER_BUDGET, Options
from gaccum_core.train.precision import Precision
from gaccum_core.plan.probe import _memory_window, burst_config, measure, time_speeds
from gaccum_core.plan.speed import Timing
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.train.step import accumulate

FP32 = Options()
BIG_BUDGET = 10_000.0


def cnn(**fields) -> RunConfig:
    values = dict(model="cnn", dataset="fake", image_size=16, fake_samples=256, device="cpu",
                  micro_batch_size=1, accum_steps=1)
    return RunConfig(**{**values, **fields})


# The built-in cnn on 3×16×16 images, 10 classes, counted by hand from models._conv_net:
# conv 3→16 (3×3) + bias, conv 16→32 (3×3) + bias, linear 32·4·4 → 10 + bias.
CNN_PARAMS = (3 * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (32 * 16 * 10 + 10)
CNN_PARAM_TENSORS = 6


def test_accumulating_k_micro_batches_costs_no_memory_beyond_one():
    """(b=8, k=4) against (b=8, k=1): the same counted peak, the same activations (one window's
    micro-batches never hold their graphs at once)."""
    base = cnn()
    one = measure(base, FP32, 8, 8, BIG_BUDGET)
    four = measure(base, FP32, 8, 32, BIG_BUDGET)
    assert one.status == four.status == FITS
    assert (one.accum_steps, four.accum_steps) == (1, 4)
    assert four.peak_mb == pytest.approx(one.peak_mb, rel=0.02)
    assert four.detail["activations_mb"] == pytest.approx(one.detail["activations_mb"], rel=0.02)
    assert four.peak_mb == pytest.approx(four.detail["counted_mb"])  # the CPU: the counted figure decides
    assert four.detail["cuda_peak_mb"] is None and four.detail["cuda_reserved_mb"] is None
    parts = ("weights_mb", "gradients_mb", "optimizer_mb", "activations_mb")
    assert four.detail["counted_mb"] == pytest.approx(sum(four.detail[p] for p in parts))
    assert four.samples_per_s is None  # memory only: time_speed times the sizes that matter


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_memory_probes_short_window_counts_what_a_whole_window_after_a_warm_up_counts(optimizer):
    """measure() runs one micro-batch and its step on the CPU; the figures are those of a full window of
    k = 8 micro-batches after a warm-up step (the way every candidate was measured before)."""
    base = cnn(optimizer=optimizer, lr=1e-3)
    probed = measure(base, FP32, 4, 32, BIG_BUDGET)
    engine = gaccum_core.train.engine.Engine(burst_config(base, FP32, 4, 32))
    rows = RowKeeper()
    engine.run(rows, steps=1, evaluate=False)  # the warm-up
    whole = _memory_window(engine, rows)
    assert engine.config.accum_steps == 8 and len(rows.steps) == 2
    for part in ("weights_mb", "gradients_mb", "optimizer_mb", "activations_mb", "counted_mb"):
        assert probed.detail[part] == pytest.approx(whole[part], rel=1e-6), part
    assert probed.peak_mb == pytest.approx(whole["counted_mb"], rel=1e-6)


def test_time_speeds_times_full_windows_in_turns_until_each_speed_is_known_or_capped():
    base = cnn(model="mlp")
    small, large = (measure(base, FP32, b, 32, BIG_BUDGET) for b in (8, 16))
    reports = []
    timed = time_speeds(base, [large, small], 32, Timing(cap_s=0.05, max_steps=4),
                        lambda i, c, finished: reports.append((i, c.timed_steps)))
    for before, after in zip([large, small], timed):
        assert after.status == FITS and after.peak_mb == before.peak_mb and after.detail == before.detail
        assert (after.micro_batch_size, after.accum_steps) == (before.micro_batch_size, before.accum_steps)
        assert 2 <= after.timed_steps <= 4 and after.samples_per_s > 0 and after.step_time_s > 0
        assert math.isfinite(after.samples_per_s_error) and after.samples_per_s_error >= 0
    assert reports[:4] == [(0, 1), (1, 1), (1, 2), (0, 2)]  # one step each, in turns, the second first in turn 1
    assert len(reports) == sum(c.timed_steps for c in timed)
    for after in timed:  # each step's speed by its turn, and the group they were timed in (the ranking pairs them)
        assert sorted(after.turn_speeds) == list(range(after.timed_steps)) and after.timed_with == 0
    (once,) = time_speeds(base, [small], 32, Timing(max_steps=1))
    assert once.timed_steps == 1 and once.samples_per_s_error == math.inf
    assert json.loads(json.dumps(once.row(), allow_nan=False))["samples_per_s_error"] is None


def test_activations_grow_linearly_with_the_micro_batch():
    base = cnn()
    small = measure(base, FP32, 8, 32, BIG_BUDGET)
    large = measure(base, FP32, 32, 32, BIG_BUDGET)
    ratio = large.detail["activations_mb"] / small.detail["activations_mb"]
    assert 3.5 <= ratio <= 4.5, ratio
    assert large.detail["weights_mb"] == small.detail["weights_mb"]


def _micro_batches(k: int, b: int = 8, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, 3, 16, 16, generator=generator), torch.randint(0, 10, (b,), generator=generator))
            for _ in range(k)]


def _summed_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y, reduction="sum")


def test_saved_bytes_peak_sees_a_loop_that_keeps_every_graph_alive():
    """The meter is not a formula: summing k losses before one backward holds k graphs at once (k× the
    peak), while the project's accumulate (one backward per micro-batch) holds one (1×)."""
    torch.manual_seed(0)
    model = build_model("cnn", (3, 16, 16), 10, 16)
    params = list(model.parameters())
    k = 4
    batches = _micro_batches(k)

    single = SavedBytesPeak(params)
    with single.measure():
        _summed_loss(model, batches[0]).backward()
    model.zero_grad(set_to_none=True)
    assert single.peak > 0 and single.current == 0  # everything saved was released by the backward

    kept = SavedBytesPeak(params)
    with kept.measure():
        total = sum(_summed_loss(model, batch) for batch in batches)
        total.backward()
    model.zero_grad(set_to_none=True)
    assert kept.peak > 3 * single.peak
    assert kept.peak == pytest.approx(k * single.peak, rel=0.05)

    accumulated = SavedBytesPeak(params)
    with accumulated.measure():
        losses = accumulate(Precision("off", torch.device("cpu")), batches, lambda b: _summed_loss(model, b),
                            divisor=k * 8)
    assert len(losses) == k
    assert accumulated.peak == pytest.approx(single.peak, rel=0.05)
    assert accumulated.current == 0


def test_weights_gradients_and_optimizer_state_equal_hand_counts():
    params_bytes = CNN_PARAMS * 4  # fp32
    model = build_model("cnn", (3, 16, 16), 10, 16)
    assert sum(p.numel() for p in model.parameters()) == CNN_PARAMS  # the hand count matches the model
    assert len(list(model.parameters())) == CNN_PARAM_TENSORS and not list(model.buffers())

    sgd = measure(cnn(optimizer="sgd", momentum=0.9), FP32, 8, 8, BIG_BUDGET).detail
    assert sgd["weights_mb"] * MB == params_bytes
    assert sgd["gradients_mb"] * MB == params_bytes
    assert sgd["optimizer_mb"] * MB == params_bytes  # one momentum buffer per parameter

    adamw = measure(cnn(optimizer="adamw", lr=1e-3), FP32, 8, 8, BIG_BUDGET).detail
    assert adamw["weights_mb"] * MB == params_bytes and adamw["gradients_mb"] * MB == params_bytes
    extra = adamw["optimizer_mb"] * MB - 2 * params_bytes  # exp_avg and exp_avg_sq, plus a step counter each
    assert 0 <= extra <= 8 * CNN_PARAM_TENSORS


def test_buffers_count_as_weights_but_have_no_gradients():
    """cnn_bn: BatchNorm's running mean and variance (fp32) and num_batches_tracked (int64) are weights."""
    bn_params = CNN_PARAMS + 2 * (16 + 32)  # each BatchNorm's weight and bias
    buffers = 2 * (16 + 32) * 4 + 2 * 8
    detail = measure(cnn(model="cnn_bn"), FP32, 8, 8, BIG_BUDGET).detail
    assert detail["weights_mb"] * MB == bn_params * 4 + buffers
    assert detail["gradients_mb"] * MB == bn_params * 4
    assert detail["optimizer_mb"] * MB == bn_params * 4


def test_batchnorm_on_one_sample_is_a_failure_where_a_larger_size_may_work():
    """resnet18 on 32×32 images reaches 1×1 feature maps: its BatchNorm cannot train on one sample
    (cnn_bn can: its BatchNorm2d normalises over H·W values even for one sample)."""
    base = cnn(model="resnet18", image_size=32, fake_samples=64)
    one = measure(base, FP32, 1, 2, BIG_BUDGET)
    assert one.status == "failed" and one.detail["larger_may_work"] is True
    assert one.detail["message"].startswith("ConfigError: micro_batch_size=1")
    two = measure(base, FP32, 2, 2, BIG_BUDGET)
    assert two.status == FITS and two.peak_mb > 0


def test_an_error_that_is_not_about_memory_is_a_failure_that_stops(monkeypatch):
    def broken(forward, precision, x, y):
        raise ZeroDivisionError("something else went wrong")

    monkeypatch.setattr(gaccum_core.train.weighting, "summed_cross_entropy", broken)
    candidate = measure(cnn(model="mlp"), FP32, 4, 8, BIG_BUDGET)
    assert candidate.status == "failed" and candidate.detail["larger_may_work"] is False
    assert candidate.detail["message"] == "ZeroDivisionError: something else went wrong"


def test_a_candidate_over_the_budget_is_measured_but_not_timed():
    candidate = measure(cnn(), FP32, 8, 8, 0.01)
    assert candidate.status == OVER_BUDGET and candidate.peak_mb > 0.01
    assert candidate.samples_per_s is None and candidate.detail["activations_mb"] > 0


OUT_OF_MEMORY_ERRORS = {
    "cuda": lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    "cpu": lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
                                "can't allocate memory: you tried to allocate 2147483648 bytes."),
}


@pytest.fixture(params=sorted(OUT_OF_MEMORY_ERRORS))
def out_of_memory_from_16(request, monkeypatch):
    """The engine's loss raises an out-of-memory error for micro-batches of 16 samples or more."""
    real = gaccum_core.train.weighting.summed_cross_entropy
    calls = []

    def loss(forward, precision, x, y):
        calls.append(x.shape[0])
        if x.shape[0] >= 16:
            raise OUT_OF_MEMORY_ERRORS[request.param]()
        return real(forward, precision, x, y)

    monkeypatch.setattr(gaccum_core.train.weighting, "summed_cross_entropy", loss)
    return calls


def test_out_of_memory_is_a_status_and_the_next_candidate_measures_normally(out_of_memory_from_16):
    base = cnn(model="mlp")
    failed = measure(base, FP32, 16, 32, BIG_BUDGET)
    assert failed.status == OUT_OF_MEMORY and failed.peak_mb is None and failed.samples_per_s is None
    assert failed.detail["message"].split(":")[0] in ("OutOfMemoryError", "RuntimeError")
    after = measure(base, FP32, 8, 32, BIG_BUDGET)
    assert after.status == FITS and after.peak_mb > 0
    refused, timed = time_speeds(base, [dataclasses.replace(after, micro_batch_size=16, accum_steps=2), after], 32,
                                 Timing(max_steps=2))
    assert refused.status == OUT_OF_MEMORY and refused.samples_per_s is None and refused.peak_mb == after.peak_mb
    assert timed.status == FITS and timed.samples_per_s > 0 and timed.timed_steps == 2  # the other goes on


def test_make_plan_finds_the_largest_size_below_an_out_of_memory_error(out_of_memory_from_16):
    plan = make_plan(PlanRequest(cnn(model="mlp"), 64, BIG_BUDGET, timed_steps=2))
    statuses = {c.micro_batch_size: c.status for c in plan.candidates}
    assert statuses[16] == OUT_OF_MEMORY and 32 not in statuses  # no size above the first failure
    assert statuses[8] == FITS and all(status == FITS for b, status in statuses.items() if b < 16)
    assert plan.largest_fitting() == {"fp32": 8}
    assert plan.recommended is not None and plan.recommended.micro_batch_size <= 8
    assert plan.recommended.micro_batch_size * plan.recommended.accum_steps == 64


def test_make_plan_recommends_a_fitting_candidate_within_the_margin():
    base = cnn()
    # A budget between the peaks of b=16 and b=32, measured on this machine: the largest sizes do not fit.
    p16, p32 = (measure(base, FP32, b, 32, BIG_BUDGET).peak_mb for b in (16, 32))
    assert p16 < p32
    budget = (p16 + p32) / 2
    calls = []
    plan = make_plan(PlanRequest(base, 32, budget, timed_steps=3), lambda *args: calls.append(args))

    sizes = [c.micro_batch_size for c in plan.candidates]
    assert len(sizes) == len(set(sizes)) < 6 and {16, 32} <= set(sizes)  # not every divisor of 32
    statuses = {c.micro_batch_size: c.status for c in plan.candidates}
    assert statuses[32] == OVER_BUDGET and plan.largest_fitting() == {"fp32": 16}
    choice = plan.recommended
    assert choice is not None and choice in plan.candidates and choice.fits
    assert choice.peak_mb <= 0.9 * budget and choice.timed_steps is not None
    timed = [c for c in plan.candidates if c.timed_steps is not None]
    assert 1 <= len(timed) <= 2 and all(c.peak_mb <= 0.9 * budget for c in timed)
    assert plan.reason.startswith(f"fp32 at b={choice.micro_batch_size}, k={choice.accum_steps}")

    steps = sum(c.timed_steps for c in timed)
    assert len(calls) == len(plan.candidates) + steps  # once per memory probe and per timed step
    done = [c[0] for c in calls]
    assert done == list(range(1, len(calls) + 1)) and all(d <= about for d, about, _, _ in calls)
    last = {(c[2].micro_batch_size, c[2].timed_steps) for c in calls}
    assert last >= {(c.micro_batch_size, c.timed_steps) for c in plan.candidates}  # each probe, each step
    seconds = [c[3] for c in calls]
    assert seconds == sorted(seconds) and seconds[-1] <= plan.seconds

    data = json.loads(json.dumps(plan.to_dict(), allow_nan=False))
    assert data["micro_batch_size"] * data["accum_steps"] == 32 == data["effective_batch"]
    assert data["micro_batch_size"] == choice.micro_batch_size
    assert data["options"] == {"amp": "off", "clear_cache": "off", "compile": "off", "sharding": "ddp",
                               "activation_checkpointing": "off"}
    assert data["memory_source"] == "counted" and data["device"] == "cpu"
    assert data["memory_budget_mb"] == budget and len(data["rows"]) == len(plan.candidates)
    assert data["largest_fitting"] == {"fp32": 16}
    assert all(" ± " in r["speed"] for r in data["rows"] if r["timed_steps"] and r["timed_steps"] > 1)


def test_make_plan_caps_the_micro_batch_at_the_data_set():
    base = cnn(model="mlp", fake_samples=20)  # 20 training samples, E = 64
    plan = make_plan(PlanRequest(base, 64, BIG_BUDGET))
    assert max(c.micro_batch_size for c in plan.candidates) <= 20
    assert plan.largest_fitting() == {"fp32": 16}


@pytest.mark.parametrize("changes,field", [
    ({"effective_batch": 0}, "effective_batch"),
    ({"effective_batch": -4}, "effective_batch"),
    ({"effective_batch": 2**20 + 1}, "effective_batch"),
    ({"effective_batch": 32.0}, "effective_batch"),
    ({"effective_batch": True}, "effective_batch"),
    ({"budget_mb": True}, "memory_budget_mb"),
    ({"effective_batch": "32"}, "effective_batch"),
    ({"budget_mb": 0}, "memory_budget_mb"),
    ({"budget_mb": -1.0}, "memory_budget_mb"),
    ({"budget_mb": math.nan}, "memory_budget_mb"),
    ({"budget_mb": math.inf}, "memory_budget_mb"),
    ({"budget_mb": "64"}, "memory_budget_mb"),
    ({"amp": ("fp8",)}, "amp"),
    ({"amp": ()}, "amp"),
    ({"amp": ("off", "off")}, "amp"),
    ({"clear_cache": ("sometimes",)}, "clear_cache"),
    ({"compile": ("fast",)}, "compile"),
    ({"timed_steps": 0}, "timed_steps"),
    ({"timed_steps": 101}, "timed_steps"),
    ({"timed_steps": 2.5}, "timed_steps"),
    ({"time_cap_s": 0}, "time_cap_s"),
    ({"time_cap_s": math.nan}, "time_cap_s"),
    ({"time_cap_s": 601.0}, "time_cap_s"),
    ({"precision": 0.0}, "precision"),
    ({"precision": 1.0}, "precision"),
    ({"precision": "5%"}, "precision"),
    ({"margin": -0.1}, "margin"),
    ({"margin": 1.0}, "margin"),
])
def test_plan_request_names_the_bad_field(changes, field):
    values = {"base": cnn(), "effective_batch": 32, "budget_mb": 64.0, **changes}
    with pytest.raises(ConfigError) as caught:
        PlanRequest(**values)
    assert caught.value.field == field


def test_a_valid_plan_request_crosses_its_options_plain_first():
    request = PlanRequest(cnn(), 32, 64.0, amp=("off", "bf16"), clear_cache=("off", "step"), margin=0.0)
    assert request.options[0] == FP32 and len(request.options) == 4
