"""The loss every loop uses: autocast forward, cross-entropy summed in fp32 (per image, or per target token)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from gaccum_core.train.precision import Precision
from gaccum_core.data.text import IGNORE


def summed_cross_entropy(forward: Callable[[torch.Tensor], torch.Tensor], precision: Precision,
                         x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy summed over the batch, in fp32 from (autocast) logits: divide it to weight it."""
    with precision.autocast():
        logits = forward(x)
    # The loss in fp32 whatever the autocast dtype: a sum over many samples would lose digits in fp16.
    # Text: logits (N, T, vocab) against targets (N, T), padding's targets ignored (-100).
    return F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), ignore_index=IGNORE, reduction="sum")


def token_losses(forward: Callable[[torch.Tensor], torch.Tensor], precision: Precision,
                 x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each target's cross-entropy (N, T) in fp32 from (autocast) logits, 0 where the target is IGNORE: weigh it."""
    with precision.autocast():
        logits = forward(x)
    return F.cross_entropy(logits.float().transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
