"""The planner's speed statistics on made-up step times: the mean samples/s and its 95% interval, when
timing stops (precision, cap, steps) and whether two speeds can be told apart (tests/test_intervals.py: how
they are written)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gaccum_core.intervals import t_975
from gaccum_core.plan.speed import (Speed, Timing, estimate, indistinguishable, known, paired_ratio, time_in_turns,
                                    turn_speeds)


def test_the_estimate_is_the_mean_speed_with_a_student_t_interval():
    speed = estimate([256, 256, 256, 256], [0.25, 0.25, 0.2, 0.2])  # 1024, 1024, 1280, 1280 samples/s
    assert speed.value == pytest.approx(1152.0) and speed.steps == 4
    half = t_975(3) * statistics.stdev([1024, 1024, 1280, 1280]) / 2  # t(3 degrees) · s / √4
    assert speed.error == pytest.approx(half)
    assert speed.relative_error == pytest.approx(half / 1152.0)


def test_identical_steps_are_known_exactly_and_one_step_has_no_interval():
    assert estimate([100] * 3, [0.1] * 3) == Speed(1000.0, 0.0, 3)
    once = estimate([100], [0.1])
    assert once.value == 1000.0 and once.error == math.inf and once.steps == 1
    assert not known(once)


def test_a_partial_last_window_counts_its_own_samples():
    assert estimate([256, 64], [0.2, 0.05]).value == pytest.approx(1280.0)


@pytest.mark.parametrize("samples,seconds", [([], []), ([1, 2], [0.1]), ([1], [0.0]), ([1], [-1.0])])
def test_steps_without_positive_durations_are_refused(samples, seconds):
    with pytest.raises(ValueError, match="one positive duration per step"):
        estimate(samples, seconds)


def test_known_needs_three_steps_and_the_stated_precision():
    assert known(Speed(1000.0, 40.0, 3)) and not known(Speed(1000.0, 40.0, 2))
    assert not known(Speed(1000.0, 60.0, 10)) and known(Speed(1000.0, 60.0, 10), precision=0.1)
    assert known(Speed(1000.0, 60.0, 1), precision=0.1, min_steps=1)


def test_overlapping_intervals_are_indistinguishable():
    assert indistinguishable(1000.0, 30.0, 1050.0, 20.0)      # 1030 reaches 1030
    assert not indistinguishable(1000.0, 20.0, 1050.0, 20.0)
    assert indistinguishable(1000.0, math.inf, 5000.0, 1.0)   # one step: no interval, no claim
    assert not indistinguishable(1000.0, None, 1001.0, None)  # exact figures differ
    assert indistinguishable(1000.0, None, 1000.0, None)


class FakeSteps:
    """Steps of 256 samples at `speed` samples/s with seeded relative noise (a load that comes and goes
    can be added: `slow` multiplies the step times while it is on)."""

    def __init__(self, speed: float, noise: float, seed: int) -> None:
        self.speed, self.noise, self.random, self.calls, self.slow = speed, noise, random.Random(seed), 0, 1.0

    def step(self) -> dict:
        self.calls += 1
        return {"samples": 256, "step_time_s": 256 / self.speed * (1 + self.noise * self.random.uniform(-1, 1))
                * self.slow}


def one(steps: FakeSteps, timing: Timing) -> tuple[Speed, list]:
    ((speed, rows),) = time_in_turns([steps.step], timing)
    return speed, rows


def test_quiet_steps_stop_as_soon_as_the_speed_is_known():
    steps = FakeSteps(1000.0, 0.01, seed=0)
    speed, rows = one(steps, Timing())
    assert speed.steps == len(rows) == steps.calls == 3  # the minimum: ±1% noise is known at once
    assert speed.relative_error <= 0.05 and speed.value == pytest.approx(1000.0, rel=0.02)


def test_noisy_steps_stop_at_the_time_cap_with_the_interval_they_reached():
    steps = FakeSteps(1000.0, 0.5, seed=1)  # ±50%: 5% is out of reach within a second
    speed, rows = one(steps, Timing(cap_s=1.0))
    seconds = sum(r["step_time_s"] for r in rows)
    assert not known(speed) and seconds >= 1.0 and seconds - rows[-1]["step_time_s"] < 1.0
    assert math.isfinite(speed.error) and speed.steps >= 3


def test_timing_stops_at_its_most_steps_and_never_before_three_steps_for_the_cap():
    speed, _ = one(FakeSteps(10.0, 0.5, seed=2), Timing(cap_s=1.0))  # 25 s a step: over the cap at once
    assert speed.steps == 3
    speed, _ = one(FakeSteps(1000.0, 0.5, seed=3), Timing(cap_s=1000.0, max_steps=7))
    assert speed.steps == 7
    speed, _ = one(FakeSteps(10.0, 0.5, seed=4), Timing(max_steps=1))
    assert speed.steps == 1


def test_candidates_timed_in_turns_share_a_burst_of_load_and_each_stops_on_its_own():
    """Three equal candidates; someone else's work halves the machine's speed during rounds 2 and 3.
    In turns, every candidate has slow steps from the burst (so their means stay together); one
    after another, the burst would fall on one candidate alone."""
    steps = [FakeSteps(1000.0, 0.01, seed) for seed in range(3)]
    order = []

    def reported(i: int, speed: Speed, finished: bool) -> None:
        order.append(i)
        if len(order) == 3:
            for s in steps:
                s.slow = 2.0
        if len(order) == 9:
            for s in steps:
                s.slow = 1.0

    results = time_in_turns([s.step for s in steps], Timing(cap_s=10.0, max_steps=8), reported)
    assert order[:9] == [0, 1, 2, 1, 2, 0, 2, 0, 1]  # in turns, each first in one
    speeds = [speed.value for speed, _ in results]
    assert max(speeds) / min(speeds) < 1.05  # the burst fell on all three alike
    assert all(not known(speed) and speed.steps == 8 for speed, _ in results)  # the burst widened each interval


def test_a_candidate_whose_step_fails_drops_out_and_the_others_go_on():
    good = FakeSteps(1000.0, 0.01, seed=0)
    calls = []

    def failing() -> None:
        calls.append(1)
        return None

    (failed, failed_rows), (speed, rows) = time_in_turns([failing, good.step], Timing())
    assert failed is None and failed_rows == [] and calls == [1]
    assert speed.steps == len(rows) == 3


def test_a_paired_ratio_is_the_median_ratio_turn_by_turn_over_the_turns_in_common():
    ratio = paired_ratio({0: 1100.0, 1: 440.0, 2: 990.0, 4: 1000.0, 6: 1.0},  # 4 turns in common: 0, 1, 2, 4
                         {0: 1000.0, 1: 400.0, 2: 900.0, 3: 700.0, 4: 500.0})
    assert ratio.turns == 4 and ratio.value == pytest.approx(1.1) and ratio.agreeing == 1.0  # turn 4's 2.0 aside
    assert ratio.tells_apart() and not ratio.tells_apart(precision=0.05 + 1e-3)  # 10% against 10% and 10.2%
    wavering = paired_ratio({0: 1200.0, 1: 1200.0, 2: 900.0, 3: 1200.0}, {t: 1000.0 for t in range(4)})
    assert wavering.value == pytest.approx(1.2) and wavering.agreeing == 0.75 and wavering.tells_apart()
    wavering = paired_ratio({0: 1200.0, 1: 1200.0, 2: 900.0}, {t: 1000.0 for t in range(3)})
    assert wavering.agreeing == pytest.approx(2 / 3) and not wavering.tells_apart()  # one turn in three says no
    assert paired_ratio({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0, 2: 3.0}) is None  # two turns in common: too few


def test_time_in_turns_says_the_turn_of_each_step():
    results = time_in_turns([FakeSteps(1000.0, 0.01, 0).step, FakeSteps(500.0, 0.9, 1).step], Timing(cap_s=3.0))
    (_, quiet), (_, noisy) = results
    assert [r["turn"] for r in quiet] == [0, 1, 2] and [r["turn"] for r in noisy] == list(range(len(noisy)))
    assert len(noisy) > 3 and turn_speeds(noisy) == {r["turn"]: 256 / r["step_time_s"] for r in noisy}
