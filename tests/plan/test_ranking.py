"""The recommendation and its reason, on made-up measured candidates: the fastest within the margin,
speeds that cannot be told apart (turn by turn when timed in the same turns, else by their 95% intervals) are
ties won by the largest b (then the fewest options), and the words that say so. No torch, no engine."""

from __future__ import annotations

import json
import math

from gaccum_core.plan.ranking import reason, recommend, same_speed, ties
from gaccum_core.plan.speed import estimate
from gaccum_core.plan.search import FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options

FP32 = Options()
BF16 = Options(amp="bf16")
BF16_STEP = Options(amp="bf16", clear_cache="step")


def candidate(b: int, peak: float | None, speed: float | None, status: str = FITS, options: Options = FP32,
              effective_batch: int = 64, error: float | None = None) -> Candidate:
    return Candidate(options, b, effective_batch // b, status, peak, speed, None if speed is None else b / speed,
                     samples_per_s_error=error, timed_steps=None if speed is None else 5)


def test_recommend_picks_the_fastest_within_the_margin_not_the_largest():
    candidates = [
        candidate(8, 50.0, 900.0),
        candidate(16, 70.0, 1000.0),             # fastest within 90 MB of a 100 MB budget
        candidate(32, 89.0, 800.0),              # largest safe, but slower beyond the 5% precision
        candidate(64, 95.0, 2000.0),             # fits the budget, not the margin
        candidate(128, 120.0, 5000.0, OVER_BUDGET),
        candidate(4, None, 9000.0, OUT_OF_MEMORY),
        candidate(2, 10.0, None),                # not timed
    ]
    choice = recommend(candidates, 100.0)
    assert choice is candidates[1]
    assert recommend(candidates, 100.0, margin=0.0) is candidates[3]  # no margin: 95 ≤ 100 is safe
    assert recommend(candidates, 100.0, margin=0.5) is candidates[0]
    assert recommend(candidates[3:], 100.0) is None  # only unsafe, over budget, untimed


def test_recommend_breaks_a_speed_tie_towards_the_larger_micro_batch():
    a, b = candidate(8, 20.0, 1000.0), candidate(16, 30.0, 1000.0)
    assert recommend([a, b], 100.0) is b and recommend([b, a], 100.0) is b


def test_speeds_whose_intervals_overlap_are_ties_won_by_the_larger_micro_batch():
    small = candidate(16, 30.0, 1040.0, error=40.0)  # the fastest point estimate
    large = candidate(32, 50.0, 1000.0, error=30.0)  # 1000 + 30 reaches 1040 - 40
    assert ties([small, large]) == [small, large]
    assert recommend([small, large], 100.0) is large and recommend([large, small], 100.0) is large
    sentence = reason(large, [small, large], 100.0)
    assert sentence.startswith("fp32 at b=32, k=2 fits with a 10% margin (50 MB of 100 MB, 1,000 ± 30 samples/s): ")
    assert ("b=32 and b=16 are equally fast within the measurement's precision (timed in turns, they differ by "
            "less than 10%, or not in most turns); the larger b is recommended: fewer accumulation steps.") in sentence


def test_a_smaller_micro_batch_clearly_faster_is_recommended():
    small = candidate(16, 30.0, 1500.0, error=20.0)
    large = candidate(32, 50.0, 1000.0, error=20.0)
    assert ties([small, large]) == [small]
    assert recommend([small, large], 100.0) is small
    sentence = reason(small, [small, large], 100.0)
    assert sentence.startswith("fp32 at b=16, k=4 is the fastest setting that fits with a 10% margin "
                               "(30 MB of 100 MB, 1,500 ± 20 samples/s)")
    assert "equally fast" not in sentence


def test_no_interval_is_narrower_than_the_stated_precision():
    """Two tight measurements 4% apart: steps timed seconds apart on a shared machine drift more than that,
    so they tie at the 5% precision (the larger b wins) and are told apart at 1%."""
    small = candidate(16, 30.0, 1040.0, error=5.0)
    large = candidate(32, 50.0, 1000.0, error=5.0)
    assert recommend([small, large], 100.0) is large
    assert recommend([small, large], 100.0, precision=0.01) is small
    assert "equally fast" not in reason(small, [small, large], 100.0, precision=0.01)


