"""A small sequence task where micro-batches hold different numbers of target tokens.

With token-level cross-entropy the exact big-batch loss is the mean over all target tokens of the
window. "per_token" divides each micro-batch's summed loss by the window's token count and matches
one big batch exactly; "per_micro_batch" averages per-micro-batch means, which over-weights the
tokens of micro-batches that happen to hold few of them.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from gaccum_core.accumulation import Window, epoch_order, plan_epoch
from gaccum_core.config import ConfigError
from gaccum_core.precision import Precision
from gaccum_core.seeding import seeded
from gaccum_core.step import Optimization, accumulate_step

WEIGHTINGS = ("per_token", "per_micro_batch")
SEQUENCE_OPTIMIZERS = ("sgd", "adam")
PAD = 0
IGNORE = -100  # cross_entropy's ignore_index: a position with no next token
VOCAB = 24


def make_sequences(num_sequences: int, seed: int, vocab: int = VOCAB, min_len: int = 3,
                   max_len: int = 40) -> list[torch.Tensor]:
    """Arithmetic progressions mod vocab-1 over token ids 1..vocab-1, lengths uniform in [min_len, max_len]."""
    if vocab < 3:
        raise ConfigError("vocab", vocab, "an integer ≥ 3 (PAD plus at least two tokens)")
    if not 2 <= min_len <= max_len:
        raise ConfigError("min_len", min_len, f"an integer from 2 (one target token) to max_len={max_len}")
    generator = torch.Generator().manual_seed(seed)
    span = vocab - 1  # ids 1..vocab-1, so PAD=0 never occurs inside a sequence
    lengths = torch.randint(min_len, max_len + 1, (num_sequences,), generator=generator)
    starts = torch.randint(0, span, (num_sequences,), generator=generator)
    # A nonzero step mod span: every next token follows from the previous two.
    steps = torch.randint(1, span, (num_sequences,), generator=generator)
    return [1 + (start + step * torch.arange(int(length))) % span
            for length, start, step in zip(lengths, starts, steps)]


def collate(sequences: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, T) right-padded with PAD and next-token targets (N, T) with -100 where none; T = longest-1."""
    width = max(len(s) for s in sequences) - 1
    inputs = torch.full((len(sequences), width), PAD, dtype=torch.long)
    targets = torch.full((len(sequences), width), IGNORE, dtype=torch.long)
    for row, seq in enumerate(sequences):
        inputs[row, :len(seq) - 1] = seq[:-1]
        targets[row, :len(seq) - 1] = seq[1:]
    return inputs, targets


def target_tokens(sequences: list[torch.Tensor]) -> int:
    """Target tokens the sequences hold (each predicts all but its first token)."""
    return sum(len(s) - 1 for s in sequences)


class TinyLM(nn.Module):
    """Embedding -> GRU -> linear head: a next-token model with no dropout."""

    def __init__(self, vocab: int = VOCAB) -> None:
        super().__init__()
        self.vocab = vocab
        self.embedding = nn.Embedding(vocab, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, vocab)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Logits (N, T, vocab) for inputs (N, T)."""
        # Right padding needs no packing: the GRU is causal, so PAD after a sequence never reaches its logits.
        hidden, _ = self.gru(self.embedding(inputs))
        return self.head(hidden)


def token_loss_sum(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed token cross-entropy over the positions with a target, and how many there are."""
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")
    return loss, int((targets != IGNORE).sum())


@dataclass(frozen=True)
class SequenceConfig:
    """Every setting of one sequence-task accumulation run."""

    micro_batch_size: int = 4
    accum_steps: int = 4
    weighting: str = "per_token"
    optimizer: str = "adam"
    lr: float = 3e-3
    num_sequences: int = 256
    steps: int = 20
    seed: int = 0
    min_len: int = 3  # min_len == max_len gives equal token counts: both weightings then agree
    max_len: int = 40

    def __post_init__(self) -> None:
        _check_ints(self)
        _check_lr(self)
        for name, choices in (("weighting", WEIGHTINGS), ("optimizer", SEQUENCE_OPTIMIZERS)):
            if getattr(self, name) not in choices:
                raise ConfigError(name, getattr(self, name), "one of " + ", ".join(choices))

    @property
    def effective_batch_size(self) -> int:
        """Sequences per optimizer step in a full window: micro_batch_size * accum_steps."""
        return self.micro_batch_size * self.accum_steps


_INT_RANGES = {"micro_batch_size": (1, 1 << 16), "accum_steps": (1, 1 << 16),
               "num_sequences": (1, 10**6), "steps": (1, 10**6), "seed": (0, 2**63 - 1),
               "min_len": (2, 512), "max_len": (2, 512)}


