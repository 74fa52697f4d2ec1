"""A plan's progress count: memory probes and timed steps done, about how many in all, as the plan
learns how many sizes it times and how long their steps take."""

from __future__ import annotations

import math

from gaccum_core.plan.progress import TYPICAL_STEPS, Tally
from gaccum_core.plan.search import FITS, Candidate, Options
from gaccum_core.plan.speed import Timing


def stepped(steps: int, step_time_s: float, error: float) -> Candidate:
    return Candidate(Options(), 64, 4, FITS, 10.0, 1000.0, step_time_s, samples_per_s_error=error, timed_steps=steps)


def test_before_anything_it_counts_typical_probes_and_steps():
    tally = Tally(5, 4, 2, Timing())
    assert tally.about() == 4 * 5 + 8 * TYPICAL_STEPS


def test_probes_beyond_the_typical_count_grow_the_total_and_a_finished_search_shrinks_it():
    tally = Tally(5, 2, 2, Timing())
    for _ in range(7):
        tally.probed()
    assert tally.about() == 7 + 5 + 4 * TYPICAL_STEPS  # the first combination took 7: at least what was done
    tally.searched()
    tally.probed()
    tally.searched()
    assert tally.about() == 8 + 4 * TYPICAL_STEPS
    tally.timing_starts(3)  # only 3 sizes fit the margin
    assert tally.about() == 8 + 3 * TYPICAL_STEPS


def test_timed_sizes_count_the_steps_to_their_cap_until_they_finish():
    tally = Tally(5, 1, 2, Timing(cap_s=1.0, max_steps=20))
    tally.searched()
    tally.timing_starts(2)
    tally.stepped(0, stepped(1, 0.2, math.inf), False)  # 0.2 s of 1 s: 4 more to the cap
    assert tally.about() == 1 + 4 + TYPICAL_STEPS
    tally.stepped(1, stepped(3, 0.1, 10.0), True)  # known within 5% after 3 steps: finished
    assert tally.about() == 2 + 4
    tally.stepped(0, stepped(18, 0.01, 300.0), False)  # far from the cap: the most steps bound it
    assert tally.about() == 3 + 2
    tally.stepped(0, stepped(19, 0.2, 300.0), False)  # past the cap but not finished: at least one more
    assert tally.about() == 4 + 1
    tally.stepped(0, stepped(20, 0.2, 300.0), True)
    assert tally.about() == tally.done == 5
