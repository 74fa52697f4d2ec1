"""The four post-training reports' loops, written apart as each report describes them, beside the exact loop that
calls the engine's own rule (window_weighting's per-token weights and accumulate_step).

Every loop trains its own copy of the seeded gpt (a Learner) on the pg rollouts' windows in the engine's order
(sample_order, plan_epoch); each loss token's loss is -A · log p(token), A times its cross-entropy. A report's
loop backwards each micro-batch's token-loss sum over its own divisor, then takes a plain SGD step.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Callable, Iterator

import torch

from gaccum_core.config import RunConfig
from gaccum_core.lab.pitfalls.result import Snapshot, flat
from gaccum_core.train.accumulation import MicroBatch, Window, plan_epoch
from gaccum_core.train.loss import token_losses
from gaccum_core.train.step import Optimization, accumulate_step
from gaccum_core.train.weighting import aggregation_constant, sample_order, window_weighting

Epoch = tuple[torch.Tensor, list[Window]]  # an epoch's sample order and its windows


class Learner:
    """One loop's copy of the model, its SGD, the pg training split, and the gradient each step was handed."""

    def __init__(self, config: RunConfig, train: Any, model: torch.nn.Module, steps: int) -> None:
        self.config, self.train, self.k = config, train, config.accum_steps
        self.model = copy.deepcopy(model)
        self.opt = Optimization.from_config(config, self.model, torch.device("cpu"), steps)
        self.first_gradient: torch.Tensor | None = None  # the first step's gradient: the first window's, flat
        self._grad_norm = 0.0
        self._loss, self._tokens, self._samples = 0.0, 0, 0
        self.opt.optimizer.register_step_pre_hook(self._handed)

    def _handed(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """What optimizer.step() is about to apply: kept (the first) and its norm."""
        gradient = torch.cat([p.grad.reshape(-1) for p in self.opt.params]).double()
        self.first_gradient = gradient if self.first_gradient is None else self.first_gradient
        self._grad_norm = torch.linalg.vector_norm(gradient).item()

    def epochs(self) -> Iterator[Epoch]:
        """Each epoch's order (pg's: a group's sequences together) and windows of b·k, forever."""
        b, num = self.config.micro_batch_size, len(self.train)
        return ((sample_order(self.config, self.train, epoch), plan_epoch(num, b, self.k))
                for epoch in itertools.count())

    def tokens(self, order: torch.Tensor, micro_batches: tuple[MicroBatch, ...]) -> int:
        """Loss tokens in these micro-batches."""
        return sum(self.train.target_tokens(order[m.start:m.stop]) for m in micro_batches)

    def token_loss_sum(self, order: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
        """Σ over the micro-batch's loss tokens of -A · log p(token), counted toward the step's loss."""
        indices = order[micro.start:micro.stop]
        x, y = self.train.batch(indices)
        losses = token_losses(self.model, self.opt.precision, x, y)
        loss_sum = (self.train.token_advantages(indices, y.shape[1]) * losses).sum()
        self.record(loss_sum.item(), self.train.target_tokens(indices), micro.size)
        return loss_sum

    def record(self, loss_sum: float, tokens: int, samples: int) -> None:
        """Count a micro-batch's (or window's) loss sum, loss tokens and samples toward the step's loss."""
        self._loss, self._tokens, self._samples = self._loss + loss_sum, self._tokens + tokens, self._samples + samples

    def step(self) -> Snapshot:
        """A plain SGD step on what the loop accumulated, then zero_grad; the weights it left."""
        self.opt.optimizer.step()
        self.opt.optimizer.zero_grad(set_to_none=True)
        return self.snapshot()

    def snapshot(self, loss: float | None = None, samples: int = 0) -> Snapshot:
        """The weights now, the last step's gradient norm, its window's token-mean loss and samples (as given, or
        as the recorded micro-batches make them)."""
        loss = self._loss / max(self._tokens, 1) if loss is None else loss
        done = Snapshot(flat(self.opt.params), self._grad_norm, loss, samples or self._samples)
        self._loss, self._tokens, self._samples = 0.0, 0, 0
        return done


Split = Callable[[Learner, torch.Tensor, Window], Window]  # the micro-batches a loop cuts a window into
Loop = Callable[[Learner], Iterator[Snapshot]]


def by_samples(learner: Learner, order: torch.Tensor, window: Window) -> Window:
    """The engine's micro-batches: b samples each."""
    return window


def token_budget(learner: Learner, order: torch.Tensor, window: Window) -> Window:
    """verl's dynamic micro-batches: the window's sequences in order, a new micro-batch whenever the next one would
    pass the budget of b sequences of full length, b · (max_seq_len + 1) tokens."""
    budget = learner.config.micro_batch_size * (learner.config.max_seq_len + 1)
    first = window.micro_batches[0].start
    lengths = [int(spans[-1, 1]) if len(spans) else 0  # a sample's tokens: where its last record ends
               for spans in learner.train.spans(order[first:window.micro_batches[-1].stop])]
    starts, used = [], budget + 1
    for offset, length in enumerate(lengths):
        if used + length > budget:
            starts.append(offset)
            used = 0
        used += length
    stops = [*starts[1:], len(lengths)]
    return Window(tuple(MicroBatch(first + start, first + stop, stop == len(lengths))
                        for start, stop in zip(starts, stops)))


def exact(split: Split) -> Loop:
    """gaccum's exact loop on the micro-batches `split` cuts: the engine's weighting and accumulation step."""
    def loop(learner: Learner) -> Iterator[Snapshot]:
        for order, windows in learner.epochs():
            for window in windows:
                yield _exact_step(learner, order, split(learner, order, window))
    return loop


def _exact_step(learner: Learner, order: torch.Tensor, window: Window) -> Snapshot:
    """One window as the engine takes it: window_weighting's per-token weights, then accumulate_step."""
    config, train, model, precision = learner.config, learner.train, learner.model, learner.opt.precision
    weighting = window_weighting(config, train, window, order, 1, aggregation_constant(config, train))

    def loss(numbered: tuple[int, MicroBatch]) -> torch.Tensor:
        i, micro = numbered
        indices = order[micro.start:micro.stop]
        return weighting.loss(i, model, precision, *train.batch(indices), train, indices)

    result = accumulate_step(learner.opt, enumerate(window.micro_batches), loss, weighting.divisor)
    return learner.snapshot(result.loss_sum.item() / weighting.loss_divisor, window.samples)


# The reports' loops.

def verl_sample_share(learner: Learner) -> Iterator[Snapshot]:
    """verl #5625: token-budget micro-batches, each one's token mean scaled by its share of the window's samples."""
    for order, windows in learner.epochs():
        for window in windows:
            for micro in token_budget(learner, order, window).micro_batches:
                token_mean = learner.token_loss_sum(order, micro) / learner.tokens(order, (micro,))
                (token_mean * micro.size / window.samples).backward()
            yield learner.step()


def trl_generation_batch(learner: Learner) -> Iterator[Snapshot]:
    """TRL #6024: each window's token-loss sum over the tokens of its generation batch, 2 windows."""
    for order, windows in learner.epochs():
        for w, window in enumerate(windows):
            generation = windows[w - w % 2:w - w % 2 + 2]
            normaliser = sum(learner.tokens(order, g.micro_batches) for g in generation)
            for micro in window.micro_batches:
                (learner.token_loss_sum(order, micro) / normaliser).backward()
            yield learner.step()


def ms_swift_k_twice(learner: Learner) -> Iterator[Snapshot]:
    """ms-swift #10117: the token-loss sum over the window's tokens, then over k again."""
    for order, windows in learner.epochs():
        for window in windows:
            tokens = learner.tokens(order, window.micro_batches)
            for micro in window.micro_batches:
                (learner.token_loss_sum(order, micro) / tokens / learner.k).backward()
            yield learner.step()


def full_windows(learner: Learner, windows: list[Window]) -> list[Window]:
    """mlx-lm's windows: only those of k whole micro-batches (the epoch's last partial one dropped)."""
    b = learner.config.micro_batch_size
    return [w for w in windows if len(w.micro_batches) == learner.k and all(m.size == b for m in w.micro_batches)]


def mlx_lm_micro_batch_means(learner: Learner) -> Iterator[Snapshot]:
    """mlx-lm #1413: each micro-batch's own token mean / k, on full windows only."""
    for order, windows in learner.epochs():
        for window in full_windows(learner, windows):
            for micro in window.micro_batches:
                (learner.token_loss_sum(order, micro) / learner.tokens(order, (micro,)) / learner.k).backward()
            yield learner.step()


LOOPS: dict[str, Loop] = {loop.__name__: loop for loop in (
    verl_sample_share, trl_generation_batch, ms_swift_k_twice, mlx_lm_micro_batch_means)}
SPLITS: dict[str, Split] = {"verl_sample_share": token_budget}  # the others cut b samples a micro-batch
WINDOWS = {"mlx_lm_micro_batch_means": full_windows}  # the others train every window of an epoch
