"""make_plan with a fake memory model and fake noisy timings in place of the engine: how many sizes
it measures, which it times, that equal speeds give the same recommendation plan after plan, and the
progress it reports. The real engine's measurements are in test_probe.py."""

from __future__ import annotations

import dataclasses
import gc
import random

import pytest

import gaccum_core.plan.planner as planner
from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import PlanRequest, make_plan
from gaccum_core.plan.search import FITS, OVER_BUDGET, Candidate, Options, divisors
from gaccum_core.plan.speed import Speed, Timing, time_in_turns

BASE = RunConfig(model="cnn", dataset="fake", image_size=32, fake_samples=1024, device="cpu",
                 micro_batch_size=1, accum_steps=1)
# The default plan's counted memory on this machine (MB): fixed + per sample, by precision.
LINES = {"off": (0.12, 0.154), "bf16": (0.11, 0.093)}


class FakeEngine:
    """Stands in for probe.measure and probe.time_speed: linear memory per precision (cache clearing
    leaves it as it is) and steps at each setting's true speed with seeded ±noise, on a fake clock."""

    def __init__(self, seed: int, noise: float = 0.2, speeds: dict[str, float] | None = None) -> None:
        self.random, self.noise = random.Random(seed), noise
        self.speeds = speeds or {}  # options label -> samples/s (default 1000: every setting equally fast)
        self.measured: list[tuple[Options, int]] = []
        self.timed: list[tuple[Options, int]] = []

    def measure(self, base: RunConfig, options: Options, b: int, effective_batch: int, budget_mb: float) -> Candidate:
        self.measured.append((options, b))
        fixed, per_sample = LINES[options.amp]
        peak = fixed + per_sample * b
        return Candidate(options, b, effective_batch // b, FITS if peak <= budget_mb else OVER_BUDGET, peak)

    def time_speeds(self, base: RunConfig, candidates: list[Candidate], effective_batch: int, timing: Timing,
                    on_step) -> list[Candidate]:
        self.timed += [(c.options, c.micro_batch_size) for c in candidates]

        def steps(candidate: Candidate):
            true = self.speeds.get(candidate.options.label(), 1000.0)
            return lambda: {"samples": effective_batch,
                            "step_time_s": effective_batch / true * (1 + self.noise * self.random.uniform(-1, 1))}

        def timed(candidate: Candidate, speed: Speed) -> Candidate:
            return dataclasses.replace(candidate, samples_per_s=speed.value, samples_per_s_error=speed.error,
                                       timed_steps=speed.steps, step_time_s=effective_batch / speed.value)

        results = time_in_turns([steps(c) for c in candidates], timing,
                                lambda i, speed, finished: on_step(i, timed(candidates[i], speed), finished))
        return [timed(c, speed) for c, (speed, _) in zip(candidates, results)]


@pytest.fixture
def fake_engine(monkeypatch):
    def install(seed: int = 0, **kwargs) -> FakeEngine:
        engine = FakeEngine(seed, **kwargs)
        monkeypatch.setattr(planner, "measure", engine.measure)
        monkeypatch.setattr(planner, "time_speeds", engine.time_speeds)
        return engine
    return install


def default_like(**changes) -> PlanRequest:
    values = dict(base=BASE, effective_batch=256, budget_mb=32.0, amp=("off", "bf16"), clear_cache=("off", "step"))
    return PlanRequest(**{**values, **changes})


def test_the_planner_measures_a_few_sizes_around_the_budget_line_not_every_divisor(fake_engine):
    engine = fake_engine()
    plan = make_plan(default_like())
    every = len(plan.request.options) * len(divisors(256))  # 36: what doubling and bisection came close to
    assert len(engine.measured) == len(set(engine.measured)) == len(plan.candidates) <= 12 < every
    per_options = {o: [b for opts, b in engine.measured if opts == o] for o in plan.request.options}
    assert per_options[Options()] == [1, 64, 128, 256]  # the smallest, the line's guess, its answer, above it
    assert all(len(sizes) <= 4 for sizes in per_options.values())
    assert plan.largest_fitting() == {"fp32": 128, "fp32 + clear/step": 128, "bf16": 256, "bf16 + clear/step": 256}
    # Timed: the largest size within the margin per combination and the one below it.
    assert sorted(engine.timed, key=lambda t: (t[0].label(), -t[1])) == sorted(
        [(o, b) for o in plan.request.options for b in ((256, 128) if o.amp == "bf16" else (128, 64))],
        key=lambda t: (t[0].label(), -t[1]))
    assert all(c.samples_per_s is None for c in plan.candidates if (c.options, c.micro_batch_size) not in engine.timed)


def test_five_plans_with_noisy_equal_speeds_recommend_the_same_setting(fake_engine):
    """Every setting trains at 1000 samples/s, each step ±20% at random (a seed per plan): the speeds tie
    within their intervals, and the largest b among them wins, plan after plan."""
    picks = set()
    for seed in range(5):
        fake_engine(seed)
        plan = make_plan(default_like())
        picks.add((plan.recommended.options.label(), plan.recommended.micro_batch_size))
        assert "equally fast within the measurement's precision" in plan.reason
    assert picks == {("bf16", 256)}


def test_five_plans_recommend_a_setting_that_is_clearly_faster_every_time(fake_engine):
    picks = set()
    for seed in range(5):
        fake_engine(seed, speeds={"fp32": 3000.0})
        plan = make_plan(default_like())
        picks.add((plan.recommended.options.label(), plan.recommended.micro_batch_size))
    assert picks == {("fp32", 128)}


def test_noisy_timings_reach_the_precision_or_the_cap_and_the_rows_say_how(fake_engine):
    fake_engine(0, noise=0.01)
    quiet = make_plan(default_like(amp=("off",), clear_cache=("off",)))
    timed = [c for c in quiet.candidates if c.timed_steps is not None]
    assert len(timed) == 2 and all(c.samples_per_s_error / c.samples_per_s <= 0.05 for c in timed)
    assert all(c.timed_steps == 3 for c in timed)  # known at the minimum of steps
    fake_engine(0, noise=0.6)
    noisy = make_plan(default_like(amp=("off",), clear_cache=("off",), time_cap_s=0.5))
    rows = [r for r in noisy.rows() if r["timed_steps"] is not None]
    assert all(r["samples_per_s_error"] / r["samples_per_s"] > 0.05 for r in rows)  # stopped by the cap
    assert all(" ± " in r["speed"] for r in rows)


def test_progress_counts_memory_probes_and_timed_steps_and_about_how_many_are_left(fake_engine):
    engine = fake_engine()
    calls = []
    plan = make_plan(default_like(), lambda *args: calls.append(args))
    steps = sum(c.timed_steps for c in plan.candidates if c.timed_steps)
    assert [c[0] for c in calls] == list(range(1, len(engine.measured) + steps + 1))
    assert all(about >= done for done, about, _, _ in calls)
    assert calls[0][1] == 1 + 4 * 5 - 1 + 8 * 3  # 5 memory probes per combination, then 3 steps per timed size
    assert calls[-1][1] == calls[-1][0]  # the last step: nothing left
    memory = calls[:len(engine.measured)]
    assert [(c[2].options, c[2].micro_batch_size) for c in memory] == engine.measured  # each probe as measured
    timed = calls[len(engine.measured):]
    assert all(c[2].timed_steps for c in timed)  # then each timed step with the speed so far
    finals = {(c[2].options, c[2].micro_batch_size): c[2].timed_steps for c in timed}
    assert finals == {(c.options, c.micro_batch_size): c.timed_steps for c in plan.candidates if c.timed_steps}
    seconds = [c[3] for c in calls]
    assert seconds == sorted(seconds) and seconds[-1] <= plan.seconds


def test_the_heap_is_frozen_while_planning_so_clearing_the_cache_collects_only_the_plans_objects(fake_engine):
    """gc.collect() walks every tracked object: ~0.3 s in a server holding torch, pandas and streamlit, per
    candidate and per step with clear_cache=step. The plan freezes what existed before it and thaws it after."""
    fake_engine()
    gc.unfreeze()  # as in a server: nothing frozen (the test suite freezes before each test)
    frozen = []
    make_plan(default_like(amp=("off",), clear_cache=("off",)), lambda *args: frozen.append(gc.get_freeze_count()))
    assert frozen and min(frozen) > 0
    assert gc.get_freeze_count() == 0


def test_a_plan_timed_on_a_busy_machine_says_its_recommendation_may_change(fake_engine, monkeypatch):
    """More processes wanting the CPU than it has cores (the last minute's load average): the reason says so,
    with the load; at a load within the cores, nothing is added."""
    fake_engine()
    monkeypatch.setattr(planner.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(planner.os, "getloadavg", lambda: (2.9, 2.0, 1.0))
    busy = make_plan(default_like())
    assert busy.reason.endswith(" The machine was busy while the sizes were timed (load 2.9 on 2 cores): their "
                                "speeds followed the other work, so this recommendation may change; plan again "
                                "when it is quieter.")
    monkeypatch.setattr(planner.os, "getloadavg", lambda: (1.9, 2.0, 1.0))
    assert "busy" not in make_plan(default_like()).reason