def test_one_timed_step_has_no_interval_and_ties_with_every_speed():
    once = candidate(32, 50.0, 500.0, error=math.inf)
    fast = candidate(16, 30.0, 2000.0, error=10.0)
    assert recommend([fast, once], 100.0) is once
    assert "500 samples/s (1 step)" in reason(once, [fast, once], 100.0)


def test_equal_speeds_at_the_same_size_go_to_the_fewest_options_and_the_reason_names_each_setting():
    step = candidate(64, 40.0, 1010.0, options=BF16_STEP, error=30.0)
    plain_bf16 = candidate(64, 40.0, 1000.0, options=BF16, error=30.0)
    fp32 = candidate(32, 60.0, 990.0, error=30.0)
    choice = recommend([fp32, step, plain_bf16], 100.0)
    assert choice is plain_bf16
    sentence = reason(choice, [fp32, step, plain_bf16], 100.0)
    assert ("bf16 + clear/step b=64, bf16 b=64 and fp32 b=32 are equally fast within the measurement's precision"
            in sentence)
    assert "the largest b is recommended: fewer accumulation steps, and of those the one with the fewest options" \
        in sentence
    assert "it needs less memory: b=64 fits where fp32 stops at b=32." in sentence
    assert "× the samples/s of fp32" not in sentence  # as fast as fp32 within the precision: no ratio


def test_a_recommendation_as_fast_as_fp32_within_the_precision_quotes_no_ratio():
    """bf16 b=12 ties with bf16 b=8 (the fastest); fp32 b=8 does not tie with the fastest but does with
    the recommendation: no "1.00×" of a difference the measurement cannot see."""
    fp32 = [candidate(8, 0.44, 1400.0, error=37.0), candidate(12, 0.6, None, OVER_BUDGET)]
    bf16 = [candidate(8, 0.33, 1600.0, options=BF16, error=22.0), candidate(12, 0.42, 1484.0, options=BF16, error=133.0)]
    choice = recommend(fp32 + bf16, 0.5)
    assert choice is bf16[1]
    sentence = reason(choice, fp32 + bf16, 0.5)
    assert "b=12 and b=8 are equally fast within the measurement's precision" in sentence
    assert "; as fast as fp32 without options at b=8 within the precision; it needs less memory: b=12 fits " \
           "where fp32 stops at b=8." in sentence
    assert "×" not in sentence


def test_a_long_list_of_ties_names_the_first_few_and_counts_the_rest():
    tied = [candidate(b, b / 10, 1000.0 + b, error=100.0) for b in (1, 2, 4, 8, 16, 32, 64)]
    sentence = reason(recommend(tied, 100.0), tied, 100.0)
    assert "b=64, b=32, b=16 and 4 more settings are equally fast" in sentence


def test_reason_when_plain_fp32_wins_mentions_the_budget_and_the_margin():
    fp32 = [candidate(16, 70.0, 1000.0), candidate(32, 95.0, 1200.0)]
    bf16 = [candidate(16, 40.0, 800.0, options=BF16)]
    choice = recommend(fp32 + bf16, 100.0)
    assert choice is fp32[0]
    sentence = reason(choice, fp32 + bf16, 100.0)
    assert sentence.startswith("fp32 at b=16, k=4 is the fastest setting that fits with a 10% margin")
    assert "70 MB of 100 MB" in sentence and "1,000 samples/s" in sentence
    assert sentence.endswith("no other option combination measured faster.")
    assert reason(choice, fp32, 100.0).endswith("samples/s).")  # nothing else measured


FP32_UP_TO_16 = [candidate(8, 40.0, 800.0, error=16.0), candidate(16, 70.0, 1000.0, error=20.0),
                 candidate(32, 120.0, None, OVER_BUDGET)]  # each speed ± 2 %


def bf16_reason(bf16: list[Candidate]) -> str:
    """The reason when bf16's second candidate wins against FP32_UP_TO_16."""
    assert recommend(FP32_UP_TO_16 + bf16, 100.0) is bf16[1]
    return reason(bf16[1], FP32_UP_TO_16 + bf16, 100.0)


