"""The planner's search: for an effective batch E, the largest micro-batch b that divides E and fits a
memory budget, per option combination (measuring around where the memory line predicts the budget
falls), and which sizes to time (ranking.py recommends among them).

Pure logic: a candidate is measured by a function the caller passes in (gaccum_core.plan.probe on a real
device, a fake memory model in tests), so the search knows nothing of torch.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from gaccum_core.intervals import plus_minus
from gaccum_core.plan.memory_line import predicted_index

FITS, OVER_BUDGET, OUT_OF_MEMORY, FAILED, UNAVAILABLE = "fits", "over budget", "out of memory", "failed", "unavailable"
MARGIN = 0.10  # the recommendation keeps this share of the budget free: measured peaks move between runs
MAX_LINE_PROBES = 4  # sizes chosen by the memory line per search; then bisection, whatever the memory does
TYPICAL_PROBES = 5   # memory probes of one combination when memory is linear: 2 points, the answer, its neighbours
TIMED_PER_OPTIONS = 2  # the largest size within the margin and the one below it are timed


@dataclass(frozen=True)
class Options:
    """The run options a plan crosses: mixed precision, cache clearing, torch.compile, sharding over the ranks,
    activation checkpointing."""

    amp: str = "off"
    clear_cache: str = "off"
    compile: str = "off"
    sharding: str = "ddp"  # ddp, fsdp/every or fsdp/last (plan.sharding)
    activation_checkpointing: str = "off"  # activation checkpointing: off, selective or full (the base run's ac_every)

    def label(self) -> str:
        """Short words for charts and tables: 'fp32', 'bf16 + clear/step + compile', 'fp32 + fsdp/every',
        'fp32 + ckpt/full'."""
        parts = ["fp32" if self.amp == "off" else self.amp]
        if self.clear_cache != "off":
            parts.append(f"clear/{self.clear_cache}")
        if self.compile != "off":
            parts.append("compile" if self.compile == "default" else f"compile/{self.compile}")
        if self.sharding != "ddp":
            parts.append(self.sharding)
        if self.activation_checkpointing != "off":
            parts.append(f"ckpt/{self.activation_checkpointing}")
        return " + ".join(parts)

    def checkpointing_words(self) -> str:
        """'with full checkpointing', 'with selective checkpointing', 'without checkpointing'."""
        mode = self.activation_checkpointing
        return "without checkpointing" if mode == "off" else f"with {mode} checkpointing"

    def unsharded(self) -> Options:
        """The same options in one process: what a sharded mode's per-rank memory is counted from."""
        return dataclasses.replace(self, sharding="ddp")


@dataclass(frozen=True)
class Candidate:
    """One measured (options, b): its status, peak memory and speed (None where not measured)."""

    options: Options
    micro_batch_size: int
    accum_steps: int
    status: str
    peak_mb: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    detail: dict = dataclasses.field(default_factory=dict)  # memory parts, allocator figures, messages
    samples_per_s_error: float | None = None  # half-width of the speed's 95% interval (inf: one step)
    timed_steps: int | None = None  # optimizer steps the speed is the mean of
    turn_speeds: dict[int, float] = dataclasses.field(default_factory=dict)  # samples/s of its step in each turn
    timed_with: int | None = None  # the group of candidates timed in the same turns (the same number: paired)

    @property
    def fits(self) -> bool:
        """Measured without running out of memory and within the budget."""
        return self.status == FITS

    def row(self) -> dict:
        """A flat row for a table, a CSV or JSON."""
        return {"options": self.options.label(), **dataclasses.asdict(self.options),
                "micro_batch_size": self.micro_batch_size, "accum_steps": self.accum_steps,
                "status": self.status, "peak_mb": self.peak_mb, "samples_per_s": self.samples_per_s,
                "samples_per_s_error": _finite(self.samples_per_s_error), "timed_steps": self.timed_steps,
                "speed": self.speed_words(unit=False), "step_time_s": self.step_time_s, **self.detail}

    def speed_words(self, unit: bool = True) -> str | None:
        """'1,530 ± 40 samples/s' (unit=False: '1,530 ± 40'), saying so when the interval is wider than the
        speed and how many timed steps would narrow it; None when not timed."""
        if self.samples_per_s is None:
            return None
        return plus_minus(self.samples_per_s, self.samples_per_s_error, "samples/s" if unit else "",
                          count=self.timed_steps, counted="step")


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an unknown error is null (timed_steps says why)."""
    return value if value is None or math.isfinite(value) else None


Measure = Callable[[Options, int], Candidate]  # memory of (options, b): a status and a peak


def mb(value: float) -> str:
    """Megabytes with three significant digits below 1000 (0.25 MB, 64 MB), whole ones above (5000 MB)."""
    return f"{value:.3g} MB" if value < 1000 else f"{value:.0f} MB"


def divisors(n: int) -> list[int]:
    """Every divisor of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sizes_within(effective_batch: int, largest: int | None = None) -> list[int]:
    """The micro-batch sizes a plan may try: E's divisors, at most `largest` (the data set's size)."""
    return [d for d in divisors(effective_batch) if largest is None or d <= largest]


