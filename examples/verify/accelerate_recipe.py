"""Accelerate's documented gradient-accumulation recipe (usage guide "Performing gradient accumulation with
Accelerate"), from the installed accelerate:

    accelerator = Accelerator(gradient_accumulation_steps=K)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    for inputs, targets in dataloader:
        with accelerator.accumulate(model):
            loss = loss_function(model(inputs), targets)
            accelerator.backward(loss)  # divides the loss by K
            optimizer.step(); optimizer.zero_grad()  # act only when the K-th micro-batch (or the last) is done

`window` is that loop over one window's micro-batches, without the optimizer (verify reads the gradients the
optimizer would be handed). K is the configured `gradient_accumulation_steps`: run it with `--fixed-k K`. The model is
a small classifier on random features, each sample's loss weighing the same (the recipe's mean cross-entropy).
"""

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader

FEATURES, CLASSES, SAMPLES = 6, 3, 8


def setup() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A two-layer classifier and one batch of SAMPLES random samples."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))
    return model, {"inputs": torch.randn(SAMPLES, FEATURES), "targets": torch.randint(0, CLASSES, (SAMPLES,))}


def window(model: nn.Module, micro_batches: list[dict[str, torch.Tensor]], fixed_k: int) -> None:
    """The recipe's loop over one window, with gradient_accumulation_steps = fixed_k."""
    accelerator = Accelerator(gradient_accumulation_steps=fixed_k)
    model, dataloader = accelerator.prepare(model, DataLoader(micro_batches, batch_size=None))
    for batch in dataloader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(batch["inputs"]), batch["targets"])
            accelerator.backward(loss)


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the recipe means to minimise: the mean cross-entropy over the whole batch (on the device the
    Accelerator put the model on)."""
    device = next(model.parameters()).device
    return F.cross_entropy(model(batch["inputs"].to(device)), batch["targets"].to(device))