def test_reason_gives_the_speed_ratio_against_fp32_when_another_option_wins():
    sentence = bf16_reason([candidate(8, 25.0, 1200.0, options=BF16, error=24.0),
                            candidate(16, 45.0, 1500.0, options=BF16, error=30.0)])
    assert sentence.startswith("bf16 at b=16, k=4 is the fastest")
    assert "1.500 ± 0.042× the samples/s of fp32 without options" in sentence  # 1.5·√(0.02² + 0.02²) = 0.0424
    assert "whose recommended size within the margin is b=16" in sentence
    assert "needs less memory" not in sentence  # same b as fp32's largest


def test_reason_says_the_winner_needs_less_memory_when_its_micro_batch_is_larger():
    sentence = bf16_reason([candidate(16, 45.0, 1500.0, options=BF16, error=30.0),
                            candidate(32, 80.0, 2000.0, options=BF16, error=40.0)])
    assert "2.000 ± 0.057× the samples/s of fp32" in sentence  # 2·√(0.02² + 0.02²) = 0.0566
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


def test_a_row_carries_the_speed_its_interval_and_steps_as_json():
    row = candidate(32, 50.0, 1534.2, error=41.0).row()
    assert row["samples_per_s"] == 1534.2 and row["samples_per_s_error"] == 41.0 and row["timed_steps"] == 5
    assert row["speed"] == "1,534 ± 41"
    once = candidate(32, 50.0, 1534.2, error=math.inf).row()
    assert once["samples_per_s_error"] is None and once["speed"] == "1,534 (1 step)"
    assert json.loads(json.dumps(once, allow_nan=False))["samples_per_s_error"] is None
    assert candidate(32, 60.0, None, OVER_BUDGET).row()["speed"] is None


def _timed_in_turns(b: int, options: Options, speeds: list[float], group: int | None = 0) -> Candidate:
    """A candidate whose timed steps ran at these samples/s, turn by turn with its group's."""
    speed = estimate([b] * len(speeds), [b / v for v in speeds])
    return Candidate(options, b, 64 // b, FITS, 20.0, speed.value, b / speed.value, samples_per_s_error=speed.error,
                     timed_steps=speed.steps, turn_speeds=dict(enumerate(speeds)), timed_with=group)


# A machine whose other work comes and goes: each turn slows every candidate alike, by up to 2.5 times.
LOAD = [1.0, 0.4, 0.9, 0.5, 1.0, 0.6]


def test_candidates_timed_in_turns_are_told_apart_by_their_ratio_turn_by_turn():
    """bf16 15% faster than fp32 in every turn, under a load that swings each speed's own interval past the
    other's: the turn-by-turn ratio tells them apart, the same answer however the load fell; a turn in which
    the load slowed one step alone (bf16's last) is an outlier, left aside."""
    for load in (LOAD, LOAD[::-1], [1.0] * 6, [0.3, 1.0] * 3):
        fp32 = _timed_in_turns(64, FP32, [1000.0 * x for x in load])
        bf16 = _timed_in_turns(64, BF16, [1150.0 * x for x in load[:-1]] + [400.0])
        assert not same_speed(bf16, fp32) and ties([fp32, bf16]) == [bf16]
        assert recommend([fp32, bf16], 100.0) is bf16
    # The intervals alone (timed apart) would call it a tie, and the fewest options win it:
    apart = [_timed_in_turns(64, FP32, [1000.0 * x for x in LOAD], group=0),
             _timed_in_turns(64, BF16, [1150.0 * x for x in LOAD], group=1)]
    assert same_speed(*apart) and recommend(apart, 100.0) is apart[0]


def test_a_ratio_within_twice_the_precision_or_wavering_is_a_tie():
    """8% faster in every turn is within the 10% not claimed (each speed known to 5%); 25% faster in three turns
    of six but 20% slower in two is wavering; fewer than three turns in common fall back on the intervals."""
    fp32 = _timed_in_turns(64, FP32, [1000.0 * x for x in LOAD])
    assert same_speed(_timed_in_turns(64, BF16, [1080.0 * x for x in LOAD]), fp32)
    assert not same_speed(_timed_in_turns(64, BF16, [1120.0 * x for x in LOAD]), fp32)
    swinging = [1000.0 * x * r for x, r in zip(LOAD, [1.25, 0.8, 1.25, 0.8, 1.25, 1.0])]
    assert same_speed(_timed_in_turns(64, BF16, swinging), fp32)
    short = _timed_in_turns(64, BF16, [1150.0 * x for x in LOAD[:2]])
    assert same_speed(short, fp32)  # two turns: each interval alone, and the two overlap
