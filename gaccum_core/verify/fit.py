"""Which known mistake the split gradients fit: each mistake's prediction (gaccum_core.lab.mistakes) fitted to
them by least squares, all from their Gram matrix (the inner products of the gradients), so no fit holds a
model-sized tensor.

Two kinds of prediction. A scale law: G_s = f(k_s)·u for one unknown gradient u (f = 1/k: divided by k once too
often; f = k: summed, or divided by a fixed K). A combination: G_s = c·Σ_i w_si·v_i of known gradients v (each
micro-batch's own one-batch gradient, or the objective's), with one fitted scale c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CHUNK = 1 << 22  # elements per slice when the Gram matrix is summed


@dataclass(frozen=True)
class Fit:
    """One mistake's prediction fitted: its relative residual, and the fitted scale c where the prediction has one."""

    mistake: str
    residual: float
    factor: float | None = None
    evidence: str = ""  # for split_dependent: what shows it, in words


@dataclass(frozen=True)
class Evidence:
    """The split gradients and what the predictions combine, as indices into the Gram matrix of every gradient."""

    gram: torch.Tensor  # float64, n × n
    splits: tuple[int, ...]  # each split's gradient
    parts: tuple[tuple[tuple[int, int], ...], ...]  # per split, each micro-batch's (own gradient, samples)
    objective: int | None = None  # the objective's gradient, when one is given
    fixed_k: int | None = None


def gram(vectors: list[torch.Tensor]) -> torch.Tensor:
    """The float64 inner products of the flat vectors, summed slice by slice."""
    n, total = len(vectors), vectors[0].numel() if vectors else 0
    out = torch.zeros(n, n, dtype=torch.float64)
    for start in range(0, total, CHUNK):
        block = torch.stack([v[start:start + CHUNK].double().cpu() for v in vectors])
        out += block @ block.T
    return out


def scale_law(evidence: Evidence, law: list[float], mistake: str) -> Fit:
    """G_s = law_s·u with u fitted: the residual of the best u."""
    g, s = evidence.gram, list(evidence.splits)
    f = torch.tensor(law, dtype=torch.float64)
    own = float(g[s][:, s].diagonal().sum())
    explained = float(f @ g[s][:, s] @ f) / float(f @ f)
    return Fit(mistake, _relative(own - explained, own))


def combination(evidence: Evidence, weights: list[dict[int, float]], mistake: str) -> Fit:
    """G_s = c·Σ_i weights_s[i]·v_i with one c fitted: the residual and c."""
    g = evidence.gram
    own = along = square = 0.0
    for split, w in zip(evidence.splits, weights):
        index, values = list(w), torch.tensor(list(w.values()), dtype=torch.float64)
        own += float(g[split, split])
        along += float(values @ g[split, index])
        square += float(values @ g[index][:, index] @ values)
    if square <= 0:
        return Fit(mistake, math.inf)
    return Fit(mistake, _relative(own - along * along / square, own), along / square)


def fits(evidence: Evidence) -> list[Fit]:
    """Each accumulation mistake's fit, best first."""
    ks, summed = [len(parts) for parts in evidence.parts], _summed_class(evidence)
    found = [scale_law(evidence, [1 / k for k in ks], "divided_by_k_twice"),
             scale_law(evidence, [float(k) for k in ks], summed),
             combination(evidence, [{v: 1.0 for v, _ in parts} for parts in evidence.parts], summed),
             combination(evidence, [{v: 1 / len(parts) for v, _ in parts} for parts in evidence.parts],
                         "micro_batches_weighted_equally"),
             combination(evidence, [_by_samples(parts) for parts in evidence.parts], "weighted_by_sample_share")]
    return sorted(found, key=lambda fit: fit.residual)


def _summed_class(evidence: Evidence) -> str:
    """Whom a gradient ∝ Σ g_i (micro-batch means summed, times a constant) names. Without a fixed K: summed without
    dividing. With one, unless the full window (the first split) is off the objective: the means divided by K, which
    the splits show as equal weights (a window of uneven micro-batches), as a partial window's m / K (fewer than K),
    or as both."""
    if evidence.fixed_k is None:
        return "not_divided_by_k"
    if evidence.objective is not None and abs(scales(evidence, evidence.objective)[0] - 1) >= 0.5:
        return "not_divided_by_k"
    partial = any(len(parts) < evidence.fixed_k for parts in evidence.parts)
    uneven = any(len({samples for _, samples in parts}) > 1 for parts in evidence.parts)
    if partial and uneven:
        return "means_over_fixed_k"
    return "micro_batches_weighted_equally" if uneven else "partial_window_over_full_k"


def objective_scale(evidence: Evidence) -> Fit:
    """Every split's gradient = c × the objective's: the residual and c (constant_scale when c is not 1)."""
    return combination(evidence, [{evidence.objective: 1.0} for _ in evidence.splits], "constant_scale")


def scales(evidence: Evidence, reference: int) -> list[float]:
    """Each split's gradient projected on the reference gradient (the objective's, else the first split's)."""
    g = evidence.gram
    square = float(g[reference, reference])
    return [float(g[split, reference]) / square if square > 0 else math.nan for split in evidence.splits]


def _by_samples(parts: tuple[tuple[int, int], ...]) -> dict[int, float]:
    total = sum(samples for _, samples in parts)
    return {v: samples / total for v, samples in parts}


def _relative(residual_square: float, own: float) -> float:
    """√(residual² / Σ‖G_s‖²), 0 for round-off below zero."""
    return math.sqrt(max(residual_square, 0.0) / own) if own > 0 else math.inf


def outside_span(evidence: Evidence, vector: int, basis: list[int]) -> float:
    """The relative residual of one gradient projected on the span of others: a loss that adds up per-sample
    terms gives a batch gradient in the span of its samples' own gradients; one that mixes samples does not."""
    g = evidence.gram
    own = float(g[vector, vector])
    along = g[basis, vector]
    return _relative(own - float(along @ torch.linalg.pinv(g[basis][:, basis], hermitian=True) @ along), own)
