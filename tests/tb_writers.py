"""TensorBoard event files as other tools write them, each with the writer that tool uses: a Lightning run
(torch's SummaryWriter, the hparams in the same file as Lightning's TensorBoardLogger puts them), a Hugging Face
Trainer run (transformers' own TensorBoardCallback) and a plain SummaryWriter loop with add_hparams (which puts its
hparams in a folder of their own)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summaries

LIGHTNING_HPARAMS = {"accumulate_grad_batches": 4, "batch_size": 8, "lr": 0.05, "precision": "16-mixed",
                     "hidden_dim": 64}
TRAINER_ARGS = {"output_dir": "out", "per_device_train_batch_size": 16, "gradient_accumulation_steps": 2,
                "learning_rate": 3e-4, "max_steps": -1, "num_train_epochs": 2.0, "fp16": True, "bf16": False,
                "optim": "adamw_torch_fused", "lr_scheduler_type": "linear", "seed": 7, "logging_steps": 5}


def lightning_loss(step: int) -> float:
    return 2.0 - 0.1 * step


def lightning_run(folder: Path, steps: int = 12, per_epoch: int = 4, hparams: dict | None = None,
                  in_events: bool = True) -> Path:
    """What Lightning's TensorBoardLogger writes for self.log("train_loss"), self.log("val_loss"), self.log("val_acc")
    and a LearningRateMonitor: train_loss, epoch and lr-SGD at every step, val_loss and val_acc at each epoch's
    end; the hparams (log_hyperparams) in hparams.yaml and, with its default hp_metric (in_events), in the same
    event file with hp_metric."""
    import yaml

    hparams = hparams if hparams is not None else LIGHTNING_HPARAMS
    writer = SummaryWriter(str(folder))
    (folder / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    if in_events:
        for summary in hparams_summaries(hparams, {"hp_metric": -1}):
            writer.file_writer.add_summary(summary)
        writer.add_scalar("hp_metric", -1, 0)
    for step in range(1, steps + 1):
        writer.add_scalar("train_loss", lightning_loss(step), step)
        writer.add_scalar("epoch", (step - 1) // per_epoch, step)
        writer.add_scalar("lr-SGD", 0.05 / step, step)
        if step % per_epoch == 0:
            writer.add_scalar("val_loss", 1.0 / step, step)
            writer.add_scalar("val_acc", step / (steps + 1), step)
    writer.close()
    return folder


def trainer_run(folder: Path, steps: int = 20, args: dict | None = None) -> Path:
    """What the Trainer's TensorBoardCallback writes: its TrainingArguments as the text `args`, each log's loss,
    learning_rate, grad_norm and epoch as train/..., each evaluation's as eval/..., against the global step."""
    from transformers.integrations import TensorBoardCallback
    from transformers.trainer_callback import TrainerControl, TrainerState

    arguments = SimpleNamespace(to_json_string=lambda: json.dumps(args or TRAINER_ARGS), output_dir=str(folder))
    callback = TensorBoardCallback(tb_writer=SummaryWriter(str(folder)))
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(arguments, state, control)
    for step in range(5, steps + 1, 5):
        state.global_step = step
        callback.on_log(arguments, state, control, logs={"loss": 1.0 / step, "learning_rate": 3e-4 * (1 - step / 40),
                                                         "grad_norm": 0.5, "epoch": step / 8})
        if step % 10 == 0:
            callback.on_log(arguments, state, control, logs={"eval_loss": 2.0 / step, "eval_accuracy": 0.8,
                                                             "eval_runtime": 0.25, "epoch": step / 8})
    callback.on_train_end(arguments, state, control)
    return folder


def summary_writer_loop(folder: Path, steps: int = 6) -> Path:
    """A plain loop as PyTorch's tutorial writes it: Loss/train per step, Loss/test and Accuracy/test now and then,
    then add_hparams, which writes the hparams into a new folder named by the time under this one."""
    writer = SummaryWriter(str(folder))
    for step in range(steps):
        writer.add_scalar("Loss/train", 1.5 - 0.2 * step, step)
        if step % 3 == 2:
            writer.add_scalar("Loss/test", 1.2 - 0.1 * step, step)
            writer.add_scalar("Accuracy/test", 0.1 * step, step)
    writer.add_hparams({"lr": 0.01, "batch_size": 32, "gradient_accumulation_steps": 2, "optimizer": "SGD"},
                       {"hparam/accuracy": 0.5})
    writer.close()
    return folder
