"""What RunConfig's fields may hold: the fixed sets of values, the forms a model's name takes, the bounds,
and ConfigError, the refusal that names the field."""

from __future__ import annotations

import re
from typing import Any

from gaccum_core.presets import GPT_PRESETS

REDUCTIONS = ("mean", "sum", "mean_per_micro_batch")
# How a language task's per-token losses are averaged over a batch (issue 43; the names verl's where verl has the
# mode): over loss tokens; over sequences of each one's token mean, token sum, or token sum / C (Dr. GRPO); over
# prompt groups of each one's token mean (pg only).
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
             "group-mean-token-mean")


def loss_aggs_for(dataset: str) -> tuple[str, ...]:
    """The loss aggregations a records data set takes: every mode for pg; sft's records have no prompt groups."""
    return LOSS_AGGS if dataset == "pg" else tuple(mode for mode in LOSS_AGGS if mode != "group-mean-token-mean")


AMP_MODES = ("off", "fp16", "bf16")
CLEAR_CACHE_MODES = ("off", "step", "micro")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
OPTIMIZERS = ("sgd", "adam", "adamw")
LR_SCHEDULES = ("constant", "cosine")
SHARDINGS = ("ddp", "fsdp")  # a whole copy per process (DDP), or weights, gradients and optimizer state sharded (FSDP2)
FSDP_SYNCS = ("every", "last")  # reduce-scatter after every micro-batch, or only after the window's last
ON_OFF = ("on", "off")
TORCHVISION_MODELS = ("resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16")
MODELS = ("mlp", "cnn", "cnn_bn", "cnn_gn", *TORCHVISION_MODELS, "gpt")
# weights_file: a state dict of the model's weights, as safetensors or torch.save wrote it
WEIGHTS_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
IMAGE_DATASETS = ("digits", "mnist", "fashionmnist", "cifar10", "fake", "imagefolder")
# pydoc (bundled), text (your .txt/.jsonl files), tokens (nanoGPT's train.bin/val.bin of token ids),
# hf-dataset (a datasets save_to_disk folder or a folder of .parquet files), sft (records of a prompt and a
# completion, the loss over completion tokens: bundled, or from text_file or data_dir), pg (fixed rollouts: records
# of a prompt, a completion, an advantage and a group, the loss -advantage * log p over completion tokens)
TEXT_DATASETS = ("pydoc", "text", "tokens", "hf-dataset", "sft", "pg")
RECORD_DATASETS = ("sft", "pg")  # records of a prompt and a completion, whose loss counts completion tokens only
TOKEN_DTYPES = ("uint16", "uint32")  # the width of a tokens data set's ids (nanoGPT writes uint16)
# Activation checkpointing: none, every ac_every-th block (selective), or every block (full)
AC_MODES = ("off", "selective", "full")
DATASETS = IMAGE_DATASETS + TEXT_DATASETS
TEXT_MODELS = ("gpt",)
TIMM_PREFIX = "timm:"  # timm:NAME, any timm image model, untrained
_TIMM_NAME_RE = re.compile(r"^timm:[A-Za-z0-9_.\-]{1,100}$")
HF_PREFIX = "hf:"  # hf:DIR, a Hugging Face causal language model saved in a local directory
MAX_SEQ_LEN = 1 << 20  # far beyond any model's positions; hf: models are checked against their own when loaded
# The key of an imported run's config.json that says where it came from (gaccum_core.tensorboard.importing): its
# settings are those its hparams named, the rest defaults, and nothing trains it.
IMPORTED_KEY = "imported"


def is_hf(model: str) -> bool:
    """Whether model names a Hugging Face causal LM directory (hf:DIR); the directory is checked when loaded."""
    return model.startswith(HF_PREFIX)


def is_language_model(model: str) -> bool:
    """Whether model is a causal language model (gpt, or hf:DIR) that trains on a text data set."""
    return model in TEXT_MODELS or is_hf(model)


def is_timm(model: str) -> bool:
    """Whether model names a timm model (timm:NAME); the name itself is checked against timm when built."""
    return model.startswith(TIMM_PREFIX)


# MODULE:FUNCTION (a dotted module on the Python path) or FILE.py:FUNCTION: your own model factory.
_FACTORY_RE = re.compile(r"^(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|[^:\n]+\.py):[A-Za-z_]\w*$")


def is_factory(model: str) -> bool:
    """Whether model names your own factory (MODULE:FUNCTION or FILE.py:FUNCTION)."""
    return not is_timm(model) and not is_hf(model) and bool(_FACTORY_RE.match(model))


def takes_weights_file(model: str) -> bool:
    """Whether model can start from a weights file of yours (weights_file): timm:NAME and torchvision's models."""
    return is_timm(model) or model in TORCHVISION_MODELS


GPT_PRESET_NAMES = tuple(GPT_PRESETS)

# Far beyond any real run; catches a typo like 3200000 before it allocates anything.
MAX_BATCH = 1 << 16
MAX_ACCUM = 1 << 16
MAX_IMAGE = 1024
MAX_PROCESSES = 1024  # per machine; the device sets the real limit (preflight)
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


class ConfigError(ValueError):
    """A config field holds a value that is not allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")

    def __reduce__(self) -> tuple:
        """Pickled as its three parts (a worker process's refusal crosses to the page that asked)."""
        return type(self), (self.field, self.value, self.allowed)
