"""The accumulation mistakes by name: one catalog for the pitfall gallery (each case names the mistake it makes)
and for `verify` (which fits a user's loop to these predictions and names the one that fits). Words only: no torch.

A prediction is what the loop's window gradient equals, with g the exact one (the gradient of the whole window's
loss, aggregated as the objective means) and g_i the exact gradient of micro-batch i alone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    """One way an accumulation loop's gradient misses the big batch's."""

    key: str
    name: str  # the words the pages and verify print
    prediction: str  # what the window's gradient equals instead of g
    fix: str  # one line
    reports: tuple[str, ...] = ()  # public reports of it, "owner/repository #number"
    accumulation_error: bool = True  # False: no loss weighting fixes it (the loss itself depends on the split)


MISTAKES: dict[str, Mistake] = {m.key: m for m in (
    Mistake("divided_by_k_twice", "divided by k once too often",
            "g / k: the window's loss, already divided by its count, divided by k again",
            "divide the window's loss sum by its count once, not again by k", ("modelscope/ms-swift #10117",)),
    Mistake("not_divided_by_k", "summed without dividing by the window's count, or divided by a fixed K",
            "k · g (or K · g): k micro-batch means added up",
            "divide each micro-batch's loss sum by the window's sample (token) count"),
    Mistake("micro_batches_weighted_equally", "micro-batches weighted equally whatever their token or sample counts",
            "(1/k) Σ g_i: each micro-batch's own mean, divided by k",
            "divide each micro-batch's loss sum by the window's count, not its own", ("ml-explore/mlx-lm #1413",)),
    Mistake("weighted_by_sample_share", "micro-batches weighted by their share of samples, not of tokens",
            "Σ (n_i / n) g_i: each micro-batch's token mean, scaled by its share n_i / n of the window's samples",
            "divide each micro-batch's token-loss sum by the window's token count", ("volcengine/verl #5625",)),
    Mistake("partial_window_over_full_k", "a partial window divided by the full K",
            "(m / K) · g on a window of m < K micro-batches; exact on full windows",
            "divide by this window's count (its micro-batches or samples), not the configured K"),
    Mistake("means_over_fixed_k", "each micro-batch's mean divided by the configured K: micro-batches weighted "
            "equally, and a partial window scaled by m / K",
            "(1/K) Σ g_i: exact only for a full window of equal micro-batches",
            "divide each micro-batch's loss sum by the window's sample (token) count, counted before the first backward"),
    Mistake("constant_scale", "a constant scale against the objective",
            "c · g for every split: split-invariant, but the gradient of c times the objective",
            "normalise by the window's own count, not a larger (or smaller) batch's", ("huggingface/trl #6024",)),
    Mistake("unknown_weighting", "micro-batches weighted some other way",
            "none of the predictions above, though each micro-batch's gradient adds up over its samples",
            "divide each micro-batch's loss sum by the window's sample (token) count, counted before the first backward"),
    Mistake("split_dependent", "none of these: the loss depends on which samples share a micro-batch",
            "no scale of g: each split gives its own gradient",
            "not an accumulation error: no weighting fixes it (BatchNorm, in-batch negatives, an auxiliary loss "
            "over the micro-batch, per-micro-batch normalisation, padding-dependent positions)",
            accumulation_error=False),
    Mistake("nondeterministic", "the same split twice gives two gradients",
            "random: dropout or a nondeterministic kernel draws anew on each run",
            "model.eval() or dropout 0 (and deterministic kernels) before checking", accumulation_error=False),
)}


def mistake(key: str) -> Mistake:
    """Mistake `key`, or a KeyError listing them."""
    if key not in MISTAKES:
        raise KeyError(f"unknown mistake {key!r}: one of {', '.join(MISTAKES)}")
    return MISTAKES[key]