def search(effective_batch: int, options: Options, measure: Measure, budget_mb: float, largest: int | None = None,
           known: Iterable[Candidate] = (), hints: Sequence[tuple[int, float]] = ()) -> list[Candidate]:
    """The candidates newly measured to find the largest b dividing E whose peak is within budget_mb.

    The first size is the one the `hints` (another combination's (b, peak) points) predict, else the
    smallest; each next one is the size the memory line through this combination's measured points
    predicts to be the largest within (or, once measured, its neighbour above, to confirm); bisection
    once the line has missed. It ends when the answer's neighbour above has been measured and is not
    within. `known` candidates (of any options) are not measured again; `largest` caps b. Memory is
    assumed to grow with b."""
    sizes = sizes_within(effective_batch, largest)
    seen = {c.micro_batch_size: c for c in known if c.options == options}
    new: list[Candidate] = []

    def fits_at(index: int) -> bool:
        if sizes[index] not in seen:
            seen[sizes[index]] = measure(options, sizes[index])
            new.append(seen[sizes[index]])
        return within(seen[sizes[index]], budget_mb)

    good = max((i for i, b in enumerate(sizes) if b in seen and within(seen[b], budget_mb)), default=None)
    hinted = predicted_index(sizes, hints, budget_mb) if sizes and good is None else None
    if hinted is not None and hinted >= 0 and fits_at(hinted):
        good = hinted
    if good is None:
        good = 0
        while good < len(sizes) and not fits_at(good):
            if not seen[sizes[good]].detail.get("larger_may_work"):  # e.g. BatchNorm on one sample: next size
                return new
            good += 1
        if good == len(sizes):
            return new
    bad = min((i for i in range(good + 1, len(sizes)) if sizes[i] in seen), default=len(sizes))
    line_probes = 0
    while bad - good > 1:
        points = [(b, c.peak_mb) for b, c in seen.items() if c.peak_mb is not None]
        guess = predicted_index(sizes, points, budget_mb) if line_probes < MAX_LINE_PROBES else None
        index = (good + bad) // 2 if guess is None else min(max(guess, good + 1), bad - 1)
        fitted = fits_at(index)
        if guess is not None:  # the line missed: bisection from here on, so the count stays bounded
            line_probes = line_probes + 1 if fitted == (index <= guess) else MAX_LINE_PROBES
        good, bad = (index, bad) if fitted else (good, index)
    return new


def most_measurements(effective_batch: int, largest: int | None = None) -> int:
    """An upper bound on the memory probes of one option combination (search for the budget, then for
    the margin, then the size below the largest within the margin): each size once at most."""
    count = len(sizes_within(effective_batch, largest))
    per_search = 1 + MAX_LINE_PROBES + max(0, count - 1).bit_length()
    return min(count, 2 * per_search + 1)


def typical_probes(effective_batch: int, largest: int | None = None) -> int:
    """The memory probes one option combination typically takes when memory is linear in b (for the
    progress bar and the page; most_measurements bounds it)."""
    return min(len(sizes_within(effective_batch, largest)), TYPICAL_PROBES)


def timing_sizes(effective_batch: int, candidates: Iterable[Candidate], options: Options, budget_mb: float,
                 margin: float = MARGIN, largest: int | None = None) -> list[int]:
    """The sizes to time for these options: the largest measured within the margin and the divisor just
    below it (largest first): where the recommendation is decided. Empty when none is within."""
    sizes = sizes_within(effective_batch, largest)
    limit = (1 - margin) * budget_mb
    inside = [c.micro_batch_size for c in candidates if c.options == options and within(c, limit)]
    if not inside:
        return []
    top = sizes.index(max(inside))
    return sizes[max(0, top - TIMED_PER_OPTIONS + 1):top + 1][::-1]


def hint_points(candidates: Iterable[Candidate], options: Options) -> list[tuple[int, float]]:
    """(b, peak) points of one other combination measured before, to place this one's first probe: one
    that differs only in cache clearing (which leaves training memory as it is), else the first measured. A hint
    only chooses what to measure first."""
    others = [c for c in candidates if c.options != options and c.peak_mb is not None]
    alike = [c for c in others if c.options == dataclasses.replace(options, clear_cache=c.options.clear_cache)]
    source = (alike or others)[0].options if others else None
    return [(c.micro_batch_size, c.peak_mb) for c in others if c.options == source]


def within(candidate: Candidate, limit_mb: float) -> bool:
    """Measured to fit, and its peak within limit_mb (the budget, or the budget less the margin)."""
    return candidate.fits and candidate.peak_mb is not None and candidate.peak_mb <= limit_mb


def best_fit(candidates: Iterable[Candidate]) -> Candidate | None:
    """The largest b that fits among one combination's candidates."""
    fitting = [c for c in candidates if c.fits]
    return max(fitting, key=lambda c: c.micro_batch_size) if fitting else None


def combinations(amp: Sequence[str], clear_cache: Sequence[str], compile_modes: Sequence[str],
                 sharding: Sequence[str] = ("ddp",),
                 activation_checkpointing: Sequence[str] = ("off",)) -> list[Options]:
    """Every combination of the chosen values, plain fp32 (all off, ddp) first when chosen: the baseline."""
    combos = [Options(*values) for values in itertools.product(amp, clear_cache, compile_modes, sharding,
                                                               activation_checkpointing)]
    return sorted(combos, key=lambda o: o != Options())  # stable: the rest keep the order given
