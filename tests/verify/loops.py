"""Tiny loops for verify's tests, one per mistake: a token model on padded sequences of unequal length (so that the
weightings differ), windows written to make each mistake, and the exact objective they are checked against."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, LENGTH, SAMPLES = 11, 6, 8
IGNORE = -100


def token_setup() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A seeded embedding + linear language model and 8 sequences of 1 to 6 loss tokens (the rest padding)."""
    generator = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, 5), nn.Tanh(), nn.Linear(5, VOCAB))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    tokens = torch.randint(0, VOCAB, (SAMPLES, LENGTH), generator=generator)
    targets = torch.randint(0, VOCAB, (SAMPLES, LENGTH), generator=generator)
    lengths = torch.tensor([1, 6, 2, 5, 3, 1, 4, 6])
    targets[torch.arange(LENGTH) >= lengths[:, None]] = IGNORE
    return model, {"tokens": tokens, "targets": targets}


def token_sum(model: nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
    """The micro-batch's summed token loss."""
    logits = model(micro["tokens"])
    return F.cross_entropy(logits.reshape(-1, VOCAB), micro["targets"].reshape(-1), ignore_index=IGNORE,
                           reduction="sum")


def tokens_in(micro: dict[str, torch.Tensor]) -> int:
    return int((micro["targets"] != IGNORE).sum())


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The mean token loss over the whole batch."""
    return token_sum(model, batch) / tokens_in(batch)


def correct(model: nn.Module, micro_batches: list) -> None:
    """gaccum's rule: each micro-batch's token-loss sum over the window's token count."""
    count = sum(tokens_in(m) for m in micro_batches)
    for micro in micro_batches:
        (token_sum(model, micro) / count).backward()


def divided_by_k_twice(model: nn.Module, micro_batches: list) -> None:
    count = sum(tokens_in(m) for m in micro_batches)
    for micro in micro_batches:
        (token_sum(model, micro) / count / len(micro_batches)).backward()


def not_divided_by_k(model: nn.Module, micro_batches: list) -> None:
    for micro in micro_batches:
        (token_sum(model, micro) / tokens_in(micro)).backward()


def weighted_equally(model: nn.Module, micro_batches: list) -> None:
    for micro in micro_batches:
        (token_sum(model, micro) / tokens_in(micro) / len(micro_batches)).backward()


def weighted_by_sample_share(model: nn.Module, micro_batches: list) -> None:
    samples = sum(len(m["tokens"]) for m in micro_batches)
    for micro in micro_batches:
        (token_sum(model, micro) / tokens_in(micro) * len(micro["tokens"]) / samples).backward()


def over_fixed_k(model: nn.Module, micro_batches: list, fixed_k: int) -> None:
    """A Trainer-style loop: each micro-batch's mean divided by the configured K, whatever the window holds."""
    for micro in micro_batches:
        (token_sum(model, micro) / tokens_in(micro) / fixed_k).backward()


def half_scaled(model: nn.Module, micro_batches: list) -> None:
    count = sum(tokens_in(m) for m in micro_batches)
    for micro in micro_batches:
        (0.5 * token_sum(model, micro) / count).backward()


def sample_setup(norm: nn.Module | None = None, dropout: float = 0.0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A seeded classifier (with the given norm layer or dropout) and 8 samples of 4 features."""
    generator = torch.Generator().manual_seed(1)
    layers = [nn.Linear(4, 6), norm or nn.Identity(), nn.ReLU(), nn.Dropout(dropout), nn.Linear(6, 3)]
    model = nn.Sequential(*layers)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return model, {"x": torch.randn(SAMPLES, 4, generator=generator), "y": torch.arange(SAMPLES) % 3}


def sample_mean(model: nn.Module, micro_batches: list) -> None:
    """The correct sample-mean loop: each micro-batch's summed loss over the window's samples."""
    count = sum(len(m["y"]) for m in micro_batches)
    for micro in micro_batches:
        (F.cross_entropy(model(micro["x"]), micro["y"], reduction="sum") / count).backward()


def list_window(model: nn.Module, micro_batches: list) -> None:
    """The correct loop on a list of (x, y) samples."""
    count = sum(len(m) for m in micro_batches)
    for micro in micro_batches:
        x, y = torch.stack([s[0] for s in micro]), torch.stack([s[1] for s in micro])
        (F.cross_entropy(model(x), y, reduction="sum") / count).backward()


def centred(model: nn.Module, micro_batches: list) -> None:
    """Correct weighting of a loss that mixes samples: the logits centred on their micro-batch's mean."""
    count = sum(len(m["y"]) for m in micro_batches)
    for micro in micro_batches:
        logits = model(micro["x"])
        logits = logits - logits.mean(0, keepdim=True)
        (F.cross_entropy(logits, micro["y"], reduction="sum") / count).backward()


def per_sample_means(model: nn.Module, micro_batches: list) -> None:
    """Exact accumulation of another loss: each sequence's own token mean, averaged over the window's samples."""
    samples = sum(len(m["tokens"]) for m in micro_batches)
    for micro in micro_batches:
        for i in range(len(micro["tokens"])):
            one = {key: value[i:i + 1] for key, value in micro.items()}
            (token_sum(model, one) / tokens_in(one) / samples).backward()


def over_k_squared(model: nn.Module, micro_batches: list) -> None:
    """A weighting no catalogued mistake predicts: each micro-batch's token mean over k²."""
    for micro in micro_batches:
        (token_sum(model, micro) / tokens_in(micro) / len(micro_batches) ** 2).backward()
