"""The accumulation step, written once: k weighted backward passes, then one optimizer step.

Each micro-batch's summed loss is divided by the window's sample (or target-token) count for a mean,
by 1 for a sum (accumulation.micro_batch_divisors). After the window, .grad holds the one-big-batch
gradient of the same samples. The engine (images and language models), the equivalence lab and the
pitfall gallery's reference and correct loops all call accumulate_step (the lab's gradient check calls
its first half, accumulate); only the gallery's deliberate bugs are written apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.optim import make_optimizer, make_scheduler
from gaccum_core.train.precision import Precision

Batch = TypeVar("Batch")
StopCheck = Callable[[], bool]  # asked between micro-batches: True stops the window


def never() -> bool:
    """A stop check that never asks to stop."""
    return False


@dataclass
class Optimization:
    """What turns gradients into an update: parameters, optimizer, schedule, precision and clipping."""

    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    precision: Precision
    grad_clip: float = 0.0

    @classmethod
    def from_config(cls, config: RunConfig, model: torch.nn.Module, device: torch.device,
                    total_steps: int) -> "Optimization":
        """The optimizer, schedule (over total_steps) and precision a RunConfig asks for."""
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = make_optimizer(config, params)
        return cls(params, optimizer, make_scheduler(config, optimizer, total_steps),
                   Precision(config.amp, device, config.init_scale, config.growth_interval), config.grad_clip)


@dataclass(frozen=True)
class StepResult:
    """What one accumulated optimizer step did; tensors stay on the device until read."""

    loss_sum: torch.Tensor   # the window's summed (unweighted) loss
    grad_norm: torch.Tensor  # of the window's gradient, unscaled, before clipping
    scale: float | None      # the GradScaler's scale during the window (None without one)
    skipped: bool            # inf/NaN gradients: the scaler skipped optimizer.step()


Divisor = float | Callable[[Batch], float]


def accumulate(precision: Precision, micro_batches: Iterable[Batch], loss_sum: Callable[[Batch], torch.Tensor],
               divisor: Divisor, should_stop: StopCheck = never,
               losses: list[torch.Tensor] | None = None) -> list[torch.Tensor] | None:
    """Backward every micro-batch's loss_sum / divisor into .grad; their losses, or None if stopped.

    The divisor is one number for the window (exact weightings), or a function of the micro-batch (the
    textbook's mean per micro-batch over k, which the Train page offers to show how it drifts).
    `losses` (appended in place) may hold the losses of the window's micro-batches done before, whose
    gradients .grad already holds (a resumed window); after a stop it holds those done so far."""
    losses = [] if losses is None else losses
    for batch in micro_batches:
        if should_stop():
            return None
        loss = loss_sum(batch)
        losses.append(loss.detach())  # kept on the device: no host sync per micro-batch
        precision.backward(loss / (divisor(batch) if callable(divisor) else divisor))  # scaled under fp16
    return losses


def accumulate_step(opt: Optimization, micro_batches: Iterable[Batch], loss_sum: Callable[[Batch], torch.Tensor],
                    divisor: Divisor, should_stop: StopCheck = never,
                    in_flight: list[torch.Tensor] | None = None) -> StepResult | None:
    """Accumulate one window, then take one optimizer step; None if stopped mid-window.

    A stopped window leaves no half gradient behind, unless the caller keeps it: with `in_flight`
    (the losses of micro-batches already in .grad, appended in place) .grad and the list keep what
    the window accumulated, for a checkpoint to carry over a restart."""
    losses = accumulate(opt.precision, micro_batches, loss_sum, divisor, should_stop, in_flight)
    if losses is None:
        if in_flight is None:
            opt.optimizer.zero_grad(set_to_none=True)
        return None
    # Unscale, clip, optimizer.step() (skipped on inf/NaN gradients), scaler.update().
    outcome = opt.precision.step(opt.optimizer, opt.params, opt.grad_clip)
    if not outcome.skipped and opt.scheduler is not None:
        opt.scheduler.step()  # the schedule counts the steps taken, not the windows seen
    opt.optimizer.zero_grad(set_to_none=True)
    return StepResult(torch.stack(losses).sum(), outcome.grad_norm, outcome.scale, outcome.skipped)
