"""The one writer of 'x ± y' on made-up measurements: two significant digits for the interval, the value to its
place (or to given decimals), and, when the interval is wider than the value, how many measurements would
bring it within ±50 % — checked against Student's t from scipy, not against the module's own table."""

import math
import statistics

import pytest
from scipy import stats

from gaccum_core.intervals import count_for, plus_minus, t_975, wide_words
from gaccum_core.plan.search import FITS, Candidate, Options
from gaccum_core.plan.speed import estimate
from gaccum_core.sweeps.stats import mean_ci


def needed_by_scipy(values: list[float], within: float = 0.5) -> int:
    """The least n whose 95 % half-width, with the values' standard deviation, is within ±`within` of their mean."""
    mean, spread = statistics.fmean(values), statistics.stdev(values)
    return next(n for n in range(2, 10_000)
                if stats.t.ppf(0.975, n - 1) * spread / math.sqrt(n) <= within * abs(mean))


@pytest.mark.parametrize("values", [[1000.0, 8000.0], [2.0, 12.6], [1000.0, 1800.0, 6000.0], [100.0, 3000.0]])
def test_an_interval_wider_than_its_value_says_how_many_repeats_would_bring_it_within_half(values):
    mean, half = mean_ci(values)
    assert half > mean  # two or three repeats this far apart: Student's t with 1 or 2 degrees of freedom
    needed = needed_by_scipy(values)
    assert count_for(mean, half, len(values)) == needed
    words = f"interval wider than the value: about {needed} repeats would bring it within ±50 %"
    assert plus_minus(mean, half, "samples/s", digits=0, count=len(values)).endswith(f" samples/s ({words})")


def test_the_words_are_left_out_while_the_interval_is_no_wider_than_the_value():
    mean, half = mean_ci([1000.0, 1100.0, 1050.0])
    assert plus_minus(mean, half, "samples/s", digits=0, count=3) == "1,050 ± 120 samples/s"
    assert wide_words(100.0, 100.0, 2) == ""  # as wide as the value: still says something
    assert wide_words(100.0, 100.5, 2).startswith("interval wider than the value: about ")


def test_without_a_count_or_with_a_mean_of_zero_the_interval_is_flagged_without_an_estimate():
    assert plus_minus(7.3, 82.0, "s", digits=1) == "7.3 ± 82 s (interval wider than the value)"
    assert plus_minus(0.0, 0.3, digits=2, count=2) == "0.00 ± 0.30 (interval wider than the value)"
    assert count_for(5.0, 9.0, 1) is None and count_for(0.0, 9.0, 4) is None


def test_beyond_the_tables_rows_the_count_is_the_least_n_that_reaches_the_precision():
    for half in (1e4, 1e5, 1e6):  # 2 repeats of a figure near 100 spread this widely: n in the hundreds and more
        needed = count_for(100.0, half, 2)
        spread = half * math.sqrt(2) / t_975(1)
        assert needed > 121 and t_975(needed - 1) * spread / math.sqrt(needed) <= 50.0
        assert t_975(needed - 2) * spread / math.sqrt(needed - 1) > 50.0  # one fewer falls short


def test_the_interval_is_written_to_two_significant_digits_and_the_value_to_its_place_or_its_decimals():
    assert plus_minus(1534.2, 41.0, "samples/s") == "1,534 ± 41 samples/s"
    assert plus_minus(1534.26, 3.74) == "1,534.3 ± 3.7"
    assert plus_minus(1534.2, 0.0) == "1,534 ± 0"
    assert plus_minus(0.24137, 2.5931, digits=4) == "0.2414 ± 2.6 (interval wider than the value)"
    assert plus_minus(1234.4, 53.3, digits=0) == "1,234 ± 53"
    assert plus_minus(0.1719, 0.04996, digits=4) == "0.1719 ± 0.050"
    assert plus_minus(4338.0, 41234.0, digits=0).startswith("4,338 ± 41,000 (")


def test_no_interval_gives_the_value_alone_and_one_step_says_so():
    assert plus_minus(1534.2, None, "samples/s") == "1,534 samples/s"
    assert plus_minus(0.5, math.nan, digits=3) == "0.500"  # one repeat: no interval
    assert plus_minus(1534.2, math.inf, "samples/s", counted="step") == "1,534 samples/s (1 step)"
    assert plus_minus(math.nan, math.nan, digits=3) == "" and plus_minus(None, 1.0) == ""


def test_a_plan_speed_wider_than_itself_says_how_many_timed_steps_would_narrow_it():
    """The issue's '773 ± 1656': three timed steps this noisy. The same writer, counting timed steps."""
    steps = [200.0, 200.0, 1919.0]  # samples/s of each timed step: the samples of 1 s each
    speed = estimate(steps, [1.0] * 3)
    candidate = Candidate(Options(), 32, 2, FITS, 10.0, speed.value, 0.1, samples_per_s_error=speed.error,
                          timed_steps=speed.steps)
    needed = needed_by_scipy(steps)
    assert candidate.speed_words() == (f"773 ± 2,500 samples/s (interval wider than the value: about {needed} steps "
                                       "would bring it within ±50 %)")
    assert candidate.row()["speed"].startswith("773 ± 2,500 (interval wider than the value: ")
