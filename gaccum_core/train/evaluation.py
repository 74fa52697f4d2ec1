"""Evaluation on a fixed sample of the test split, and the language model's sample text that goes with each
evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gaccum_core.data.sources import ImageSource
from gaccum_core.data.text import IGNORE, Tokens
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import StopCheck, never

SAMPLE_PROMPT = "The "  # every evaluation of a language run continues this, greedily
SAMPLE_TOKENS = 80


@dataclass(frozen=True)
class Evaluation:
    """One evaluation's figures and what it covered."""

    loss: float      # mean test loss: per image, or per target token of text
    accuracy: float  # per image, or per target token (the next token predicted right)
    samples: int     # images or sequences read
    targets: int     # what the means divide by: the images, or the target tokens of the sequences


def eval_indices(size: int, batch_size: int, eval_batches: int) -> torch.Tensor:
    """The test samples every evaluation reads: eval_batches batches' worth, evenly spaced over the split
    (sample i·size // n of n), or the whole split when eval_batches is 0 or the split holds no more.

    Evenly spaced, not the first n: a split is stored in order (a corpus's documents one after another, an
    image folder's classes one after another), so its first batches would measure the first documents or
    classes only, while a stride sample reaches all of it for the same reading. It depends on nothing but
    these three numbers, so every evaluation (and every rank that evaluates) reads the same samples."""
    n = size if eval_batches == 0 else min(size, eval_batches * batch_size)
    if n == size:
        return torch.arange(size)
    return torch.arange(n) * size // n


@torch.no_grad()
def evaluate(model: torch.nn.Module, test: ImageSource, batch_size: int, precision: Precision,
             device: torch.device, eval_batches: int = 0, should_stop: StopCheck = never) -> Evaluation | None:
    """Mean test loss and accuracy over the samples eval_indices picks, read in batches of batch_size
    (eval_batches 0: the whole split); None when should_stop() asked to stop between two batches (a long
    evaluation is stopped, not waited for)."""
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    count = torch.zeros((), device=device, dtype=torch.long)
    indices = eval_indices(len(test), batch_size, eval_batches)
    for batch in indices.split(batch_size):
        if should_stop():
            model.train()
            return None
        x, y = test.batch(batch)
        x, y = x.to(device), y.to(device).flatten()
        with precision.autocast():
            # Eager, not compiled: switching a compiled model to eval mode would recompile it.
            logits = model(x).float().flatten(0, -2)  # text: (N*T, vocab)
        loss_sum += F.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
        scored = y != IGNORE
        correct += ((logits.argmax(dim=1) == y) & scored).sum()
        count += scored.sum()
    model.train()
    targets = count.item()
    total = max(targets, 1)
    return Evaluation(loss_sum.item() / total, correct.item() / total, len(indices), targets)


def sample_text(model: torch.nn.Module, tokens: Tokens, precision: Precision, device: torch.device) -> str:
    """A greedy continuation of SAMPLE_PROMPT by a language model, in its own tokens: the Train page shows
    one per evaluation, so a user sees that the model learns."""
    model.eval()
    text, ids = tokens.prompt(SAMPLE_PROMPT)
    with precision.autocast():
        new = model.generate(torch.tensor(ids, device=device), SAMPLE_TOKENS)
    model.train()
    return text + tokens.decode(new.tolist())
