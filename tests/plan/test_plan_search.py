"""The planner's pure search against a fake memory model: the largest fitting divisor, found in few
measurements around the predicted budget line; hints from another combination; the sizes to time; the
option combinations. No torch, no engine."""

from __future__ import annotations

import pytest

from gaccum_core.plan.ranking import reason, recommend
from gaccum_core.plan.search import (FAILED, FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options, best_fit,
                                     combinations, divisors, hint_points, most_measurements, search, timing_sizes)

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
    candidates = search(effective_batch, FP32, memory, memory.budget)
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
            candidates = search(effective_batch, FP32, memory, memory.budget)
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
        search(effective_batch, FP32, memory, memory.budget)
        worst = max(worst, len(memory.sizes))
    assert worst <= most_measurements(effective_batch) < len(divisors(effective_batch)) // 2
    assert worst <= 8  # doubling then bisection took up to 14


@pytest.mark.parametrize("fixed,per_sample", [(10.0, 1.0), (0.12, 0.154), (30.0, 0.01), (0.0, 2.0)])
def test_linear_memory_is_found_by_measuring_around_the_predicted_line(fixed, per_sample):
    """E=256 with a budget at and around every divisor: the smallest size, one point the line through it
    predicts, then the predicted answer and its neighbour above: never more than 5 of the 9 divisors."""
    for budget in budgets_around_every_divisor(256, fixed):
        budget = fixed + (budget - fixed) * per_sample  # the same thresholds on this line
        memory = FakeMemory(budget, fixed, per_sample)
        candidates = search(256, FP32, memory, budget)
        assert found(candidates) == brute_force(256, memory), (fixed, per_sample, budget, memory.sizes)
        assert len(memory.sizes) <= 5, (fixed, per_sample, budget, memory.sizes)


def test_the_default_plans_line_measures_four_sizes():
    """The Plan page's fp32 default (0.12 MB + 0.154 MB per sample, 32 MB): b=1, the line's first
    guess 64, its answer 128, and 256 to confirm 128 is the largest; bisection took 1, 2, 4 … 256."""
    memory = FakeMemory(32.0, 0.12, 0.154)
    assert found(search(256, FP32, memory, 32.0)) == 128
    assert memory.sizes == [1, 64, 128, 256]


class Curved(FakeMemory):
    """Memory that grows faster than the line predicts (quadratic): the search falls back to bisection."""

    def peak(self, b: int) -> float:
        return self.fixed + self.per_sample * b + 0.01 * b * b


def test_memory_that_is_not_linear_still_finds_the_largest_fitting_size_within_the_bound():
    for effective_batch in (256, 360, 5040):
        for budget in budgets_around_every_divisor(effective_batch):
            memory = Curved(budget * 3)
            candidates = search(effective_batch, FP32, memory, memory.budget)
            assert found(candidates) == brute_force(effective_batch, memory)
            assert len(memory.sizes) <= most_measurements(effective_batch)
            assert len(set(memory.sizes)) == len(memory.sizes)


def test_known_candidates_are_not_measured_again_and_a_margin_search_reuses_them():
    memory = FakeMemory(32.0, 0.12, 0.154)
    first = search(256, FP32, memory, 32.0)
    again = search(256, FP32, memory, 32.0, known=first)
    assert again == [] and memory.sizes == [1, 64, 128, 256]
    margin = search(256, FP32, memory, 0.9 * 32.0, known=first)  # 128 (19.8 MB) is within 28.8 MB too
    assert margin == []
    tight = search(256, FP32, memory, 15.0, known=first)  # between 64 (9.98) and 128 (19.8): nothing new
    assert tight == []
    assert found([c for c in first if c.peak_mb <= 15.0]) == 64


def test_hints_from_another_combination_place_the_first_probe():
    """fp32's points predict where bf16 + clear/step (less memory per sample) may fit: its first probe is
    fp32's answer, then its own line; the smallest size is never measured when the hint fits."""
    fp32 = FakeMemory(32.0, 0.12, 0.154)
    fp32_found = search(256, FP32, fp32, 32.0)
    bf16_step = Options(amp="bf16", clear_cache="step")
    hints = hint_points(fp32_found, bf16_step)
    assert hints == [(c.micro_batch_size, c.peak_mb) for c in fp32_found]
    bf16 = FakeMemory(32.0, 0.11, 0.093)
    candidates = search(256, bf16_step, bf16, 32.0, hints=hints)
    assert bf16.sizes == [128, 256] and found(candidates) == 256
    wrong = FakeMemory(32.0, 10.0, 1.0)  # a hint far off: its probe does not fit, the search starts over
    candidates = search(256, bf16_step, wrong, 32.0, hints=hints)
    assert found(candidates) == brute_force(256, wrong) == 16 and wrong.sizes[:2] == [128, 1]


def test_hint_points_prefer_the_same_precision_and_compile_mode():
    fp32, bf16, step = Options(), Options(amp="bf16"), Options(clear_cache="step")
    measured = [Candidate(fp32, 8, 1, FITS, 5.0), Candidate(bf16, 8, 1, FITS, 3.0), Candidate(bf16, 16, 1, FITS, 5.0)]
    assert hint_points(measured, Options(amp="bf16", clear_cache="step")) == [(8, 3.0), (16, 5.0)]
    assert hint_points(measured, step) == [(8, 5.0)]
    assert hint_points(measured, Options(amp="fp16")) == [(8, 5.0)]  # no fp16 yet: the first measured
    assert hint_points([], step) == []


