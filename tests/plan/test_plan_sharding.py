"""make_plan across sharding modes with a fake memory model in place of the engine: the sharded modes are
counted per rank from the same single-process probes (never probed twice, never timed), the mode that fits the
largest micro-batch per rank wins (ties: the fewest collectives), and the sentence says why."""

from __future__ import annotations

import dataclasses

import pytest

import gaccum_core.plan.planner as planner
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.plan.planner import PlanRequest, config_from_plan, make_plan
from gaccum_core.plan.search import FITS, OVER_BUDGET, UNAVAILABLE, Candidate, Options, divisors
from gaccum_core.plan.sharding import MB, Layout, ParamShape, per_rank

BASE = RunConfig(model="cnn", dataset="fake", image_size=32, fake_samples=1024, device="cpu",
                 micro_batch_size=1, accum_steps=1)
# Four blocks of 1 MB of fp32 weights each (512 rows): weights, gradients and SGD's momentum 4 MB each whole.
SHAPE = Layout(tuple(ParamShape(1 << 18, 512, 4, unit) for unit in range(4)), 0)
WHOLE_MB = SHAPE.param_bytes / MB
PER_SAMPLE_MB = 0.05


class FakeProbe:
    """One process's memory: fixed parts plus activations linear in b; every step at 1000 samples/s."""

    def __init__(self) -> None:
        self.measured: list[tuple[Options, int]] = []
        self.timed: list[Options] = []

    def measure(self, base: RunConfig, options: Options, b: int, effective_batch: int, budget_mb: float) -> Candidate:
        self.measured.append((options, b))
        parts = {"weights_mb": WHOLE_MB, "gradients_mb": WHOLE_MB, "optimizer_mb": WHOLE_MB,
                 "activations_mb": PER_SAMPLE_MB * b}
        peak = sum(parts.values())
        return Candidate(options, b, effective_batch // b, FITS if peak <= budget_mb else OVER_BUDGET, peak,
                         detail={**parts, "counted_mb": peak})

    def time_speeds(self, base, candidates, effective_batch, timing, on_step) -> list[Candidate]:
        self.timed += [c.options for c in candidates]
        return [dataclasses.replace(c, samples_per_s=1000.0, samples_per_s_error=0.0, timed_steps=3,
                                    step_time_s=effective_batch / 1000.0) for c in candidates]


@pytest.fixture
def probe(monkeypatch):
    fake = FakeProbe()
    monkeypatch.setattr(planner, "measure", fake.measure)
    monkeypatch.setattr(planner, "time_speeds", fake.time_speeds)
    monkeypatch.setattr(planner, "layout", lambda model: SHAPE)
    return fake


def request(budget_mb: float, **changes) -> PlanRequest:
    values = dict(base=BASE, effective_batch=256, budget_mb=budget_mb, sharding=("ddp", "fsdp/every", "fsdp/last"),
                  world_size=2)
    return PlanRequest(**{**values, **changes})


def oracle(mode: str, limit_mb: float, per_rank_batch: int = 128) -> int | None:
    """The largest b dividing E / N whose per-rank count is within the limit, every divisor counted."""
    fitting = [b for b in divisors(per_rank_batch)
               if per_rank({"weights_mb": WHOLE_MB, "gradients_mb": WHOLE_MB, "optimizer_mb": WHOLE_MB,
                            "activations_mb": PER_SAMPLE_MB * b}, SHAPE, mode, 2, per_rank_batch // b)["counted_mb"]
               <= limit_mb]
    return max(fitting, default=None)


def test_sharding_that_fits_a_larger_micro_batch_per_rank_wins_and_the_sentence_says_why(probe):
    plan = make_plan(request(13.6))
    safe = 0.9 * 13.6
    assert (oracle("ddp", safe), oracle("fsdp/every", safe), oracle("fsdp/last", safe)) == (4, 64, 32)
    choice = plan.recommended
    assert (choice.options, choice.micro_batch_size, choice.accum_steps) == (Options(sharding="fsdp/every"), 64, 2)
    assert plan.largest_fitting() == {"fp32": oracle("ddp", 13.6), "fp32 + fsdp/every": oracle("fsdp/every", 13.6),
                                      "fp32 + fsdp/last": oracle("fsdp/last", 13.6)}
    assert plan.reason.startswith("fp32 + fsdp/every at b=64, k=2 fits the largest micro-batch per rank with a "
                                  "10% margin (")
    for words in ("weights, gradients and optimizer state 1/2 per rank", "ddp fits b=4 (weights, gradients and "
                  "optimizer state whole on each rank)", "fsdp/last fits b=32 (", "whole fp32 gradient kept between "
                  "micro-batches, +2 MB at b=64", "counted, not timed"):
        assert words in plan.reason
    # The sharded modes are counted from the ddp probes: each (b) probed once, in one process, and only ddp timed.
    assert len(probe.measured) == len(set(probe.measured)) and {o for o, _ in probe.measured} == {Options()}
    assert set(probe.timed) == {Options()}
    sizes = {o: sorted(c.micro_batch_size for c in plan.candidates if c.options == o) for o in plan.request.options}
    assert len(set(map(tuple, sizes.values()))) == 1  # every mode has a row at every size probed
    config = config_from_plan(BASE, plan)
    assert (config.sharding, config.fsdp_sync, config.nproc, config.micro_batch_size, config.accum_steps) == \
        ("fsdp", "every", 2, 64, 2)
    assert config.effective_batch_size == 256


def test_modes_that_fit_the_same_micro_batch_go_to_the_fewest_collectives(probe):
    plan = make_plan(request(100.0))  # everything fits b = E / N = 128, k = 1
    assert plan.recommended.options == Options() and plan.recommended.micro_batch_size == 128
    assert "ddp fits b=128 per rank, as large as a sharded mode, with the fewest collectives" in plan.reason
    assert "fsdp/last fits b=128 too, with more collectives" in plan.reason
    last_only = make_plan(request(100.0, sharding=("fsdp/every", "fsdp/last")))
    assert last_only.recommended.options == Options(sharding="fsdp/last")  # k = 1: as little memory as every
    assert config_from_plan(BASE, last_only).fsdp_sync == "last"


def test_ddp_alone_keeps_the_plan_as_it_was(probe):
    plan = make_plan(request(13.6, sharding=("ddp",)))
    assert plan.recommended.options == Options() and "fsdp" not in plan.reason and "per rank" not in plan.reason
    assert "sharded" not in plan.memory_words()
    assert "counted per rank" in make_plan(request(13.6)).memory_words()


def test_a_compiled_sharded_mode_is_unavailable_and_nothing_fitting_is_said(probe, monkeypatch):
    monkeypatch.setattr(planner, "option_unavailable", lambda device, amp, compile_mode: None)  # this device could
    plan = make_plan(request(100.0, compile=("default",), sharding=("fsdp/every",)))
    assert [c.status for c in plan.candidates] == [UNAVAILABLE] and plan.recommended is None
    assert "does not compile sharded models" in plan.reason
    nothing = make_plan(request(1.0))
    assert nothing.recommended is None and nothing.reason.startswith("Nothing fits in 1 MB")


@pytest.mark.parametrize("changes, field", [
    (dict(world_size=1), "sharding"),
    (dict(sharding=("fsdp/sometimes",)), "sharding"),
    (dict(sharding=("ddp", "ddp")), "sharding"),
    (dict(world_size=3), "effective_batch"),
    (dict(world_size=0), "nproc"),
])
def test_bad_sharding_requests_are_refused_naming_the_field(changes, field):
    with pytest.raises(ConfigError) as refused:
        request(10.0, **changes)
    assert refused.value.field == field
