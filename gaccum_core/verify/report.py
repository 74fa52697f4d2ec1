"""What verify found, as a report and in words: one verdict line in `check`'s wording, the diagnosis and its fix."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gaccum_core.lab.mistakes import MISTAKES
from gaccum_core.lab.verdict import PRECISION_NAMES, quoted, tolerance_words
from gaccum_core.models.build import active_dropout
from gaccum_core.verify.fit import Fit
from gaccum_core.verify.run import Bench
from gaccum_core.verify.splits import Split, describe
from gaccum_core.words import plural

PASSED_FIX = "nothing to fix: the loop accumulates as one big batch"


@dataclass(frozen=True)
class SplitResult:
    """One split: its micro-batch sizes, its relative max-abs difference from the first split, and its gradient
    projected on the reference (the objective's gradient, else the first split's): 1 when they agree."""

    sizes: Split
    difference: float
    scale: float


@dataclass(frozen=True)
class VerifyReport:
    """The check's outcome: invariance, the objective's agreement, the mistake that fits and its words."""

    invariant: bool
    matches_objective: bool | None  # None: no objective given
    mistake: str | None  # a key of gaccum_core.lab.mistakes.MISTAKES; None when the loop passes
    residual: float | None  # the mistake's fit, relative
    factor: float | None  # the fitted scale c where the prediction has one
    verdict: str
    fix: str
    splits: tuple[SplitResult, ...]
    precision: str  # fp32, fp16 or bf16: what the tolerance is for
    tolerance: float

    @property
    def passed(self) -> bool:
        """Split-invariant, and matching the objective where one was given."""
        return self.invariant and self.matches_objective is not False

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (verify --json)."""
        out = dataclasses.asdict(self)
        out["passed"] = self.passed
        out["mistake_name"] = MISTAKES[self.mistake].name if self.mistake else None
        out["splits"] = [{"sizes": list(s.sizes), "difference": s.difference, "scale": s.scale} for s in self.splits]
        return out


def report(bench: Bench, results: list[SplitResult], mistake: str | None, fit: Fit | None, tolerance: float,
           matches: bool | None = None) -> VerifyReport:
    """The report, its verdict written from what was measured and the mistake's fix."""
    invariant = mistake != "nondeterministic" and max(r.difference for r in results) <= tolerance
    words = _verdict(bench, results, mistake, fit, invariant, matches)
    fix = MISTAKES[mistake].fix if mistake else PASSED_FIX if matches is not False else \
        "make the window's loss the objective's: it is split-invariant, but not the gradient of the objective"
    return VerifyReport(invariant, matches, mistake, fit.residual if fit else None, fit.factor if fit else None,
                        words, fix, tuple(results), PRECISION_NAMES[bench.amp], tolerance)


def _verdict(bench: Bench, results: list[SplitResult], mistake: str | None, fit: Fit | None, invariant: bool,
             matches: bool | None) -> str:
    bound = tolerance_words(bench.amp)
    if mistake == "nondeterministic":
        drops = active_dropout(bench.model) if bench.model.training else []
        where = f" (active dropout layers {quoted(drops)})" if drops else ""
        return (f"random: {_first(results)} run twice gives two gradients, {results[0].difference:.2g} apart, above "
                f"{bound}{where}; no diagnosis: make the loop deterministic first.")
    worst = max(results, key=lambda r: r.difference)
    if invariant:
        line = (f"split-invariant: the largest relative difference is {worst.difference:.2g} over "
                f"{plural(len(results), 'split')}, below {bound}.")
        if matches is None or matches:
            return line + (" It matches the objective." if matches else "")
        if fit is None:
            return line + " But its gradient is no scale of the objective's: the window minimises another loss."
        return line + (f" But it is {fit.factor:.3g} × the objective's gradient: {MISTAKES[mistake].name} "
                       f"(relative residual {fit.residual:.2g}).")
    line = (f"not split-invariant: the split {describe(worst.sizes)} differs from {_first(results)} by "
            f"{worst.difference:.2g}, above {bound} (the largest of {plural(len(results), 'split')}).")
    known = MISTAKES[mistake]
    if mistake == "split_dependent":
        return (f"{line} It is not an accumulation error: the loss depends on which samples share a micro-batch; "
                f"{fit.evidence}.")
    if mistake == "unknown_weighting":
        return (f"{line} The loss adds up over samples, but the window weights its micro-batches some other way: "
                f"{fit.evidence}.")
    scale = f", fitted scale {fit.factor:.3g}" if fit.factor is not None else ""
    return f"{line} It fits {known.name}: {known.prediction} (relative residual {fit.residual:.2g}{scale})."


def _first(results: list[SplitResult]) -> str:
    sizes = results[0].sizes
    return "the whole batch" if len(sizes) == 1 else f"the split {describe(sizes)}"