def _check_ints(cfg: SequenceConfig) -> None:
    for name, (low, high) in _INT_RANGES.items():
        value = getattr(cfg, name)
        low = cfg.min_len if name == "max_len" else low  # min_len is checked first
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(name, value, f"an integer from {low} to {high}")


def _check_lr(cfg: SequenceConfig) -> None:
    lr = cfg.lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and 0 < lr <= 1e3):
        raise ConfigError("lr", lr, "a finite number > 0 and ≤ 1000")
    object.__setattr__(cfg, "lr", float(lr))


@dataclass
class SequenceRun:
    """A finished run: the trained model and one entry per optimizer step."""

    model: TinyLM
    losses: list[float] = field(default_factory=list)  # per-token mean loss of each window
    weights: list[list[torch.Tensor]] = field(default_factory=list)  # parameter copies after each step
    grad_norms: list[float] = field(default_factory=list)  # norm of each accumulated gradient




def _initial_model(config: SequenceConfig, model: TinyLM | None) -> TinyLM:
    """A copy of model, or a TinyLM seeded from config.seed without disturbing the global RNG."""
    if model is not None:
        return copy.deepcopy(model)
    return seeded(config.seed, TinyLM)


def _make_optimizer(config: SequenceConfig, model: nn.Module) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=config.lr)


def _windows(config: SequenceConfig) -> Iterator[tuple[torch.Tensor, Window]]:
    """(epoch order, window) for every window of every epoch, without end."""
    for epoch in itertools.count():
        order = epoch_order(config.num_sequences, config.seed, epoch)
        windows = plan_epoch(config.num_sequences, config.micro_batch_size, config.accum_steps, "mean")
        yield from ((order, window) for window in windows)


def _per_token_step(opt: Optimization, model: TinyLM, micro_batches: list[list[torch.Tensor]]) -> tuple[float, float]:
    """The shared accumulation step, each micro-batch's token-loss sum over the window's token count."""
    # Counted from the lengths before any backward: the divisor is the whole window's count.
    window_tokens = sum(target_tokens(batch) for batch in micro_batches)
    result = accumulate_step(opt, micro_batches, lambda batch: token_loss_sum(model, *collate(batch))[0],
                             window_tokens)
    loss_sum, grad_norm = torch.stack([result.loss_sum, result.grad_norm]).tolist()
    return loss_sum / window_tokens, grad_norm


def _mean_of_means_step(opt: Optimization, model: TinyLM, micro_batches: list[list[torch.Tensor]]) -> tuple[float, float]:
    """The deliberate bug (pitfall #6): the mean of per-micro-batch token means, then a plain step."""
    window_tokens, losses = sum(target_tokens(batch) for batch in micro_batches), []
    for batch in micro_batches:
        loss_sum, tokens = token_loss_sum(model, *collate(batch))
        (loss_sum / (tokens * len(micro_batches))).backward()  # each micro-batch counts 1/k, whatever its tokens
        losses.append(loss_sum.detach())
    grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in opt.params])).item()
    opt.optimizer.step()
    opt.optimizer.zero_grad(set_to_none=True)
    return torch.stack(losses).sum().item() / window_tokens, grad_norm


def train_sequences(config: SequenceConfig, model: TinyLM | None = None) -> SequenceRun:
    """Train a copy of model (or a seeded TinyLM) for config.steps accumulated optimizer steps."""
    model = _initial_model(config, model)
    model.train()
    sequences = make_sequences(config.num_sequences, config.seed, model.vocab, config.min_len, config.max_len)
    opt = Optimization(list(model.parameters()), _make_optimizer(config, model), None, Precision("off", torch.device("cpu")))
    step = _per_token_step if config.weighting == "per_token" else _mean_of_means_step
    run = SequenceRun(model)
    for order, window in itertools.islice(_windows(config), config.steps):
        micro_batches = [[sequences[i] for i in order[m.start:m.stop].tolist()] for m in window.micro_batches]
        loss, grad_norm = step(opt, model, micro_batches)
        run.losses.append(loss)
        run.grad_norms.append(grad_norm)
        run.weights.append([p.detach().clone() for p in model.parameters()])
    return run


def big_batch_reference(config: SequenceConfig, model: TinyLM | None = None) -> SequenceRun:
    """The oracle: the same windows, each as one micro-batch of b*k sequences, per-token mean loss."""
    one_batch = dataclasses.replace(config, micro_batch_size=config.effective_batch_size, accum_steps=1,
                                    weighting="per_token")
    return train_sequences(one_batch, model)


def weight_distance(run: SequenceRun, reference: SequenceRun) -> float:
    """L2 distance between the two runs' final parameters (all tensors flattened together)."""
    diffs = [(a - b).flatten() for a, b in zip(run.weights[-1], reference.weights[-1])]
    return torch.linalg.vector_norm(torch.cat(diffs)).item()
