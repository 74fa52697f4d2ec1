"""The recommendation among measured candidates and why, in words: speeds that cannot be told apart are ties,
and the largest micro-batch among ties wins (fewer accumulation steps). Candidates timed in the same turns are
compared step by step (the ratio of their speeds, turn by turn); others by their 95% intervals. Pure, like
search.py."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from gaccum_core.intervals import plus_minus
from gaccum_core.plan.search import MARGIN, UNAVAILABLE, Candidate, Options, mb, within
from gaccum_core.plan.speed import PRECISION, Ratio, indistinguishable, paired_ratio

MAX_NAMED = 4  # tied settings named in the reason


def recommend(candidates: Sequence[Candidate], budget_mb: float, margin: float = MARGIN,
              precision: float = PRECISION) -> Candidate | None:
    """Among the timed candidates whose peak leaves `margin` of the budget free, those whose speed cannot
    be told from the fastest's are ties: the largest b of them (fewer accumulation steps), then the
    fewest options, then the first measured."""
    safe = [c for c in candidates if _safe(c, budget_mb, margin)]
    if not safe:
        return None
    return max(ties(safe, precision), key=lambda c: (c.micro_batch_size, -options_on(c.options)))


def ties(candidates: Sequence[Candidate], precision: float = PRECISION) -> list[Candidate]:
    """The timed candidates whose speed cannot be told from the fastest's (the fastest among them)."""
    timed = [c for c in candidates if c.samples_per_s is not None]
    if not timed:
        return []
    # The fastest: the one whose speed against every other's is the highest at its lowest (candidates timed in
    # turns are compared turn by turn: their means follow the turns a burst of other work fell on).
    fastest = max(timed, key=lambda c: min((speed_ratio(c, other) for other in timed if other is not c), default=1.0))
    return [c for c in timed if same_speed(c, fastest, precision)]


def speed_ratio(a: Candidate, b: Candidate) -> float:
    """a's speed over b's: the median ratio turn by turn when they were timed in the same turns, else the ratio
    of their means."""
    ratio = _paired(a, b)
    return ratio.value if ratio is not None else a.samples_per_s / b.samples_per_s


def ratio_words(a: Candidate, b: Candidate, tied: Sequence[Candidate], precision: float = PRECISION) -> str | None:
    """a's speed over b's with its 95% interval, '1.30 ± 0.06×' (to be followed by 'the samples/s of'; a
    wider interval than the ratio says so after the ×: '1.2 ± 1.3× (interval wider than the value)'); None
    where no ratio may be claimed: both are among the settings called tied, their speeds cannot be told apart, or
    either speed has no interval (timed over a single step). The half-width is what the two speeds' intervals
    give their ratio (first order); for candidates timed in the same turns it is wider than the paired
    comparison's, whose shared slowdowns cancel."""
    if (a in tied and b in tied) or not (_interval(a) and _interval(b)) or same_speed(a, b, precision):
        return None
    value = speed_ratio(a, b)
    spread = math.hypot(a.samples_per_s_error / a.samples_per_s, b.samples_per_s_error / b.samples_per_s)
    number, _, words = plus_minus(value, value * spread).partition(" (")
    return f"{number}×" + (f" ({words}" if words else "")


def _interval(candidate: Candidate) -> bool:
    """Whether the candidate's speed has a 95% interval: two timed steps or more, a finite half-width."""
    error = candidate.samples_per_s_error
    return (candidate.timed_steps or 0) >= 2 and error is not None and math.isfinite(error)


def _paired(a: Candidate, b: Candidate) -> Ratio | None:
    """Their speeds' ratio turn by turn, when they were timed in the same turns (enough of them)."""
    if a.timed_with is None or a.timed_with != b.timed_with:
        return None
    return paired_ratio(a.turn_speeds, b.turn_speeds)


def same_speed(a: Candidate, b: Candidate, precision: float = PRECISION) -> bool:
    """Whether two timed candidates' speeds cannot be told apart. Timed in the same turns: unless the median
    of their speeds' ratios, turn by turn, differs from 1 by more than twice `precision`, the same one faster
    in most turns (speed.Ratio; a burst of other work on the machine slows both steps of a turn and cancels,
    one that slows a single step is an outlier the median leaves aside). Otherwise: whether their 95%
    intervals overlap, each at least `precision` of its speed wide (steps timed seconds apart on a shared
    machine drift more than one candidate's steps vary, so a finer difference is not claimed)."""
    ratio = _paired(a, b)
    if ratio is not None:
        return not ratio.tells_apart(precision)
    return indistinguishable(a.samples_per_s, _error(a, precision), b.samples_per_s, _error(b, precision))


def _error(candidate: Candidate, precision: float) -> float:
    """The speed's half-width, at least `precision` of the speed."""
    return max(candidate.samples_per_s_error or 0.0, precision * candidate.samples_per_s)


