"""What other tools call gaccum's columns and settings: the scalar tags of Lightning, the Hugging Face Trainer and
plain SummaryWriter loops, and the names of their hyperparameters. Pure: names and values in, gaccum's out.

gaccum's own tags (its exporter's one mapping, gaccum_core.tensorboard.out.TAGS, read backwards) go first: a
gaccum run exported and imported again gets every column back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from gaccum_core.config import RunConfig
from gaccum_core.tensorboard.out import TAGS

METRICS, EVALS = "metrics", "eval"  # the table a column belongs to: metrics.csv (per step) or eval.csv
Column = tuple[str, str]  # (METRICS or EVALS, column)

# gaccum's column -> the tags other tools log it under, the most telling first.
STEP_TAGS: dict[str, tuple[str, ...]] = {
    "loss": ("train/loss", "train_loss", "train_loss_step", "loss", "Loss/train", "loss/train", "training_loss"),
    "lr": ("train/learning_rate", "learning_rate", "lr", "train/lr"),
    "grad_norm": ("train/grad_norm", "grad_norm", "gradient_norm", "train/gradient_norm"),
    "epoch": ("train/epoch", "epoch"),
    "tokens_seen": ("train/num_input_tokens_seen", "num_input_tokens_seen"),
}
LR_MONITOR = "lr-"  # Lightning's LearningRateMonitor logs lr-SGD, lr-AdamW (lr-Adam/pg1 per parameter group)
EVAL_TAGS: dict[str, tuple[str, ...]] = {
    "test_loss": ("eval/loss", "val_loss", "val/loss", "eval_loss", "validation_loss", "valid_loss", "val_loss_epoch",
                  "test_loss", "Loss/test", "Loss/val", "Loss/validation", "loss/val", "loss/test"),
    "test_accuracy": ("eval/accuracy", "val_acc", "val_accuracy", "val/acc", "val/accuracy", "eval_accuracy",
                      "valid_acc", "test_acc", "test_accuracy", "Accuracy/test", "Accuracy/val", "accuracy/val"),
    "perplexity": ("eval/perplexity", "val_ppl", "val_perplexity", "eval_perplexity", "perplexity"),
}

# gaccum's setting -> the hyperparameter names other tools give it; a hyperparameter named as gaccum's own setting
# (accum_steps, lr, seed...) is taken first.
SETTING_NAMES: dict[str, tuple[str, ...]] = {
    "accum_steps": ("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum_steps",
                    "gradient_accumulation"),
    "micro_batch_size": ("per_device_train_batch_size", "batch_size", "train_batch_size", "micro_batch"),
    "lr": ("learning_rate",),
    "grad_clip": ("max_grad_norm", "gradient_clip_val", "clip_grad_norm"),
    "epochs": ("num_train_epochs", "max_epochs", "num_epochs", "n_epochs"),
    "optimizer": ("optim", "optimizer_name"),
    "lr_schedule": ("lr_scheduler_type", "lr_scheduler"),
    "amp": ("precision",),  # Lightning's 16-mixed, bf16-mixed, 32-true; the Trainer's fp16 and bf16 flags below
}
_PRECISIONS = {"16-mixed": "fp16", "16": "fp16", "fp16": "fp16", "bf16-mixed": "bf16", "bf16": "bf16",
               "32-true": "off", "32": "off", "off": "off"}
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(RunConfig)}


def tag_columns(tags: Iterable[str]) -> dict[str, Column]:
    """For each tag that gives one of gaccum's columns, its (table, column): gaccum's own tags first, then the
    other tools' in the order above, one tag per column. A tag not here is kept as it is (imported.csv)."""
    tags = set(tags)
    chosen: dict[str, Column] = {}
    taken: set[Column] = set()
    candidates = [*((tag, column) for column, tag in TAGS.items()),
                  *((tag, (METRICS, column)) for column, names in STEP_TAGS.items() for tag in names),
                  *((tag, (METRICS, "lr")) for tag in sorted(t for t in tags if t.startswith(LR_MONITOR))),
                  *((tag, (EVALS, column)) for column, names in EVAL_TAGS.items() for tag in names)]
    for tag, column in candidates:
        if tag in tags and tag not in chosen and column not in taken:
            chosen[tag] = column
            taken.add(column)
    return chosen


def named_settings(hparams: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """gaccum's settings that the hyperparameters name, each as its field's type, and the hyperparameter each came
    from; a value that does not convert (a fraction of an epoch, an optimizer gaccum lacks) is left out."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field in _FIELD_TYPES:
        for name in (field, *SETTING_NAMES.get(field, ())):
            if name in hparams and field not in values:
                value = _converted(field, hparams[name])
                if value is not None:
                    values[field], sources[field] = value, name
    if "amp" not in values and ("fp16" in hparams or "bf16" in hparams):  # the Trainer's two flags
        fp16, bf16 = _flag(hparams.get("fp16")), _flag(hparams.get("bf16"))
        if fp16 is not None or bf16 is not None:
            values["amp"] = "fp16" if fp16 else "bf16" if bf16 else "off"
            sources["amp"] = "fp16" if fp16 or not bf16 else "bf16"
    return values, sources


def _converted(field: str, value: Any) -> Any:
    """value as the setting `field` takes it, or None when it does not say one."""
    kind = _FIELD_TYPES[field]
    if field == "optimizer":
        return _optimizer(str(value))
    if field == "lr_schedule":
        return str(value).lower() if str(value).lower() in ("cosine", "constant") else None
    if field == "amp":
        return _PRECISIONS.get(str(value).lower().removesuffix(".0"))
    if kind == "bool":
        return _flag(value)
    if kind in ("int", "float"):
        number = _number(value)
        if number is None:
            return None
        if field == "max_steps" and number < 0:  # -1: no step limit (the Trainer, Lightning)
            return 0
        if kind == "int":
            return int(number) if number.is_integer() else None
        return number
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):  # torch's add_hparams writes a bool as 0 or 1
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _optimizer(name: str) -> str | None:
    """adamw_torch, adamw_torch_fused, AdamW -> adamw; Adam -> adam; SGD -> sgd; any other None."""
    name = name.lower()
    if name.startswith("adamw"):
        return "adamw"
    return name if name in ("adam", "sgd") else None
