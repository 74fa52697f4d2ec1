"""Optimizer and learning-rate schedule from a RunConfig."""

from __future__ import annotations

import math

import torch

from gaccum_core.config import RunConfig


def make_optimizer(config: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW as the config says."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    cls = torch.optim.Adam if config.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=config.lr, weight_decay=config.weight_decay)


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str) -> float:
    """The multiplier of the base lr at optimizer step `step` (0-based): linear warmup, then constant or cosine."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(config: RunConfig, optimizer: torch.optim.Optimizer,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR | None:
    """A LambdaLR that the engine advances once per taken optimizer step; None for a constant lr."""
    if config.lr_schedule == "constant" and config.warmup_steps == 0:
        return None
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, config.warmup_steps, total_steps, config.lr_schedule)
    )