def reason(choice: Candidate | None, candidates: Sequence[Candidate], budget_mb: float, margin: float = MARGIN,
           precision: float = PRECISION) -> str:
    """Why this is the recommendation, in a sentence or two: the settings it ties with on speed, and how
    it compares with plain fp32 where that was measured."""
    if choice is None:
        return _why_nothing(candidates, budget_mb, margin)
    safe = [c for c in candidates if _safe(c, budget_mb, margin)]
    tied = ties(safe, precision)
    figures = f"({mb(choice.peak_mb)} of {mb(budget_mb)}, {choice.speed_words()})"
    setting = f"{choice.options.label()} at b={choice.micro_batch_size}, k={choice.accum_steps}"
    if len(tied) > 1:
        text = (f"{setting} fits with a {margin:.0%} margin {figures}: {_tie_words(choice, tied, precision)}")
    else:
        text = f"{setting} is the fastest setting that fits with a {margin:.0%} margin {figures}"
    text += checkpointing_trade(choice, safe, budget_mb, margin, precision)
    plain_safe = [c for c in safe if c.options == Options()]
    # said just above
    only_checkpointing = choice.options == Options(activation_checkpointing=choice.options.activation_checkpointing)
    if not plain_safe or choice.options == Options() or only_checkpointing:
        others = {c.options for c in candidates} - {choice.options}
        return text + ("; no other option combination measured faster." if others and len(tied) == 1 else ".")
    return text + _against_plain(choice, plain_safe, tied, budget_mb, margin, precision) + "."


def checkpointing_trade(choice: Candidate, safe: Sequence[Candidate], budget_mb: float, margin: float = MARGIN,
                        precision: float = PRECISION) -> str:
    """The activation-checkpointing trade in numbers, where the plan crossed it: '; b=16, k=4 with full
    checkpointing: 1.30 ± 0.06× the samples/s of b=4, k=16 without, at 82% of the budget' (the choice against the
    recommendation of its options without checkpointing), or for a choice without it, what each checkpointing
    mode would fit and at what speed. '' when only one checkpointing setting was measured."""
    crossed = sorted({c.options.activation_checkpointing for c in safe} - {choice.options.activation_checkpointing})
    if not crossed:
        return ""
    mine, tied = choice.options.activation_checkpointing, ties(safe, precision)
    clauses = []
    for other in (["off"] if mine != "off" else crossed):
        if other not in crossed:
            continue
        same_but = dataclasses.replace(choice.options, activation_checkpointing=other)
        rival = recommend([c for c in safe if c.options == same_but], budget_mb, margin, precision)
        if rival is None:
            continue
        if mine != "off":
            ratio = ratio_words(choice, rival, tied, precision)
            speed = "as fast as" if ratio is None else f"{ratio} the samples/s of"
            clauses.append(f"b={choice.micro_batch_size}, k={choice.accum_steps} {choice.options.checkpointing_words()}:"
                           f" {speed} b={rival.micro_batch_size}, k={rival.accum_steps} without, at "
                           f"{choice.peak_mb / budget_mb:.0%} of the budget")
        else:
            ratio = ratio_words(rival, choice, tied, precision)
            speed = "as fast" if ratio is None else f"at {ratio} the samples/s"
            clauses.append(f"{other} checkpointing fits b={rival.micro_batch_size}, k={rival.accum_steps} at "
                           f"{rival.peak_mb / budget_mb:.0%} of the budget, {speed} (it recomputes each block's "
                           "activations in backward)")
    if mine != "off" and not clauses:
        clauses.append(f"without checkpointing no size of these options fits with the {margin:.0%} margin")
    return "".join("; " + clause for clause in clauses)


def _tie_words(choice: Candidate, tied: Sequence[Candidate], precision: float) -> str:
    """'b=32 and b=16 are equally fast within the measurement's precision; the larger b is recommended: ...'."""
    same_options = all(c.options == choice.options for c in tied)
    ordered = sorted(tied, key=lambda c: -c.micro_batch_size)  # stable: measured order within a size
    names = [f"b={c.micro_batch_size}" if same_options else f"{c.options.label()} b={c.micro_batch_size}"
             for c in ordered]
    if len(names) > MAX_NAMED:  # a long list says nothing more: the first few, then how many
        names = names[:MAX_NAMED - 1] + [f"{len(names) - MAX_NAMED + 1} more settings"]
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    which = "larger" if len(tied) == 2 else "largest"
    text = (f"{listed} are equally fast within the measurement's precision (timed in turns, they differ by "
            f"less than {2 * precision:.0%}, or not in most turns); "
            f"the {which} b is recommended: fewer accumulation steps")
    if sum(c.micro_batch_size == choice.micro_batch_size for c in tied) > 1:
        text += ", and of those the one with the fewest options"
    return text


def _against_plain(choice: Candidate, plain_safe: Sequence[Candidate], tied: Sequence[Candidate],
                   budget_mb: float, margin: float, precision: float) -> str:
    """'; 1.50 ± 0.04× the samples/s of fp32 without options, whose ...': the recommendation against plain fp32."""
    plain = recommend(plain_safe, budget_mb, margin, precision)
    largest = max(c.micro_batch_size for c in plain_safe)
    room = (f"; it needs less memory: b={choice.micro_batch_size} fits where fp32 stops at b={largest}"
            if choice.micro_batch_size > largest else "")
    if any(c.options == Options() for c in tied):  # fp32 is named among the ties: no ratio to quote
        return room
    ratio = ratio_words(choice, plain, tied, precision)
    if ratio is None:
        return f"; as fast as fp32 without options at b={plain.micro_batch_size} within the precision{room}"
    return (f"; {ratio} the samples/s of fp32 without options, "
            f"whose recommended size within the margin is b={plain.micro_batch_size}{room}")


def options_on(options: Options) -> int:
    """How many of amp, cache clearing, compile and activation checkpointing are on."""
    return sum(value != "off" for value in (options.amp, options.clear_cache, options.compile,
                                            options.activation_checkpointing))


def _safe(c: Candidate, budget_mb: float, margin: float) -> bool:
    return within(c, (1 - margin) * budget_mb) and c.samples_per_s is not None


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
