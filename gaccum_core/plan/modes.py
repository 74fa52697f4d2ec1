"""The recommendation across sharding modes, and why in words. The unsharded (ddp) candidates are timed and
ranked by speed (ranking.py); the sharded ones are counted, not timed, so the modes are ranked by memory: the
mode that fits the largest micro-batch per rank wins, and modes fitting the same b go to the one with the fewest
collectives (ddp < fsdp/last < fsdp/every). Pure, like ranking.py."""

from __future__ import annotations

from typing import Sequence

from gaccum_core.plan.ranking import options_on, reason, recommend
from gaccum_core.plan.search import MARGIN, Candidate, mb, within
from gaccum_core.plan.sharding import COLLECTIVES_ORDER, DDP, EVERY, LAST
from gaccum_core.plan.speed import PRECISION


def choose(candidates: Sequence[Candidate], budget_mb: float, world_size: int, margin: float = MARGIN,
           precision: float = PRECISION) -> tuple[Candidate | None, str]:
    """The recommended candidate and the sentence that says why (ranking.reason's when only ddp was asked)."""
    ddp = [c for c in candidates if c.options.sharding == DDP]
    timed = recommend(ddp, budget_mb, margin, precision)
    modes = [m for m in COLLECTIVES_ORDER if any(c.options.sharding == m for c in candidates)]
    if modes == [DDP]:
        return timed, reason(timed, candidates, budget_mb, margin, precision)
    fits = {m: _largest_safe(candidates, m, budget_mb, margin) for m in modes}
    fitting = [m for m in modes if fits[m] is not None]
    if not fitting:
        return None, reason(None, candidates, budget_mb, margin, precision)
    winner = max(fitting, key=lambda m: (fits[m].micro_batch_size, -COLLECTIVES_ORDER.index(m)))
    top = fits[winner].micro_batch_size
    if winner == DDP and timed is not None:
        tie = any(fits[m] is not None and fits[m].micro_batch_size == top for m in fitting if m != DDP)
        head = reason(timed, ddp, budget_mb, margin, precision).rstrip(".") + f"; ddp fits b={top} per rank, " + (
            "as large as a sharded mode, with the fewest collectives" if tie else "the largest of the modes")
        return timed, head + _others(DDP, fits, candidates, world_size) + "."
    choice = _pick(candidates, winner, top, timed, budget_mb, margin)
    head = (f"{choice.options.label()} at b={choice.micro_batch_size}, k={choice.accum_steps} fits the largest "
            f"micro-batch per rank with a {margin:.0%} margin ({mb(choice.peak_mb)} of {mb(budget_mb)} per rank): "
            f"{_why(winner, candidates, top, world_size)}")
    untimed = " Sharded modes are counted, not timed: one process cannot time their collectives." \
        if winner != DDP else ""
    return choice, head + _others(winner, fits, candidates, world_size) + "." + untimed


def _largest_safe(candidates: Sequence[Candidate], mode: str, budget_mb: float, margin: float) -> Candidate | None:
    """The mode's candidate with the largest b that leaves the margin free (the first measured of a size)."""
    safe = [c for c in candidates if c.options.sharding == mode and within(c, (1 - margin) * budget_mb)]
    return max(safe, key=lambda c: c.micro_batch_size) if safe else None


def _pick(candidates: Sequence[Candidate], mode: str, b: int, timed: Candidate | None, budget_mb: float,
          margin: float) -> Candidate:
    """Of the mode's safe candidates at b: the options ddp's timing chose where they are among them, else the
    fewest options, then the first measured."""
    at_b = [c for c in candidates if c.options.sharding == mode and c.micro_batch_size == b
            and within(c, (1 - margin) * budget_mb)]
    same = [c for c in at_b if timed is not None and c.options.unsharded() == timed.options]
    return same[0] if same else min(at_b, key=lambda c: options_on(c.options))


def _others(winner: str, fits: dict[str, Candidate | None], candidates: Sequence[Candidate], world_size: int) -> str:
    """'; ddp fits b=16 (weights, gradients and optimizer state whole on each rank); fsdp/last fits b=32 (...)'."""
    top = fits[winner].micro_batch_size
    clauses = []
    for mode in COLLECTIVES_ORDER:
        if mode == winner or mode not in fits:
            continue
        found = fits[mode]
        size = f"fits b={found.micro_batch_size}" if found is not None else "fits no b"
        if found is not None and found.micro_batch_size == top:
            size += " too, with more collectives"
        clauses.append(f"{mode} {size} ({_why(mode, candidates, top, world_size)})")
    return "".join("; " + clause for clause in clauses)


def _why(mode: str, candidates: Sequence[Candidate], b: int, world_size: int) -> str:
    """What the mode keeps on each rank, in words, with the extra gradient of fsdp/last at b where known."""
    if mode == DDP:
        return "weights, gradients and optimizer state whole on each rank"
    if mode == EVERY:
        return f"weights, gradients and optimizer state 1/{world_size} per rank"
    extra = _gradient_over_every(candidates, b)
    more = f", +{mb(extra)} at b={b}" if extra else " when k > 1"
    return f"weights and optimizer state 1/{world_size} per rank, but the whole fp32 gradient kept between " \
           f"micro-batches{more}"


def _gradient_over_every(candidates: Sequence[Candidate], b: int) -> float | None:
    """fsdp/last's gradient memory over fsdp/every's at b, where both were counted with the same options."""
    for last in (c for c in candidates if c.options.sharding == LAST and c.micro_batch_size == b):
        for every in (c for c in candidates if c.options.sharding == EVERY and c.micro_batch_size == b
                      and c.options.unsharded() == last.options.unsharded()):
            if "gradients_mb" in last.detail and "gradients_mb" in every.detail:
                return last.detail["gradients_mb"] - every.detail["gradients_mb"]
    return None
