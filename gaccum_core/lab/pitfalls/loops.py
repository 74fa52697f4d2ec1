"""The gallery's image loops: the big-batch reference, the correct accumulated loop, and each pitfall
as the tutorials write it, with its one classic mistake. A loop yields one Snapshot per optimizer step.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from gaccum_core.lab.pitfalls.kit import Kit
from gaccum_core.lab.pitfalls.result import Snapshot
from gaccum_core.train.optim import make_optimizer, make_scheduler

Loop = Callable[[Kit], Iterator[Snapshot]]


# The reference and the correct loop.

def big_batch(kit: Kit) -> Iterator[Snapshot]:
    """The reference: the shared step on one batch of all the window's samples, per-sample mean loss."""
    for window in kit.windows():
        yield kit.shared_step([(torch.cat([x for x, _ in window]), torch.cat([y for _, y in window]))])


def exact(kit: Kit) -> Iterator[Snapshot]:
    """Exact accumulation: the shared step, each micro-batch's summed loss over the window's sample count."""
    for window in kit.windows():
        yield kit.shared_step(window)


# The pitfalls, as the tutorials write them.

def _step_when_i_mod_k_is_0(kit: Kit) -> Iterator[Snapshot]:
    for loader in kit.loaders():
        for i, (x, y) in enumerate(loader):
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            if i % kit.k == 0:  # true at i = 0: the first step sees one micro-batch
                yield kit.step()


def _zero_grad_before_step(kit: Kit) -> Iterator[Snapshot]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
        kit.optimizer.zero_grad()  # wipes the window's gradients just before they are used
        yield kit.step()


def _mean_without_dividing_by_k(kit: Kit) -> Iterator[Snapshot]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y)).backward()  # k means add up: k x the window mean
        yield kit.step()


def _lr_divided_by_k(kit: Kit) -> Iterator[Snapshot]:
    kit.optimizer = make_optimizer(kit.config.replace(lr=kit.config.lr / kit.k), kit.params)
    kit.scheduler = make_scheduler(kit.config, kit.optimizer, kit.steps)
    yield from _mean_without_dividing_by_k(kit)


def _partial_window_divided_by_k(kit: Kit) -> Iterator[Snapshot]:
    for loader in kit.loaders():
        for i, (x, y) in enumerate(loader):
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()  # / k even when fewer are left
            if (i + 1) % kit.k == 0 or i + 1 == len(loader):
                yield kit.step()


def _scheduler_per_micro_batch(kit: Kit) -> Iterator[Snapshot]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            kit.scheduler.step()  # k scheduler steps per optimizer step
        yield kit.step(schedule=False)


def _scaler_update_inside_window(kit: Kit) -> Iterator[Snapshot]:
    clean = 0  # the scaler's growth clock, here ticking per micro-batch
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            clean = _update_scale_now(kit.scaler, kit.params, clean)  # scaler.update(), mid-window
        yield kit.step(update_scale=False)  # unscales the whole window by the last scale


def _update_scale_now(scaler: torch.amp.GradScaler, params: list[torch.nn.Parameter], clean: int) -> int:
    """What `scaler.update()` does, made mid-window: back off after inf/NaN, grow after growth_interval clean calls.

    GradScaler refuses a bare update() with no scaler.step() since the last one, so the decision is made here.
    """
    finite = all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
    clean = (clean + 1) % scaler.get_growth_interval() if finite else 0
    factor = scaler.get_backoff_factor() if not finite else scaler.get_growth_factor() if clean == 0 else 1.0
    scaler.update(scaler.get_scale() * factor)
    return clean


# Each image pitfall's loop, by its PITFALLS key (#6 is a setting of the engine: see sequences).
LOOPS: dict[str, Loop] = {loop.__name__[1:]: loop for loop in (
    _step_when_i_mod_k_is_0, _zero_grad_before_step, _mean_without_dividing_by_k, _lr_divided_by_k,
    _partial_window_divided_by_k, _scheduler_per_micro_batch, _scaler_update_inside_window)}
LOOPS["batchnorm_small_micro_batches"] = exact  # the loop is right; the model cannot be accumulated
