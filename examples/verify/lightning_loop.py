"""Lightning's own accumulation: `Trainer(accumulate_grad_batches=K)` drives one optimizer step over a window's
micro-batches, and a callback copies the gradients out in `on_before_optimizer_step`, which are what the optimizer
is handed. K is the Trainer's configured `accumulate_grad_batches`: run it with `--fixed-k K`. The model is a small
classifier on random features whose `training_step` returns the mean cross-entropy, as Lightning's examples do.
Nothing is logged, checkpointed or written: the Trainer's root folder is a temporary one, removed after.
"""

import logging
import tempfile
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

FEATURES, CLASSES, SAMPLES = 6, 3, 8


class Classifier(L.LightningModule):
    """A two-layer classifier trained by SGD, its loss the mean cross-entropy of each micro-batch."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """The micro-batch's mean loss: Lightning divides it by accumulate_grad_batches before the backward."""
        return F.cross_entropy(self.net(batch["inputs"]), batch["targets"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD: the step it takes does not matter here, only the gradients it is handed."""
        return torch.optim.SGD(self.parameters(), lr=0.1)


class GradientsHandedToTheOptimizer(L.Callback):
    """Copies each parameter's .grad just before the optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.grads: list[torch.Tensor | None] = []

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """Keep a copy of every parameter's gradient as the optimizer receives it."""
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in pl_module.parameters()]


def setup() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The classifier and one batch of SAMPLES random samples."""
    torch.manual_seed(0)
    return Classifier(), {"inputs": torch.randn(SAMPLES, FEATURES), "targets": torch.randint(0, CLASSES, (SAMPLES,))}


def window(model: L.LightningModule, micro_batches: list[dict[str, torch.Tensor]], fixed_k: int) -> None:
    """One optimizer step of Trainer(accumulate_grad_batches=fixed_k) over the micro-batches; .grad set to the
    gradients the optimizer was handed."""
    callback = GradientsHandedToTheOptimizer()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no "GPU available: ..." lines per window
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")  # a one-batch loader
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)  # Lightning vs newer torch
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, accumulate_grad_batches=fixed_k,
                            callbacks=[callback], default_root_dir=root, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, train_dataloaders=DataLoader(micro_batches, batch_size=None))
    for parameter, grad in zip(model.parameters(), callback.grads):
        parameter.grad = grad


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the loop means to minimise: the mean cross-entropy over the whole batch."""
    return model.training_step(batch, 0)
