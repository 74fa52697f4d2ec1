"""The textbook kit every image loop of the gallery gets: its own copy of the model, optimizer, scaler
and scheduler, the micro-batches in the engine's order, and the two ways to take a step.

Every kit starts from one copy of the same initial weights and reads the same micro-batches
(epoch_order, windows of b*k, micro-batches of b). shared_step is the one accumulation step of
gaccum_core.train.step (the reference and the correct loop); step is the tutorials' hand-written one.
"""

from __future__ import annotations

import copy
import itertools
from typing import Iterator

import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.sources import ImageSource
from gaccum_core.lab.pitfalls.result import Snapshot, flat
from gaccum_core.train.accumulation import epoch_order, plan_epoch
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.train.optim import make_optimizer, make_scheduler
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import Optimization, accumulate_step

Batch = tuple[torch.Tensor, torch.Tensor]


class Kit:
    """What every loop gets: its own model copy, optimizer, scaler, scheduler and the micro-batches."""

    def __init__(self, config: RunConfig, train: ImageSource, model: torch.nn.Module,
                 num_samples: int, steps: int) -> None:
        self.config, self.k, self.steps = config, config.accum_steps, steps
        self.model = copy.deepcopy(model)
        self.params = list(self.model.parameters())
        self.optimizer = make_optimizer(config, self.params)
        self.scheduler = make_scheduler(config, self.optimizer, steps)
        self.precision = Precision(config.amp, torch.device("cpu"), config.init_scale, config.growth_interval)
        self.scaler = self.precision.scaler  # disabled (a no-op) unless fp16
        self._train, self._num_samples = train, num_samples
        self._losses: list[torch.Tensor] = []
        self._samples = 0

    def loaders(self) -> Iterator[list[Batch]]:
        """Each epoch's micro-batches in order, forever: what the tutorials `enumerate(loader)` over."""
        return ([micro for window in windows for micro in window] for windows in self._epochs())

    def windows(self) -> Iterator[list[Batch]]:
        """The micro-batches of each window (an epoch's last window may be partial), forever."""
        return itertools.chain.from_iterable(self._epochs())

    def _epochs(self) -> Iterator[list[list[Batch]]]:
        for epoch in itertools.count():
            order = epoch_order(self._num_samples, self.config.seed, epoch)
            plan = plan_epoch(self._num_samples, self.config.micro_batch_size, self.k)
            yield [[self._train.batch(order[m.start:m.stop]) for m in window.micro_batches] for window in plan]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of one batch, as the tutorials take it; recorded for the step's loss."""
        loss_sum = summed_cross_entropy(self.model, self.precision, x, y)
        self._losses.append(loss_sum.detach())
        self._samples += len(y)
        return loss_sum / len(y)

    def shared_step(self, window: list[Batch]) -> Snapshot:
        """The shared accumulation step (gaccum_core.train.step) over the window's micro-batches."""
        samples = sum(len(y) for _, y in window)
        opt = Optimization(self.params, self.optimizer, self.scheduler, self.precision, self.config.grad_clip)
        result = accumulate_step(opt, window, lambda xy: summed_cross_entropy(self.model, self.precision, *xy),
                                 samples)
        loss_sum, norm = torch.stack([result.loss_sum, result.grad_norm.float()]).tolist()
        return Snapshot(flat(self.params), norm, loss_sum / samples, samples)

    def step(self, schedule: bool = True, update_scale: bool = True) -> Snapshot:
        """The pitfalls' textbook step: unscale, (clip,) scaler.step, scaler.update, scheduler.step, zero_grad."""
        self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads).item() if grads else 0.0
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        self.scaler.step(self.optimizer)
        if update_scale:
            self.scaler.update()
        if schedule and self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.stack(self._losses).sum().item() / self._samples
        done = Snapshot(flat(self.params), norm, loss, self._samples)
        self._losses, self._samples = [], 0
        return done
