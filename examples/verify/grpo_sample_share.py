"""A GRPO/DAPO policy-gradient loop as volcengine/verl #5625 reports it: each micro-batch's token-mean loss, scaled by
the micro-batch's share of the window's *samples*.

The loss is -A · log p(token) over completion tokens (the importance ratio at 1, no clipping, no KL), A the
group-normalised advantage of the token's completion, aggregated by token-mean (DAPO's): the window's summed token
loss over its loss tokens. Scaling a micro-batch's token mean by its sample share is exact only when every micro-batch
holds the same share of tokens as of samples; verl's token-budget (dynamic) micro-batches break that, and so does any
uneven split: `python -m gaccum_core verify examples/verify/grpo_sample_share.py` names "weighted by sample share".
Dividing each micro-batch's summed token loss by the window's loss tokens, counted before the first backward, passes.
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, GROUPS, GROUP_SIZE, LONGEST = 32, 16, 2, 4, 12


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
    """The model and one batch of GROUPS prompts' GROUP_SIZE completions each (a rollout batch): a prompt of 2 to 4
    tokens, then a completion, right-padded to LONGEST. labels: the completion's tokens (-100 on the prompt and the
    padding); advantages: (reward - the group's mean) / (the group's std + 1e-6), one per completion."""
    torch.manual_seed(0)
    samples = GROUPS * GROUP_SIZE
    prompts = torch.randint(2, 5, (GROUPS,)).repeat_interleave(GROUP_SIZE)
    lengths = prompts + torch.randint(1, LONGEST - 3, (samples,))
    input_ids = torch.randint(1, VOCAB, (samples, LONGEST))
    positions = torch.arange(LONGEST)
    input_ids[positions >= lengths[:, None]] = 0
    labels = input_ids.masked_fill((positions < prompts[:, None]) | (positions >= lengths[:, None]), -100)
    rewards = torch.rand(GROUPS, GROUP_SIZE)
    advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).flatten()
    return TinyLM(), {"input_ids": input_ids, "labels": labels, "advantages": advantages}


def token_losses(model: nn.Module, micro_batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """-A · log p of each next token that is a completion token (0 elsewhere), and how many there are."""
    logits = model(micro_batch["input_ids"])[:, :-1]
    targets = micro_batch["labels"][:, 1:]
    log_p = -F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")
    return -micro_batch["advantages"][:, None] * log_p, (targets != -100).sum()


def window(model: nn.Module, micro_batches: list[dict[str, torch.Tensor]]) -> None:
    """One optimizer step's accumulation as the report describes it: each micro-batch's token mean, times its share of
    the window's samples."""
    samples = sum(len(micro_batch["input_ids"]) for micro_batch in micro_batches)
    for micro_batch in micro_batches:
        losses, tokens = token_losses(model, micro_batch)
        loss = losses.sum() / tokens * (len(micro_batch["input_ids"]) / samples)
        loss.backward()


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the loop means to minimise: token-mean over the whole rollout batch, Σ -A · log p over its loss tokens."""
    losses, tokens = token_losses(model, batch)
    return losses.sum() / tokens
