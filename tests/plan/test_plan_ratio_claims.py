"""The planner's sentence claims a speed ratio only where it can (issue 40, item 2): never between settings it calls
tied, always with its 95% interval, never from a speed timed over a single step. Made-up candidates, no torch."""

from __future__ import annotations

import dataclasses
import math
import re

from gaccum_core.plan.ranking import reason, recommend
from gaccum_core.plan.search import FITS, Candidate, Options

FP32, BF16, FULL = Options(), Options(amp="bf16"), Options(activation_checkpointing="full")


def timed(options: Options, b: int, peak: float, speed: float, error: float | None, steps: int = 5) -> Candidate:
    return Candidate(options, b, 64 // b, FITS, peak, speed, b / speed, samples_per_s_error=error, timed_steps=steps)


def test_settings_called_tied_are_given_no_ratio_between_them():
    """A single-step speed (no interval) ties with every setting, so all three are called equally fast; the
    checkpointed choice and fp32 b=4 are apart by their own intervals, but the sentence has just called them tied."""
    once = timed(FP32, 2, 30.0, 5000.0, math.inf, steps=1)
    choice, plain = timed(FULL, 16, 80.0, 1300.0, 13.0), timed(FP32, 4, 60.0, 1000.0, 10.0)
    candidates = [once, choice, plain]
    assert recommend(candidates, 100.0) is choice
    sentence = reason(choice, candidates, 100.0)
    assert "fp32 + ckpt/full b=16, fp32 b=4 and fp32 b=2 are equally fast" in sentence
    assert "×" not in sentence
    assert "with full checkpointing: as fast as b=4, k=16 without" in sentence


def test_every_ratio_claimed_carries_its_interval():
    plain = [timed(FP32, 8, 40.0, 800.0, 16.0), timed(FP32, 16, 70.0, 1000.0, 20.0)]
    bf16 = [timed(BF16, 16, 45.0, 1500.0, 45.0)]  # ± 3 % against fp32's ± 2 %
    sentence = reason(recommend(plain + bf16, 100.0), plain + bf16, 100.0)
    claims = re.findall(r"(\S+ ± \S+|\S+)× the samples/s", sentence)
    assert claims == ["1.500 ± 0.054"]  # 1.5 · √(0.03² + 0.02²) = 0.0541


def test_a_speed_timed_over_one_step_gives_no_ratio_whatever_error_is_recorded():
    """One timed step has no interval: inf in the candidate, null in its JSON row."""
    plain = timed(FP32, 16, 70.0, 1000.0, 20.0)
    for error in (None, math.inf):
        once = timed(BF16, 16, 45.0, 3000.0, error, steps=1)
        sentence = reason(once, [plain, once], 100.0)
        assert "×" not in sentence, sentence


def test_a_ratio_wider_than_its_interval_says_so_after_its_times_sign():
    """Timed in the same turns, the choice is faster in every turn (told apart), but each speed's own interval is
    wide (a loaded machine): the ratio is claimed with its interval, the words about its width after the ×, not
    between the number and the × (seen in CI: '1.2 ± 1.3 (interval wider than the value)× the samples/s')."""
    from gaccum_core.plan.ranking import ratio_words

    turns = dict(timed_with=1)
    fast = timed(FP32, 16, 40.0, 1200.0, 1400.0)
    slow = timed(FP32, 8, 30.0, 1000.0, 1100.0)
    fast, slow = (dataclasses.replace(c, turn_speeds=speeds, **turns)
                  for c, speeds in ((fast, {0: 1200.0, 1: 1300.0, 2: 1100.0, 3: 1250.0}),
                                    (slow, {0: 1000.0, 1: 1050.0, 2: 900.0, 3: 1000.0})))
    # the median of the turns' ratios, 1.23, times √((1400/1200)² + (1100/1000)²) = 1.60: ± 1.97
    assert ratio_words(fast, slow, []) == "1.2 ± 2.0× (interval wider than the value)"
