"""How far a plan has come, for a progress bar and its "about N s left": the memory probes and timed
steps done, and about how many the plan takes in all (each a fraction of a second to a few: one unit).

Pure: a plan reports what it did, this counts. Before a combination is searched it counts the typical
memory probes; before a size is timed, TYPICAL_STEPS; once timing, what its timing rule still asks for.
"""

from __future__ import annotations

import math

from gaccum_core.plan.search import Candidate
from gaccum_core.plan.speed import MIN_STEPS, Timing

TYPICAL_STEPS = 3  # timed steps of a size before any is timed (the precision or the cap ends most there)


class Tally:
    """Memory probes and timed steps done, and about how many in all."""

    def __init__(self, probes_per_combination: int, combinations: int, timed_per_combination: int,
                 timing: Timing) -> None:
        self.per_combination, self.combinations_left = probes_per_combination, combinations
        self.timing, self.done, self.probes_here = timing, 0, 0
        self.timed: list[Candidate | None] = [None] * (timed_per_combination * combinations)  # a guess until known
        self.finished: set[int] = set()

    def probed(self) -> None:
        """One more memory probe of the combination being searched."""
        self.done += 1
        self.probes_here += 1

    def searched(self) -> None:
        """The combination being searched is done."""
        self.combinations_left -= 1
        self.probes_here = 0

    def timing_starts(self, count: int) -> None:
        """The memory phase is over: `count` sizes are to be timed."""
        self.combinations_left, self.timed = 0, [None] * count

    def stepped(self, index: int, candidate: Candidate, finished: bool) -> None:
        """Timed size `index` ran one more step (its last when finished); candidate carries its speed so far."""
        self.done += 1
        self.timed[index] = candidate
        if finished:
            self.finished.add(index)

    def about(self) -> int:
        """About how many probes and steps in all, never fewer than done."""
        probes = 0
        if self.combinations_left:
            probes = max(self.per_combination - self.probes_here, 0) + self.per_combination * (self.combinations_left - 1)
        return self.done + probes + sum(self._steps_left(c) for i, c in enumerate(self.timed) if i not in self.finished)

    def _steps_left(self, candidate: Candidate | None) -> int:
        """Steps a size still being timed will take: TYPICAL_STEPS before its first, then at least one
        and MIN_STEPS in all, up to the cap at its median step time, within the most steps."""
        if candidate is None or not candidate.timed_steps:
            return TYPICAL_STEPS
        steps, step_s = candidate.timed_steps, candidate.step_time_s
        to_cap = math.ceil((self.timing.cap_s - step_s * steps) / step_s) if step_s > 0 else 1
        return max(min(max(to_cap, MIN_STEPS - steps), self.timing.max_steps - steps), 1)
