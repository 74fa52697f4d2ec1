"""The four post-training reports as pitfalls (REPORT_PITFALLS): each report's loop (report_loops) beside gaccum's
exact loop, on the bundled pg rollouts with a tiny gpt, from one copy each of the same seeded weights on the same
windows in the engine's order.

Measured on the first window (the first step's gradient, before any weights move): ‖g_bug‖ / ‖g_exact‖, their
cosine, and for SGD the effective learning-rate factor where the error is a constant scale (the ratio itself); then
the L2 distance between the two loops' weights after each of N SGD steps (the drift). The exact loop runs on the
report's own micro-batches (verl's token budget, or b samples each): the engine's weighting is exact for any cut.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd
import torch

from gaccum_core.config import ConfigError
from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import REPORT_PITFALLS, case_config, setup_words
from gaccum_core.lab.pitfalls.report_loops import LOOPS, SPLITS, WINDOWS, Learner, Loop, by_samples, exact
from gaccum_core.lab.pitfalls.result import Snapshot, distances
from gaccum_core.models.build import build_seeded_model

STEPS = 10
# The mistakes whose gradient is a constant scale c of the exact one: for SGD, a learning rate c · lr.
SCALES = ("divided_by_k_twice", "constant_scale")
Progress = Callable[[int, int], None]  # told (runs done, runs in all)


@dataclass(frozen=True)
class ReportCase:
    """One report's loop against the exact loop: the first window's gradients, and the drift over N SGD steps."""

    key: str
    grad_ratio: float  # ‖g_bug‖ / ‖g_exact‖ on the first window
    cosine: float  # between g_bug and g_exact on the first window
    predicted_scale: float | None  # the scale the report predicts, from the window's counts (None: not a scale)
    never_trained: int  # samples of an epoch the report's loop never trains
    frame: pd.DataFrame  # one row per optimizer step (REPORT_COLUMNS)
    exact_gradient: torch.Tensor = field(repr=False)  # the first window's, flat, float64
    bug_gradient: torch.Tensor = field(repr=False)

    @property
    def lr_factor(self) -> float | None:
        """SGD's effective learning-rate factor, where the report's error is a constant scale (else None)."""
        return self.grad_ratio if REPORT_PITFALLS[self.key].mistake in SCALES else None

    @property
    def final_drift(self) -> float:
        """The L2 distance between the two loops' weights after the last step."""
        return float(self.frame["drift"].iloc[-1])


REPORT_COLUMNS = ["step", "drift", "grad_norm_bug", "grad_norm_exact", "grad_norm_ratio", "loss_bug", "loss_exact",
                  "samples_bug", "samples_exact"]


def case_words(key: str, steps: int = STEPS) -> str:
    """What the case trains, read off its settings, and what its loop does to the windows."""
    config = case_config(key)
    b, k, seq = config.micro_batch_size, config.accum_steps, config.max_seq_len
    cut = {"verl_sample_share": f"micro-batches cut by a budget of {b * (seq + 1)} tokens (b sequences of full "
                                "length), so they hold uneven numbers of sequences",
           "trl_generation_batch": f"a generation batch of 2 windows ({2 * b * k} sequences)",
           "ms_swift_k_twice": f"the window's token mean divided by k = {k} again",
           "mlx_lm_micro_batch_means": "only windows of k whole micro-batches (the epoch's last partial one dropped)"}
    return (f"Trains {setup_words(key)}, dropout off, token-mean of −A·log p; {cut[key]}; {steps} SGD steps, "
            "beside gaccum's exact loop from the same weights.")


def run_reports(steps: int = STEPS, progress: Progress | None = None) -> dict[str, ReportCase]:
    """Every report's case, by REPORT_PITFALLS key in its order: its loop and the exact loop for `steps` steps."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", steps, "an integer ≥ 1")
    config = case_config(next(iter(REPORT_PITFALLS)))  # the four share their settings
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    splits = list(dict.fromkeys(SPLITS.get(key, by_samples) for key in REPORT_PITFALLS))
    total, done = len(splits) + len(REPORT_PITFALLS), itertools.count(1)
    tell = progress or (lambda finished, of: None)

    def run(loop: Loop) -> tuple[list[Snapshot], Learner]:
        learner = Learner(config, data.train, model, steps)
        snapshots = list(itertools.islice(loop(learner), steps))
        tell(next(done), total)
        return snapshots, learner

    exact_runs = {split: run(exact(split)) for split in splits}
    return {key: _case(key, run(LOOPS[key]), exact_runs[SPLITS.get(key, by_samples)]) for key in REPORT_PITFALLS}


def _case(key: str, bug: tuple[list[Snapshot], Learner], exact_run: tuple[list[Snapshot], Learner]) -> ReportCase:
    """The case's figures from its loop's run and the exact loop's."""
    (bug_steps, learner), (exact_steps, exact_learner) = bug, exact_run
    g_bug, g_exact = learner.first_gradient, exact_learner.first_gradient
    ratio = (torch.linalg.vector_norm(g_bug) / torch.linalg.vector_norm(g_exact)).item()
    cosine = torch.nn.functional.cosine_similarity(g_bug, g_exact, dim=0).item()
    order, windows = next(learner.epochs())
    kept = WINDOWS.get(key, lambda _, every: every)(learner, windows)
    return ReportCase(key, ratio, cosine, _predicted(key, learner, order, windows), len(learner.train) -
                      sum(w.samples for w in kept), _frame(bug_steps, exact_steps), g_exact, g_bug)


def _predicted(key: str, learner: Learner, order: torch.Tensor, windows: list) -> float | None:
    """The scale a constant-scale report predicts for the first window, from its counts: 1/k, or the window's
    tokens over its generation batch's (2 windows)."""
    if key == "ms_swift_k_twice":
        return 1 / learner.k
    if key == "trl_generation_batch":
        first, second = (learner.tokens(order, w.micro_batches) for w in windows[:2])
        return first / (first + second)
    return None


def _frame(bug: list[Snapshot], exact_steps: list[Snapshot]) -> pd.DataFrame:
    """One row per optimizer step: the drift between the loops' weights, their gradient norms, losses and samples."""
    return pd.DataFrame({
        "step": range(1, len(bug) + 1), "drift": distances(bug, exact_steps),
        "grad_norm_bug": [s.grad_norm for s in bug], "grad_norm_exact": [s.grad_norm for s in exact_steps],
        "grad_norm_ratio": [b.grad_norm / e.grad_norm if e.grad_norm > 0 else float("nan")
                            for b, e in zip(bug, exact_steps)],
        "loss_bug": [s.loss for s in bug], "loss_exact": [s.loss for s in exact_steps],
        "samples_bug": [s.samples for s in bug], "samples_exact": [s.samples for s in exact_steps]})

