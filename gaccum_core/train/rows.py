"""Each optimizer step's metrics row (STEP_COLUMNS): the step measured over the whole job, counted into
the run's totals, with its rates.

One host sync per step; on several ranks one small all_gather (distributed.combine_ranks), which also
carries each rank's stop request so that every rank stops after the same step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gaccum_core.train.accumulation import Window
from gaccum_core.train.checkpoint_state import Counters
from gaccum_core.train.distributed import CollectiveCount, Ranks, combine_ranks
from gaccum_core.train.metrics import Row
from gaccum_core.train.step import StepResult, StopCheck

Figures = dict[str, float | None]


@dataclass(frozen=True)
class StepWork:
    """What one optimizer step trained on, and its clock readings (time.perf_counter)."""

    window: Window
    count: int            # what the window's mean divides by: its samples, or its target tokens for text
    epoch: int
    lr: float             # the rate the step used, read before the schedule moved it
    started: float        # when the window began
    cache_clear_s: float  # spent clearing the cache during the window
    run_started: float    # when the run began, less the training time of earlier segments
    loss_divisor: float = 0.0  # what the loss summed over ranks divides by to be the logged loss (0: count)


class StepRows:
    """Builds one rank's step rows for a run; stop_agreed says when the job's ranks agreed to stop."""

    def __init__(self, ranks: Ranks, device: torch.device, is_text: bool, collectives: CollectiveCount | None) -> None:
        self.ranks, self.device, self.is_text = ranks, device, is_text
        self.collectives = collectives or CollectiveCount()  # all 0 in one process
        self.stop_agreed = False  # a data-parallel run stops when any rank asked, at the same step

    def measure(self, result: StepResult, memory: Figures, should_stop: StopCheck) -> Figures:
        """The step's loss sum, gradient norm and memory over the whole job (loss summed over the ranks,
        memory the largest rank's); on several ranks, whether any rank asked to stop too."""
        if not self.ranks.distributed:
            loss_sum, grad_norm = torch.stack([result.loss_sum, result.grad_norm.float()]).tolist()
            return {"loss_sum": loss_sum, "grad_norm": grad_norm, **memory}
        figures, self.stop_agreed = combine_ranks(result.loss_sum, result.grad_norm, should_stop(), memory,
                                                  self.device)
        return figures

    def row(self, work: StepWork, result: StepResult, memory: Figures, counters: Counters,
            should_stop: StopCheck) -> Row:
        """The finished step's row, after adding it to the counters."""
        measured = self.measure(result, memory, should_stop)
        step_time = time.perf_counter() - work.started  # through the host sync: the step's work is done
        text, count, window = self.is_text, work.count, work.window
        counters.count_step(window.samples, count if text else 0, result.skipped)
        loss_sum = measured.pop("loss_sum")
        return {
            "step": counters.step, "epoch": work.epoch, "micro_batches": len(window.micro_batches),
            "samples": window.samples, "samples_seen": counters.samples_seen,
            "tokens": count if text else None, "tokens_seen": counters.tokens_seen if text else None,
            "tokens_per_s": count / step_time if text and step_time > 0 else None,
            "loss": loss_sum / (work.loss_divisor or count), "lr": work.lr,
            "scale": result.scale, "skipped": int(result.skipped), "skipped_total": counters.skipped_total,
            **measured, "cache_clear_s": work.cache_clear_s, "step_time_s": step_time,
            "samples_per_s": window.samples / step_time if step_time > 0 else None,
            "wall_time_s": time.perf_counter() - work.run_started, "world_size": self.ranks.world_size,
            **self.collectives.columns(),
        }
