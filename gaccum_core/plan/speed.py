"""How fast a candidate trains, from its timed optimizer steps: the mean samples/s with its 95% interval,
when timing may stop, and whether two speeds can be told apart.

Pure: the step times come in, numbers go out (no torch, no clock), so the rule is tested with made-up
timings and gives the same answer for the same timings.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from gaccum_core.intervals import t_975

PRECISION = 0.05  # timing stops once the 95% interval's half-width is within 5% of the speed
MIN_STEPS = 3     # an interval from two steps rests on one difference: never "known" from fewer than three


@dataclass(frozen=True)
class Speed:
    """A measured speed: the mean of the timed steps' samples/s and the half-width of its 95% interval."""

    value: float
    error: float  # math.inf from a single step: no interval
    steps: int

    @property
    def relative_error(self) -> float:
        """The half-width as a share of the speed (inf when unknown)."""
        return self.error / self.value if self.value > 0 else math.inf


def estimate(samples: Sequence[float], seconds: Sequence[float]) -> Speed:
    """The speed of steps that trained samples[i] in seconds[i]: the mean of samples/s per step, with its
    t-interval (each step one measurement; a noisy step widens the interval rather than moving a median)."""
    if not samples or len(samples) != len(seconds) or min(seconds) <= 0:
        raise ValueError(f"one positive duration per step is needed, got {list(seconds)} for {list(samples)}")
    speeds = [n / s for n, s in zip(samples, seconds)]
    mean = statistics.fmean(speeds)
    if len(speeds) < 2:
        return Speed(mean, math.inf, 1)
    return Speed(mean, t_975(len(speeds) - 1) * statistics.stdev(speeds) / math.sqrt(len(speeds)), len(speeds))


def known(speed: Speed, precision: float = PRECISION, min_steps: int = MIN_STEPS) -> bool:
    """Whether the speed is known to the stated precision: enough steps and a narrow enough interval."""
    return speed.steps >= min_steps and speed.relative_error <= precision


@dataclass(frozen=True)
class Timing:
    """When a candidate's timing stops: its speed known within `precision` (95% interval), or `cap_s`
    seconds of timed steps (after MIN_STEPS at least: from 2 steps the interval is 3x as wide), or
    `max_steps` steps."""

    precision: float = PRECISION
    cap_s: float = 1.0
    max_steps: int = 20

    def done(self, speed: Speed, seconds: float) -> bool:
        """Whether to stop timing after `seconds` of timed steps with this estimate."""
        least = min(MIN_STEPS, self.max_steps)
        return (known(speed, self.precision, least) or speed.steps >= self.max_steps
                or (seconds >= self.cap_s and speed.steps >= least))


Step = Callable[[], Optional[Mapping[str, float]]]  # one timed optimizer step's row; None: it failed


def time_in_turns(steps: Sequence[Step], timing: Timing,
                  on_step: Callable[[int, Speed, bool], None] | None = None) -> list[tuple[Speed | None, list]]:
    """Run the candidates' steps in turns (one step each, round and round) until `timing` is done for
    each, its cap counting its own timed seconds: a burst of someone else's work on the machine then
    slows every candidate alike instead of one; the order within a turn rotates (on a machine shared with
    other work a step's place in the turn can change its speed). A step that returns None drops its candidate. Per
    candidate, its speed (None if no step ran) and its rows, each with the turn it ran in ("turn");
    on_step(index, speed, finished) after every step."""
    rows: list[list] = [[] for _ in steps]
    speeds: list[Speed | None] = [None] * len(steps)
    active, turn = list(range(len(steps))), 0
    while active:
        shift = turn % len(active)  # each candidate first in its turn, then second...: no place is always its own
        for i in active[shift:] + active[:shift]:
            row = steps[i]()
            if row is None:
                active.remove(i)
                continue
            rows[i].append({**row, "turn": turn})
            speeds[i] = estimate([r["samples"] for r in rows[i]], [r["step_time_s"] for r in rows[i]])
            if timing.done(speeds[i], sum(r["step_time_s"] for r in rows[i])):
                active.remove(i)
            if on_step is not None:
                on_step(i, speeds[i], i not in active)
        turn += 1
    return list(zip(speeds, rows))


def turn_speeds(rows: Sequence[Mapping[str, float]]) -> dict[int, float]:
    """Samples/s by turn, from time_in_turns' rows (a row timed outside them has no turn: left out)."""
    return {int(r["turn"]): r["samples"] / r["step_time_s"] for r in rows if "turn" in r}


def indistinguishable(a: float, a_error: float | None, b: float, b_error: float | None) -> bool:
    """Whether two speeds' 95% intervals overlap (an error of None counts as exact, inf overlaps all)."""
    return abs(a - b) <= (a_error or 0.0) + (b_error or 0.0)


AGREEING = 0.75  # the share of turns in which the faster by the median must be the faster, for a claim


@dataclass(frozen=True)
class Ratio:
    """How much faster one candidate trained than another, step by step in the same turns: the median of the
    per-turn ratios of their samples/s, the share of turns that agree with it on which is faster, and the
    turns compared."""

    value: float
    agreeing: float
    turns: int

    def tells_apart(self, precision: float = PRECISION) -> bool:
        """Whether the two differ by more than twice `precision` (each speed is known to `precision` at best),
        the same one faster in at least AGREEING of the turns: a finer or a wavering difference is not
        claimed."""
        return abs(math.log(self.value)) > math.log1p(2 * precision) and self.agreeing >= AGREEING


def paired_ratio(a: Mapping[int, float], b: Mapping[int, float]) -> Ratio | None:
    """a's speed against b's (samples/s by turn) over the turns both were timed in: the median of their
    ratios, turn by turn. A burst of someone else's work that slows both steps of a turn cancels in their
    ratio; one that slows a single step makes one turn's ratio an outlier, which the median leaves aside
    (on a loaded machine the mean of a few turns follows it). None from fewer than MIN_STEPS turns in
    common."""
    common = sorted(a.keys() & b.keys())
    if len(common) < MIN_STEPS:
        return None
    ratios = [a[t] / b[t] for t in common]
    median = statistics.median(ratios)
    agreeing = sum((r > 1) == (median > 1) for r in ratios if r != 1) / len(ratios)
    return Ratio(median, agreeing, len(common))
