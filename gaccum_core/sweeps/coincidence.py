"""Whether cells that differ only in b and k, at the same effective batch and seed, train the same losses:
what exact accumulation promises (reduction mean or sum), and what the textbook mean per micro-batch
breaks on a partial window, or on sequences holding different numbers of target tokens (text not packed).
Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from gaccum_core.config import RunConfig

# Largest relative loss difference still read as the same run: float rounding of sums taken in another
# order, grown over the steps (fp32), or of autocast's reduced precision on other shapes.
TOLERANCE = {"off": 1e-4, "bf16": 1e-2, "fp16": 1e-2}
EXACT_REDUCTIONS = ("mean", "sum")  # weighted by sample count: any b·k = E gives the same step


@dataclass(frozen=True)
class Verdict:
    """A group of cells that differ only in b and k: whether each coincides with the first (the reference)."""

    cells: tuple[int, ...]  # reference first
    labels: tuple[str, ...]
    reduction: str
    tolerance: float
    diffs: tuple[float, ...]  # per cell after the reference: its largest relative loss difference to it
    steps: tuple[int | None, ...]  # the step of that difference
    language: bool = False  # language runs: micro-batches weighed by target tokens
    packed: bool = False  # text packed into full sequences: every full micro-batch holds as many target tokens

    @property
    def expected(self) -> bool:
        """Whether exact accumulation promises these cells coincide."""
        return self.reduction in EXACT_REDUCTIONS

    @property
    def surprising(self) -> bool:
        """Whether the outcome is not what the settings explain: exact cells apart, or textbook cells together
        without packing to explain it."""
        return self.coincide != self.expected and not (self.coincide and self.packed)

    @property
    def coincide(self) -> bool:
        """Whether every cell's losses stay within the tolerance of the reference's."""
        return all(d <= self.tolerance for d in self.diffs)

    @property
    def largest(self) -> tuple[str, float, int | None]:
        """(label, relative difference, step) of the cell farthest from the reference."""
        i = int(np.argmax(self.diffs))
        return self.labels[i + 1], self.diffs[i], self.steps[i]

    def text(self) -> str:
        """The verdict in one sentence, the cells named by what tells them apart (b and k), what they share after."""
        names, shared = _told_apart(self.labels)
        together = " and ".join(names) + (f" ({shared})" if shared else "")
        label, diff, step = self.largest
        label = names[self.labels.index(label)]
        if self.coincide:
            return (f"{together} coincide, as exact accumulation promises: their losses differ by at most "
                    f"{diff:.1e} (relative)." if self.expected else
                    f"{together} coincide (reduction {self.reduction}: {self._why_together()}; "
                    f"largest difference {diff:.1e}).")
        where = f" at step {step}" if step is not None else ""
        gap = ("not comparable (no repeat done in both, other step counts or a non-finite loss)" if math.isinf(diff)
               else f"{diff:.1e} (relative){where}, above the {self.tolerance:.0e} tolerance")
        why = ("they must coincide under reduction mean or sum: a bug, or rounding grown beyond the tolerance"
               if self.expected else f"expected under reduction {self.reduction}: the textbook loss weighs "
                                     + ("micro-batches holding different numbers of target tokens equally"
                                        if self.language and not self.packed else "a partial window's micro-batches equally"))
        return f"{together} do not coincide: {label} differs from {names[0]} by {gap}; {why}."

    def _why_together(self) -> str:
        """Why textbook cells coincided: packing (every full micro-batch as many target tokens), or no partial window."""
        if self.packed:
            return ("packed, every full micro-batch holds as many target tokens, so the textbook weighting is the exact "
                    "one wherever no partial window comes")
        return "no partial window made them differ"


def _told_apart(labels: tuple[str, ...]) -> tuple[list[str], str]:
    """Each label without the words every label has, and those shared words: (['b=8 k=8', 'b=32 k=2'], 'bf16')."""
    words = [label.split() for label in labels]
    shared = [w for w in words[0] if all(w in other for other in words[1:])]
    own = [" ".join(w for w in label if w not in shared) or " ".join(label) for label in words]
    return own, " ".join(shared)


def group_key(config: RunConfig) -> tuple:
    """What cells must share to be compared: every setting but b, k and the device, and b·k·N."""
    return config.replace(micro_batch_size=1, accum_steps=1, device="auto"), config.effective_batch_size


def relative_gap(a: Sequence[float], b: Sequence[float]) -> tuple[float, int | None]:
    """(max |a - b| / max |a|, the index where |a - b| is largest) over equally long finite series;
    (inf, None) when they cannot be compared."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) != len(b) or len(a) == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf, None
    gaps = np.abs(a - b)
    at = int(np.argmax(gaps))
    return float(gaps[at] / max(float(np.max(np.abs(a))), 1e-12)), at


def verdicts(configs: Mapping[int, RunConfig], labels: Mapping[int, str],
             losses: Mapping[tuple[int, int], Sequence[float]]) -> list[Verdict]:
    """One verdict per group of two or more cells differing only in b and k, comparing each cell's
    losses (by repeat: the same seed) with the group's first cell's; losses[(cell, repeat)] per step.
    Cells with no done run yet are left out (a sweep going)."""
    groups: dict[tuple, list[int]] = {}
    with_runs = {cell for cell, _ in losses}
    for cell, config in configs.items():
        if cell in with_runs:
            groups.setdefault(group_key(config), []).append(cell)
    found = []
    for members in groups.values():
        if len(members) < 2:
            continue
        reference, diffs, steps = members[0], [], []
        for cell in members[1:]:
            diff, step = _largest_over_repeats(losses, reference, cell)
            diffs.append(diff)
            steps.append(step)
        config = configs[reference]
        found.append(Verdict(tuple(members), tuple(labels[c] for c in members), config.reduction,
                             TOLERANCE.get(config.amp, TOLERANCE["off"]), tuple(diffs), tuple(steps), config.is_text,
                             config.is_text and (config.packing == "on" or config.dataset == "tokens")))
    return found


def _largest_over_repeats(losses: Mapping[tuple[int, int], Sequence[float]], reference: int,
                          cell: int) -> tuple[float, int | None]:
    """The largest gap between the two cells' losses over the repeats both have (inf when none)."""
    worst: tuple[float, int | None] = (-1.0, None)
    for (c, repeat), loss in losses.items():
        if c != cell or (reference, repeat) not in losses:
            continue
        diff, at = relative_gap(losses[(reference, repeat)], loss)
        if diff > worst[0]:
            worst = (diff, None if at is None else at + 1)  # steps count from 1
    return worst if worst[0] >= 0 else (math.inf, None)