def test_the_sizes_to_time_are_the_largest_within_the_margin_and_the_divisor_below():
    measured = [Candidate(FP32, b, 256 // b, FITS if peak <= 32 else OVER_BUDGET, peak)
                for b, peak in ((1, 0.27), (64, 10.0), (128, 19.9), (256, 39.6))]
    assert timing_sizes(256, measured, FP32, 32.0) == [128, 64]
    assert timing_sizes(256, measured, FP32, 20.0) == [64, 32]  # 128 is over the margin; 32 not measured yet
    assert timing_sizes(256, measured, FP32, 0.3) == [1]  # nothing below b=1
    assert timing_sizes(256, measured, FP32, 0.1) == []
    assert timing_sizes(256, measured, Options(amp="bf16"), 32.0) == []  # none of these options measured


def test_out_of_memory_at_every_size_measures_once_and_explains_itself():
    memory = FakeMemory(budget=5.0, over_status=OUT_OF_MEMORY)  # even b=1 needs 11
    candidates = search(256, FP32, memory, memory.budget)
    assert len(candidates) == 1 and candidates[0].micro_batch_size == 1
    assert candidates[0].status == OUT_OF_MEMORY
    assert best_fit(candidates) is None
    assert recommend(candidates, 5000.0) is None
    sentence = reason(None, candidates, 5000.0)
    assert sentence.startswith("Nothing fits in 5000 MB") and "b=1" in sentence and "out of memory" in sentence
    assert sentence.endswith(".") and "\n" not in sentence


def test_over_budget_at_every_size_names_the_budget_the_smallest_b_and_its_peak():
    memory = FakeMemory(budget=5.0)
    candidates = search(64, FP32, memory, memory.budget)
    assert [c.micro_batch_size for c in candidates] == [1]
    sentence = reason(recommend(candidates, 5.0), candidates, 5.0)
    assert "Nothing fits in 5 MB" in sentence and "b=1" in sentence and "over budget, 11 MB" in sentence


def test_a_prime_effective_batch_has_two_candidates():
    assert [c.micro_batch_size for c in search(97, FP32, FakeMemory(budget=10 + 97), 10 + 97)] == [1, 97]
    small = search(97, FP32, FakeMemory(budget=10 + 96), 10 + 96)
    assert [(c.micro_batch_size, c.status) for c in small] == [(1, FITS), (97, OVER_BUDGET)]
    assert found(small) == 1
    assert most_measurements(97) == 2


def test_an_effective_batch_of_one():
    assert [c.micro_batch_size for c in search(1, FP32, FakeMemory(budget=100), 100)] == [1]
    nothing = search(1, FP32, FakeMemory(budget=5), 5)
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
    candidates = search(effective_batch, FP32, memory, memory.budget, largest=largest)
    assert found(candidates) == expected == brute_force(effective_batch, memory, largest)
    assert max(memory.sizes) <= largest
    assert len(memory.sizes) <= most_measurements(effective_batch, largest)


def test_no_divisor_within_the_data_set_measures_nothing():
    assert search(256, FP32, FakeMemory(100), 100, largest=0) == []
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
    candidates = search(64, FP32, memory, memory.budget)
    assert memory.sizes[:2] == [1, 2]
    assert candidates[0].status == FAILED and candidates[1].status == FITS
    assert found(candidates) == 16


def test_a_batchnorm_like_failure_on_every_size_it_tries_still_ends():
    memory = BatchNormLike(budget=5.0, larger_may_work=True)  # b=1 fails, b=2 over budget
    candidates = search(64, FP32, memory, memory.budget)
    assert [(c.micro_batch_size, c.status) for c in candidates] == [(1, FAILED), (2, OVER_BUDGET)]
    assert found(candidates) is None


def test_a_failure_without_larger_may_work_stops_the_search():
    memory = BatchNormLike(budget=10 + 16, larger_may_work=False)
    candidates = search(64, FP32, memory, memory.budget)
    assert memory.sizes == [1]
    assert len(candidates) == 1 and candidates[0].status == FAILED and found(candidates) is None


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


def test_the_plan_table_leaves_an_untimed_size_blank_not_none():
    """Untimed sizes have no steps: the table's number columns are numbers with gaps (shown empty),
    not Python None objects (Streamlit printed "None" in the column)."""
    from gaccum_core.plan.search import Candidate, Options
    from gaccum_core.views.plan import plan_table

    class FakePlan:
        def rows(self):
            timed = Candidate(Options(), 8, 4, "fits", 1.0, 100.0, 0.1, timed_steps=3)
            untimed = Candidate(Options(), 32, 1, "over budget", 4.0)
            return [timed.row(), untimed.row()]

    steps = plan_table(FakePlan())["timed steps"]
    assert steps.dtype.kind == "f" and steps.iloc[0] == 3 and steps.isna().iloc[1]
