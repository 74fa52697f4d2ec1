"""The planner's pure search against a fake memory model: the largest fitting divisor, found in few
measurements; the recommendation, its reason and the option combinations. No torch, no engine."""

from __future__ import annotations

import pytest

from gaccum_core.plan.search import (FAILED, FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options, best_fit,
                                     combinations, divisors, most_measurements, reason, recommend, search)

FP32 = Options()
BF16 = Options(amp="bf16")


class FakeMemory:
    """peak = fixed + per_sample * b; fits when peak <= budget. Counts and records every measurement."""

    def __init__(self, budget: float, fixed: float = 10.0, per_sample: float = 1.0,
                 over_status: str = OVER_BUDGET) -> None:
        self.budget, self.fixed, self.per_sample, self.over_status = budget, fixed, per_sample, over_status
        self.sizes: list[int] = []

    def peak(self, b: int) -> float:
        return self.fixed + self.per_sample * b

    def __call__(self, options: Options, b: int, effective_batch: int | None = None) -> Candidate:
        self.sizes.append(b)
        k = (effective_batch // b) if effective_batch else 1
        peak = self.peak(b)
        if peak <= self.budget:
            return Candidate(options, b, k, FITS, peak, samples_per_s=100.0 + b, step_time_s=1.0)
        if self.over_status == OUT_OF_MEMORY:
            return Candidate(options, b, k, OUT_OF_MEMORY, detail={"message": "OutOfMemoryError: fake"})
        return Candidate(options, b, k, OVER_BUDGET, peak)


def brute_force(effective_batch: int, memory: FakeMemory, largest: int | None = None) -> int | None:
    fitting = [d for d in range(1, effective_batch + 1) if effective_batch % d == 0
               and (largest is None or d <= largest) and memory.peak(d) <= memory.budget]
    return max(fitting) if fitting else None


def found(candidates: list[Candidate]) -> int | None:
    best = best_fit(candidates)
    return best.micro_batch_size if best else None


def budgets_around_every_divisor(effective_batch: int, fixed: float = 10.0) -> list[float]:
    """Budgets that make each divisor in turn the largest to fit, plus one below the smallest and one above all."""
    ds = divisors(effective_batch)
    return [fixed + 0.5] + [fixed + d for d in ds] + [fixed + d + 0.5 for d in ds]


def test_divisors_are_every_divisor_ascending():
    for n in (1, 2, 12, 97, 360, 1024, 5040):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(97) == [1, 97]
    assert divisors(1) == [1]
    assert len(divisors(5040)) == 60


@pytest.mark.parametrize("effective_batch,budget", [
    (256, 10 + 64), (256, 10 + 63), (256, 10 + 256), (256, 10.5), (48, 10 + 24), (48, 10 + 47),
    (360, 10 + 40), (5040, 10 + 2519), (5040, 10 + 7), (1024, 10 + 1000), (12, 10 + 5),
])
def test_search_finds_the_largest_fitting_divisor(effective_batch, budget):
    memory = FakeMemory(budget)
    candidates = search(effective_batch, FP32, memory)
    assert found(candidates) == brute_force(effective_batch, memory)
    assert len(candidates) == len(memory.sizes) <= most_measurements(effective_batch)
    assert len(set(memory.sizes)) == len(memory.sizes), "a size was measured twice"
    assert all(effective_batch % c.micro_batch_size == 0 for c in candidates)


def test_search_sweep_over_every_threshold_matches_brute_force_within_the_bound():
    """Every E up to 600 (and a few highly composite ones), with a budget at and around every divisor."""
    for effective_batch in [*range(1, 601), 720, 840, 1260, 2520, 5040, 4096, 65536]:
        bound = most_measurements(effective_batch)
        for budget in budgets_around_every_divisor(effective_batch):
            memory = FakeMemory(budget)
            candidates = search(effective_batch, FP32, memory)
            expected = brute_force(effective_batch, memory)
            assert found(candidates) == expected, (effective_batch, budget)
            assert len(memory.sizes) <= bound, (effective_batch, budget, memory.sizes)
            assert len(set(memory.sizes)) == len(memory.sizes), (effective_batch, budget, memory.sizes)
            if expected is not None:  # the answer's neighbour above was measured and did not fit
                above = [d for d in divisors(effective_batch) if d > expected]
                if above:
                    assert above[0] in memory.sizes


def test_a_highly_composite_effective_batch_measures_far_fewer_than_all_divisors():
    effective_batch = 5040  # 60 divisors
    worst = 0
    for budget in budgets_around_every_divisor(effective_batch):
        memory = FakeMemory(budget)
        search(effective_batch, FP32, memory)
        worst = max(worst, len(memory.sizes))
    assert worst <= most_measurements(effective_batch) < len(divisors(effective_batch)) // 2
    assert worst <= 20


def test_out_of_memory_at_every_size_measures_once_and_explains_itself():
    memory = FakeMemory(budget=5.0, over_status=OUT_OF_MEMORY)  # even b=1 needs 11
    candidates = search(256, FP32, memory)
    assert len(candidates) == 1 and candidates[0].micro_batch_size == 1
    assert candidates[0].status == OUT_OF_MEMORY
    assert best_fit(candidates) is None
    assert recommend(candidates, 5000.0) is None
    sentence = reason(None, candidates, 5000.0)
    assert sentence.startswith("Nothing fits in 5000 MB") and "b=1" in sentence and "out of memory" in sentence
    assert sentence.endswith(".") and "\n" not in sentence


def test_over_budget_at_every_size_names_the_budget_the_smallest_b_and_its_peak():
    memory = FakeMemory(budget=5.0)
    candidates = search(64, FP32, memory)
    assert [c.micro_batch_size for c in candidates] == [1]
    sentence = reason(recommend(candidates, 5.0), candidates, 5.0)
    assert "Nothing fits in 5 MB" in sentence and "b=1" in sentence and "over budget, 11 MB" in sentence


def test_a_prime_effective_batch_has_two_candidates():
    assert [c.micro_batch_size for c in search(97, FP32, FakeMemory(budget=10 + 97))] == [1, 97]
    small = search(97, FP32, FakeMemory(budget=10 + 96))
    assert [(c.micro_batch_size, c.status) for c in small] == [(1, FITS), (97, OVER_BUDGET)]
    assert found(small) == 1
    assert most_measurements(97) == 2


def test_an_effective_batch_of_one():
    assert [c.micro_batch_size for c in search(1, FP32, FakeMemory(budget=100))] == [1]
    nothing = search(1, FP32, FakeMemory(budget=5))
    assert len(nothing) == 1 and found(nothing) is None
    assert most_measurements(1) == 1


@pytest.mark.parametrize("effective_batch,largest,budget,expected", [
    (256, 100, 10_000, 64),   # every size fits: the largest divisor within the data set
    (256, 100, 10 + 40, 32),  # the budget binds below the cap
    (256, 1, 10_000, 1),
    (97, 50, 10_000, 1),      # 97 itself is larger than the data set
    (360, 200, 10_000, 180),
])
def test_largest_caps_the_micro_batch_at_the_data_set(effective_batch, largest, budget, expected):
    memory = FakeMemory(budget)
    candidates = search(effective_batch, FP32, memory, largest=largest)
    assert found(candidates) == expected == brute_force(effective_batch, memory, largest)
    assert max(memory.sizes) <= largest
    assert len(memory.sizes) <= most_measurements(effective_batch, largest)


def test_no_divisor_within_the_data_set_measures_nothing():
    assert search(256, FP32, FakeMemory(100), largest=0) == []
    assert reason(None, [], 100.0).startswith("Nothing was measured")


class BatchNormLike(FakeMemory):
    """b=1 fails the way a BatchNorm model does (the engine's ConfigError on micro_batch_size)."""

    def __init__(self, budget: float, larger_may_work: bool) -> None:
        super().__init__(budget)
        self.larger_may_work = larger_may_work

    def __call__(self, options: Options, b: int, effective_batch: int | None = None) -> Candidate:
        if b == 1:
            self.sizes.append(b)
            return Candidate(options, b, 1, FAILED, detail={"message": "ConfigError: micro_batch_size=1",
                                                            "larger_may_work": self.larger_may_work})
        return super().__call__(options, b, effective_batch)


def test_a_failure_where_a_larger_size_may_work_moves_on_to_the_next_size():
    memory = BatchNormLike(budget=10 + 16, larger_may_work=True)
    candidates = search(64, FP32, memory)
    assert memory.sizes[:2] == [1, 2]
    assert candidates[0].status == FAILED and candidates[1].status == FITS
    assert found(candidates) == 16


def test_a_batchnorm_like_failure_on_every_size_it_tries_still_ends():
    memory = BatchNormLike(budget=5.0, larger_may_work=True)  # b=1 fails, b=2 over budget
    candidates = search(64, FP32, memory)
    assert [(c.micro_batch_size, c.status) for c in candidates] == [(1, FAILED), (2, OVER_BUDGET)]
    assert found(candidates) is None


def test_a_failure_without_larger_may_work_stops_the_search():
    memory = BatchNormLike(budget=10 + 16, larger_may_work=False)
    candidates = search(64, FP32, memory)
    assert memory.sizes == [1]
    assert len(candidates) == 1 and candidates[0].status == FAILED and found(candidates) is None


def candidate(b: int, peak: float | None, speed: float | None, status: str = FITS, options: Options = FP32,
              effective_batch: int = 64) -> Candidate:
    return Candidate(options, b, effective_batch // b, status, peak, speed, None if speed is None else b / speed)


def test_recommend_picks_the_fastest_within_the_margin_not_the_largest():
    candidates = [
        candidate(8, 50.0, 900.0),
        candidate(16, 70.0, 1000.0),             # fastest within 90 MB of a 100 MB budget
        candidate(32, 89.0, 950.0),              # largest safe, but slower
        candidate(64, 95.0, 2000.0),             # fits the budget, not the margin
        candidate(128, 120.0, 5000.0, OVER_BUDGET),
        candidate(4, None, 9000.0, OUT_OF_MEMORY),
        candidate(2, 10.0, None),                # no speed measured
    ]
    choice = recommend(candidates, 100.0)
    assert choice is candidates[1]
    assert recommend(candidates, 100.0, margin=0.0) is candidates[3]  # no margin: 95 ≤ 100 is safe
    assert recommend(candidates, 100.0, margin=0.5) is candidates[0]
    assert recommend(candidates[3:], 100.0) is None  # only unsafe, over budget, unmeasured


def test_recommend_breaks_a_speed_tie_towards_the_larger_micro_batch():
    a, b = candidate(8, 20.0, 1000.0), candidate(16, 30.0, 1000.0)
    assert recommend([a, b], 100.0) is b and recommend([b, a], 100.0) is b


def test_reason_when_plain_fp32_wins_mentions_the_budget_and_the_margin():
    fp32 = [candidate(16, 70.0, 1000.0), candidate(32, 95.0, 1200.0)]
    bf16 = [candidate(16, 40.0, 800.0, options=BF16)]
    choice = recommend(fp32 + bf16, 100.0)
    assert choice is fp32[0]
    sentence = reason(choice, fp32 + bf16, 100.0)
    assert sentence.startswith("fp32 at b=16, k=4 is the fastest setting that fits with a 10% margin")
    assert "70 MB of 100 MB" in sentence and "1000 samples/s" in sentence
    assert sentence.endswith("no other option combination measured faster.")
    assert reason(choice, fp32, 100.0).endswith("samples/s).")  # nothing else measured


def test_reason_gives_the_speed_ratio_against_fp32_when_another_option_wins():
    fp32 = [candidate(8, 40.0, 800.0), candidate(16, 70.0, 1000.0), candidate(32, 120.0, None, OVER_BUDGET)]
    bf16 = [candidate(8, 25.0, 1200.0, options=BF16), candidate(16, 45.0, 1500.0, options=BF16)]
    choice = recommend(fp32 + bf16, 100.0)
    assert choice is bf16[1]
    sentence = reason(choice, fp32 + bf16, 100.0)
    assert sentence.startswith("bf16 at b=16, k=4 is the fastest")
    assert "1.50× the samples/s of fp32 without options" in sentence
    assert "fastest within the margin is b=16" in sentence
    assert "needs less memory" not in sentence  # same b as fp32's largest


def test_reason_says_the_winner_needs_less_memory_when_its_micro_batch_is_larger():
    fp32 = [candidate(8, 40.0, 800.0), candidate(16, 70.0, 1000.0), candidate(32, 120.0, None, OVER_BUDGET)]
    bf16 = [candidate(16, 45.0, 1500.0, options=BF16), candidate(32, 80.0, 2000.0, options=BF16)]
    choice = recommend(fp32 + bf16, 100.0)
    assert choice is bf16[1]
    sentence = reason(choice, fp32 + bf16, 100.0)
    assert "2.00× the samples/s of fp32" in sentence
    assert "it needs less memory: b=32 fits where fp32 stops at b=16" in sentence
    assert sentence.endswith(".") and "\n" not in sentence


def test_reason_when_everything_that_fits_is_inside_the_margin():
    candidates = [candidate(1, 95.0, 100.0), candidate(2, 130.0, None, OVER_BUDGET)]
    assert recommend(candidates, 100.0) is None
    sentence = reason(None, candidates, 100.0)
    assert "less than 10% of the 100 MB budget free" in sentence


def test_reason_names_a_sub_megabyte_budget_as_given():
    candidates = [candidate(1, 0.2, None, OVER_BUDGET)]
    assert "0.1 MB" in reason(None, candidates, 0.1)


def test_combinations_cross_every_value_plain_fp32_first():
    combos = combinations(("off", "bf16"), ("off", "step"), ("off",))
    assert combos[0] == Options() == FP32 and combos[0].label() == "fp32"
    assert len(combos) == len(set(combos)) == 4
    assert {c.label() for c in combos} == {"fp32", "bf16", "fp32 + clear/step", "bf16 + clear/step"}
    assert combinations(("off",), ("off",), ("off",)) == [FP32]
    assert Options("fp16", "micro", "default").label() == "fp16 + clear/micro + compile"
    assert Options("off", "off", "max-autotune").label() == "fp32 + compile/max-autotune"


def test_combinations_put_plain_fp32_first_whatever_the_order_given():
    assert combinations(("bf16", "off"), ("step", "off"), ("off",))[0] == FP32


def test_rows_are_flat_and_carry_the_detail():
    row = Candidate(BF16, 8, 4, FITS, 12.5, 1000.0, 0.032, {"activations_mb": 3.0}).row()
    assert row["options"] == "bf16" and row["amp"] == "bf16" and row["clear_cache"] == "off"
    assert row["micro_batch_size"] == 8 and row["accum_steps"] == 4 and row["activations_mb"] == 3.0
