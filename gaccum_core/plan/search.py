"""The planner's search: for an effective batch E, the largest micro-batch b that divides E and fits a
memory budget, per option combination, and the recommendation across them.

Pure logic: a candidate is measured by a function the caller passes in (gaccum_core.plan.probe on a real
device, a fake memory model in tests), so the search knows nothing of torch.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

FITS, OVER_BUDGET, OUT_OF_MEMORY, FAILED, UNAVAILABLE = "fits", "over budget", "out of memory", "failed", "unavailable"
MARGIN = 0.10  # the recommendation keeps this share of the budget free: measured peaks move between runs


@dataclass(frozen=True)
class Options:
    """The run options a plan crosses: mixed precision, cache clearing, torch.compile."""

    amp: str = "off"
    clear_cache: str = "off"
    compile: str = "off"

    def label(self) -> str:
        """Short words for charts and tables: 'fp32', 'bf16 + clear/step + compile'."""
        parts = ["fp32" if self.amp == "off" else self.amp]
        if self.clear_cache != "off":
            parts.append(f"clear/{self.clear_cache}")
        if self.compile != "off":
            parts.append("compile" if self.compile == "default" else f"compile/{self.compile}")
        return " + ".join(parts)


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

    @property
    def fits(self) -> bool:
        """Measured without running out of memory and within the budget."""
        return self.status == FITS

    def row(self) -> dict:
        """A flat row for a table, a CSV or JSON."""
        return {"options": self.options.label(), **dataclasses.asdict(self.options),
                "micro_batch_size": self.micro_batch_size, "accum_steps": self.accum_steps,
                "status": self.status, "peak_mb": self.peak_mb, "samples_per_s": self.samples_per_s,
                "step_time_s": self.step_time_s, **self.detail}


Measure = Callable[[Options, int], Candidate]


def mb(value: float) -> str:
    """Megabytes with three significant digits below 1000 (0.25 MB, 64 MB), whole ones above (5000 MB)."""
    return f"{value:.3g} MB" if value < 1000 else f"{value:.0f} MB"


def divisors(n: int) -> list[int]:
    """Every divisor of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def search(effective_batch: int, options: Options, measure: Measure, largest: int | None = None) -> list[Candidate]:
    """Candidates measured to find the largest b dividing E that fits: doubling over E's divisors
    from the smallest, then bisection between the last that fitted and the first that did not.
    `largest` caps b (a data set smaller than E). Memory is assumed to grow with b."""
    sizes = [d for d in divisors(effective_batch) if largest is None or d <= largest]
    measured: list[Candidate] = []

    def fits(index: int) -> bool:
        measured.append(measure(options, sizes[index]))
        return measured[-1].fits

    good = 0
    while good < len(sizes) and not fits(good):
        if not measured[-1].detail.get("larger_may_work"):  # e.g. BatchNorm on one sample: try the next size
            return measured
        good += 1
    if good == len(sizes):
        return measured
    bad = len(sizes)
    while good < len(sizes) - 1:  # doubling: the smallest divisor at least twice the last that fitted
        nxt = max(good + 1, bisect.bisect_left(sizes, 2 * sizes[good]))
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
            break
    while bad - good > 1:  # bisection over the divisors strictly between
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return measured


def most_measurements(effective_batch: int, largest: int | None = None) -> int:
    """An upper bound on search()'s measurements for one option combination (for a progress bar)."""
    count = len([d for d in divisors(effective_batch) if largest is None or d <= largest])
    return min(count, effective_batch.bit_length() + max(0, count - 1).bit_length())


def best_fit(candidates: Iterable[Candidate]) -> Candidate | None:
    """The largest b that fits among one combination's candidates."""
    fitting = [c for c in candidates if c.fits]
    return max(fitting, key=lambda c: c.micro_batch_size) if fitting else None


def recommend(candidates: Sequence[Candidate], budget_mb: float, margin: float = MARGIN) -> Candidate | None:
    """The fastest measured candidate whose peak leaves `margin` of the budget free."""
    safe = [c for c in candidates if _safe(c, budget_mb, margin)]
    return max(safe, key=lambda c: (c.samples_per_s, c.micro_batch_size)) if safe else None


def reason(choice: Candidate | None, candidates: Sequence[Candidate], budget_mb: float, margin: float = MARGIN) -> str:
    """One sentence on why this is the recommendation, against the plain fp32 option where measured."""
    if choice is None:
        return _why_nothing(candidates, budget_mb, margin)
    head = (f"{choice.options.label()} at b={choice.micro_batch_size}, k={choice.accum_steps} is the fastest setting "
            f"that fits with a {margin:.0%} margin ({mb(choice.peak_mb)} of {mb(budget_mb)}, "
            f"{choice.samples_per_s:.0f} samples/s)")
    plain_safe = [c for c in candidates if c.options == Options() and _safe(c, budget_mb, margin)]
    if not plain_safe or choice.options == Options():
        others = {c.options for c in candidates} - {choice.options}
        return head + ("; no other option combination measured faster." if others else ".")
    plain = recommend(plain_safe, budget_mb, margin)
    largest = max(c.micro_batch_size for c in plain_safe)
    room = (f"; it needs less memory: b={choice.micro_batch_size} fits where fp32 stops at b={largest}"
            if choice.micro_batch_size > largest else "")
    return (head + f": {choice.samples_per_s / plain.samples_per_s:.2f}× the samples/s of fp32 without options, "
            f"whose fastest within the margin is b={plain.micro_batch_size}{room}.")


def _safe(c: Candidate, budget_mb: float, margin: float) -> bool:
    return c.fits and c.peak_mb is not None and c.peak_mb <= (1 - margin) * budget_mb and c.samples_per_s is not None


def _why_nothing(candidates: Sequence[Candidate], budget_mb: float, margin: float) -> str:
    if not candidates:
        return "Nothing was measured: no micro-batch size divides the effective batch within the data set."
    if all(c.status == UNAVAILABLE for c in candidates):
        return "None of the chosen options works on this device: " + candidates[0].detail.get("message", "")
    smallest = min(candidates, key=lambda c: (c.micro_batch_size, c.peak_mb or 0))
    if any(c.fits for c in candidates):
        return (f"Every size that fits leaves less than {margin:.0%} of the {mb(budget_mb)} budget free: "
                "raise the budget or choose a smaller model.")
    return (f"Nothing fits in {mb(budget_mb)}, not even b={smallest.micro_batch_size} "
            f"({smallest.status}{_peak(smallest)}): raise the budget, choose a smaller model or image size, "
            "or use bf16/fp16.")


def _peak(candidate: Candidate) -> str:
    return f", {mb(candidate.peak_mb)}" if candidate.peak_mb is not None else ""


def combinations(amp: Sequence[str], clear_cache: Sequence[str], compile_modes: Sequence[str]) -> list[Options]:
    """Every combination of the chosen values, plain fp32 (all off) first when chosen: the baseline."""
    combos = [Options(a, c, m) for a, c, m in itertools.product(amp, clear_cache, compile_modes)]
    return sorted(combos, key=lambda o: o != Options())  # stable: the rest keep the order given
