"""A plain accumulation loop as it is often written: each micro-batch's token mean, divided by k.

On sequences of different lengths this weights every micro-batch equally, whatever its token count, so a micro-batch
of few tokens counts as much as one of many: `python -m gaccum_core verify examples/verify/plain_loop_mean_of_means.py`
flags it as "micro-batches weighted equally" (plain_loop_gaccum_rule.py is the same loop, fixed).
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, SAMPLES, LONGEST = 32, 16, 8, 12


class TinyLM(nn.Module):
    """A next-token model small enough to check in a blink: embedding, one hidden layer, vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.hidden = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.hidden(self.embed(input_ids))))


def setup() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model and one batch of SAMPLES sequences of 2 to LONGEST tokens, right-padded; padding labelled -100."""
    torch.manual_seed(0)
    lengths = torch.randint(2, LONGEST + 1, (SAMPLES,))
    input_ids = torch.randint(1, VOCAB, (SAMPLES, LONGEST))
    padding = torch.arange(LONGEST) >= lengths[:, None]
    input_ids[padding] = 0
    labels = input_ids.masked_fill(padding, -100)
    return TinyLM(), {"input_ids": input_ids, "labels": labels}


def token_losses(model: nn.Module, micro_batch: dict[str, torch.Tensor], reduction: str) -> torch.Tensor:
    """Next-token cross-entropy over the micro-batch's labelled tokens, reduced as asked ("mean" or "sum")."""
    logits = model(micro_batch["input_ids"])[:, :-1]
    targets = micro_batch["labels"][:, 1:]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction=reduction)


def window(model: nn.Module, micro_batches: list[dict[str, torch.Tensor]]) -> None:
    """One optimizer step's accumulation: each micro-batch's mean loss divided by k, then backward."""
    k = len(micro_batches)
    for micro_batch in micro_batches:
        loss = token_losses(model, micro_batch, "mean") / k
        loss.backward()


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the loop means to minimise: the mean next-token loss over all the batch's labelled tokens."""
    return token_losses(model, batch, "mean")
