"""Evaluation on the test split, and the language model's sample text that goes with each evaluation."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gaccum_core.data.sources import ImageSource
from gaccum_core.data.text import IGNORE, Tokens
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import StopCheck, never

SAMPLE_PROMPT = "The "  # every evaluation of a language run continues this, greedily
SAMPLE_TOKENS = 80


@torch.no_grad()
def evaluate(model: torch.nn.Module, test: ImageSource, batch_size: int, precision: Precision,
             device: torch.device, should_stop: StopCheck = never) -> tuple[float, float] | None:
    """Mean test loss and accuracy over the whole test split: per image, or per target token of text;
    None when should_stop() asked to stop between two batches (a long evaluation is stopped, not waited for)."""
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    count = torch.zeros((), device=device, dtype=torch.long)
    for begin in range(0, len(test), batch_size):
        if should_stop():
            model.train()
            return None
        x, y = test.batch(torch.arange(begin, min(begin + batch_size, len(test))))
        x, y = x.to(device), y.to(device).flatten()
        with precision.autocast():
            # Eager, not compiled: switching a compiled model to eval mode would recompile it.
            logits = model(x).float().flatten(0, -2)  # text: (N*T, vocab)
        loss_sum += F.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
        scored = y != IGNORE
        correct += ((logits.argmax(dim=1) == y) & scored).sum()
        count += scored.sum()
    model.train()
    total = max(count.item(), 1)
    return loss_sum.item() / total, correct.item() / total


def sample_text(model: torch.nn.Module, tokens: Tokens, precision: Precision, device: torch.device) -> str:
    """A greedy continuation of SAMPLE_PROMPT by a language model, in its own tokens: the Train page shows
    one per evaluation, so a user sees that the model learns."""
    model.eval()
    text, ids = tokens.prompt(SAMPLE_PROMPT)
    with precision.autocast():
        new = model.generate(torch.tensor(ids, device=device), SAMPLE_TOKENS)
    model.train()
    return text + tokens.decode(new.tolist())
