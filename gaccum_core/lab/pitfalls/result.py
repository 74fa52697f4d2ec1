"""What a loop's run leaves, one Snapshot per optimizer step, and the PitfallResult that sets a
pitfall's run and the correct loop's run against the big-batch reference.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd
import torch


@dataclass(frozen=True)
class Snapshot:
    """One optimizer step as a loop left it."""

    weights: torch.Tensor  # all parameters after the step, flat, float64
    grad_norm: float  # of the gradient the optimizer was handed (unscaled, before clipping)
    loss: float  # mean per-sample loss of the samples fed since the previous step
    samples: int


@dataclass(frozen=True)
class PitfallResult:
    """A pitfall's run and the correct loop's run, measured against the big-batch reference."""

    key: str
    frame: pd.DataFrame  # one row per optimizer step
    final_distance_pitfall: float
    final_distance_correct: float
    grad_norm_ratio: float  # median over steps of pitfall grad norm / reference grad norm


def flat(params: list[torch.Tensor]) -> torch.Tensor:
    """All the parameters' current values in one float64 vector, detached: a copy the next step leaves alone.
    A sharded (FSDP) parameter is gathered whole, a collective: every rank of the job must call this together."""
    return torch.cat([_whole(p.detach()).reshape(-1) for p in params]).double()


def _whole(param: torch.Tensor) -> torch.Tensor:
    return param.full_tensor() if hasattr(param, "full_tensor") else param


def compare(key: str, pitfall: list[Snapshot], reference: list[Snapshot], correct: list[Snapshot],
            correct_reference: list[Snapshot]) -> PitfallResult:
    """The pitfall's distance from reference and the correct loop's from correct_reference, step by step."""
    ratios = [p.grad_norm / r.grad_norm if r.grad_norm > 0 else float("nan") for p, r in zip(pitfall, reference)]
    frame = pd.DataFrame({
        "step": range(1, len(pitfall) + 1),
        "distance_pitfall": distances(pitfall, reference),
        "distance_correct": distances(correct, correct_reference),
        "grad_norm_ratio": ratios,
        "loss_pitfall": [s.loss for s in pitfall],
        "loss_correct": [s.loss for s in correct],
        "samples_pitfall": [s.samples for s in pitfall],  # samples fed since the previous step
    })
    return PitfallResult(key, frame, float(frame["distance_pitfall"].iloc[-1]),
                         float(frame["distance_correct"].iloc[-1]), float(statistics.median(ratios)))


def distances(run: list[Snapshot], reference: list[Snapshot]) -> list[float]:
    """The L2 distance between the two runs' weights after each step."""
    return [torch.linalg.vector_norm(a.weights - b.weights).item() for a, b in zip(run, reference)]
