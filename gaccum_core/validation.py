"""RunConfig's checks: each field's type, its allowed values and range, then the settings that only make sense
together. Each refusal is a ConfigError naming the field, the value and what is allowed."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from gaccum_core.presets import GPT_PRESETS
from gaccum_core.values import (_DEVICE_RE, _TIMM_NAME_RE, DATASETS, HF_PREFIX, MAX_ACCUM, MAX_BATCH, MAX_IMAGE,
                                MAX_PROCESSES, MAX_SEQ_LEN, MODELS, RECORD_DATASETS, TEXT_DATASETS, TEXT_MODELS,
                                TORCHVISION_MODELS, WEIGHTS_SUFFIXES, ConfigError, is_factory, is_hf, is_language_model,
                                is_timm, loss_aggs_for, takes_weights_file)

RunConfig = Any  # gaccum_core.config.RunConfig, whose construction calls check (config imports this module)


def check(cfg: RunConfig) -> None:
    """Refuse the first field of cfg that is not allowed (ConfigError); floats given as ints become floats."""
    _check_types(cfg)
    _check_choices(cfg)
    _check_ranges(cfg)


def _check_types(cfg: RunConfig) -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                object.__setattr__(cfg, f.name, float(value))
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ConfigError(f.name, value, f"a value of type {kind}")


def _check_choices(cfg: RunConfig) -> None:
    if is_timm(cfg.model) and not _TIMM_NAME_RE.match(cfg.model):
        raise ConfigError("model", cfg.model, "timm:NAME with a timm model name (letters, digits, _ . -)")
    if is_hf(cfg.model) and not cfg.model.removeprefix(HF_PREFIX).strip():
        raise ConfigError("model", cfg.model, "hf:DIR with the directory of a saved Hugging Face causal language model")
    if cfg.model not in MODELS and not is_timm(cfg.model) and not is_factory(cfg.model) and not is_hf(cfg.model):
        raise ConfigError("model", cfg.model, "one of " + ", ".join(MODELS) + ", timm:NAME (any timm image model), "
                          "MODULE:FUNCTION / FILE.py:FUNCTION (your own factory) or hf:DIR (a saved causal LM)")
    if cfg.dataset not in DATASETS and not is_factory(cfg.dataset):
        raise ConfigError("dataset", cfg.dataset, "one of " + ", ".join(DATASETS) + ", or MODULE:FUNCTION / "
                          "FILE.py:FUNCTION (your function returning (train, test) datasets)")
    for name in _field_names(cfg):
        if not re.match(r"^\w{1,100}$", getattr(cfg, name)):
            raise ConfigError(name, getattr(cfg, name), "a JSON field name (letters, digits, _)")
    for f in dataclasses.fields(cfg):
        allowed = f.metadata.get("choices")
        if allowed is not None and getattr(cfg, f.name) not in allowed:
            raise ConfigError(f.name, getattr(cfg, f.name), "one of " + ", ".join(allowed))
    if not _DEVICE_RE.match(cfg.device):
        raise ConfigError("device", cfg.device, "auto, cpu, cuda or cuda:N")


def _int_range(cfg: RunConfig, name: str, low: int, high: int, note: str = "") -> None:
    value = getattr(cfg, name)
    if not low <= value <= high:
        raise ConfigError(name, value, f"an integer from {low} to {high}{note}")


def _positive_float(cfg: RunConfig, name: str, allow_zero: bool, high: float = math.inf) -> None:
    value = getattr(cfg, name)
    low_ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and low_ok and value <= high):
        bound = "≥ 0" if allow_zero else "> 0"
        raise ConfigError(name, value, f"a finite number {bound}" + (f" and ≤ {high:g}" if high < math.inf else ""))


def _check_ranges(cfg: RunConfig) -> None:
    _int_range(cfg, "micro_batch_size", 1, MAX_BATCH)
    _int_range(cfg, "accum_steps", 1, MAX_ACCUM)
    _int_range(cfg, "growth_interval", 1, 10**9)
    _int_range(cfg, "warmup_steps", 0, 10**9)
    _int_range(cfg, "epochs", 1, 10**6)
    _int_range(cfg, "max_steps", 0, 10**9, " (0 = no limit)")
    _int_range(cfg, "seed", 0, 2**63 - 1)
    _int_range(cfg, "image_size", 0, MAX_IMAGE, " (0 = the dataset's own size)")
    _int_range(cfg, "fake_samples", 2, 10**7)
    _int_range(cfg, "fake_classes", 2, 100_000)
    _int_range(cfg, "eval_every", 0, 10**9, " (0 = at the end of each epoch)")
    _int_range(cfg, "nproc", 1, MAX_PROCESSES)
    _int_range(cfg, "nnodes", 1, MAX_PROCESSES)
    _int_range(cfg, "checkpoint_every", 0, 10**9, " (0 = only on Stop and at the end)")
    _int_range(cfg, "text_file_max_mb", 1, 1024**2)
    _int_range(cfg, "eval_batches", 0, 10**9, " (0 = the whole test split)")
    _int_range(cfg, "ac_every", 1, 10**6)
    _int_range(cfg, "loss_agg_norm", 0, 10**9, " (0 = the longest completion in the training split)")
    _positive_float(cfg, "lr", allow_zero=False, high=1e3)
    _positive_float(cfg, "init_scale", allow_zero=False, high=2.0**126)
    _positive_float(cfg, "grad_clip", allow_zero=True)
    _positive_float(cfg, "momentum", allow_zero=True, high=1.0)
    _positive_float(cfg, "weight_decay", allow_zero=True)
    if cfg.momentum >= 1.0:
        raise ConfigError("momentum", cfg.momentum, "a number from 0 to below 1")
    if not cfg.data_dir.strip():
        raise ConfigError("data_dir", cfg.data_dir, "a non-empty directory path")
    _check_task(cfg)  # last: the settings that only make sense together
    _check_loss_agg(cfg)
    _check_sharding(cfg)
    _check_weights_file(cfg)


def _check_task(cfg: RunConfig) -> None:
    """A text model needs a text data set and an image model an image one; the sequence fits the preset."""
    if is_language_model(cfg.model) and not cfg.is_text:
        raise ConfigError("dataset", cfg.dataset, f"a text data set for {cfg.model}: " + ", ".join(TEXT_DATASETS))
    if cfg.is_text and not is_language_model(cfg.model):
        raise ConfigError("model", cfg.model, f"a language model for the {cfg.dataset} text data set: "
                          + ", ".join(TEXT_MODELS) + " or hf:DIR")
    if cfg.dataset == "text" and not cfg.text_file.strip():
        raise ConfigError("text_file", cfg.text_file, "the path of a UTF-8 text or .jsonl file, or a folder or glob of "
                          "them (required with dataset text)")
    if cfg.packing == "on" and not cfg.is_text:
        raise ConfigError("packing", cfg.packing, "off for an image data set (packing joins text documents)")
    if cfg.model == "gpt":
        most = GPT_PRESETS[cfg.gpt_preset].max_len
        _int_range(cfg, "max_seq_len", 1, most, f" (the positions gpt {cfg.gpt_preset} embeds)")
    else:  # an hf: model's own positions are read from its config.json when it is loaded
        _int_range(cfg, "max_seq_len", 1, MAX_SEQ_LEN)


def _field_names(cfg: RunConfig, applying: bool = False) -> list[str]:
    """The settings naming a record's (or a text row's) JSON field (text_field, prompt_field, ...), in field order;
    applying: only those cfg's data set reads (their `applies`)."""
    return [f.name for f in dataclasses.fields(cfg) if f.name.endswith("_field")
            and (not applying or f.metadata.get("applies") is None or f.metadata["applies"](cfg))]


def _check_loss_agg(cfg: RunConfig) -> None:
    """A records task's fields differ; a loss aggregation other than token-mean: not with reduction sum, on its
    tasks (group-mean-token-mean on pg's alone)."""
    fields = _field_names(cfg, applying=True) if cfg.dataset in RECORD_DATASETS else []
    for i, name in enumerate(fields):
        other = next((o for o in fields[:i] if getattr(cfg, o) == getattr(cfg, name)), None)
        if other is not None:
            raise ConfigError(name, getattr(cfg, name), f"a field other than {other}")
    if cfg.loss_agg == "token-mean":
        return
    if cfg.reduction == "sum":
        raise ConfigError("loss_agg", cfg.loss_agg, "token-mean with reduction sum (a sum is no average)")
    if cfg.dataset not in RECORD_DATASETS:
        raise ConfigError("loss_agg", cfg.loss_agg, f"token-mean for the {cfg.dataset} data set (the aggregation "
                          "modes apply to sft and pg)")
    if cfg.loss_agg not in loss_aggs_for(cfg.dataset):
        raise ConfigError("loss_agg", cfg.loss_agg, "a mode of sft: its records have no prompt groups "
                          "(group-mean-token-mean is pg's)")


def _check_weights_file(cfg: RunConfig) -> None:
    """A weights file for a model that loads one, by its name: whether it opens and fits is preflight's to say."""
    path = cfg.weights_file
    if not path:
        return
    if not takes_weights_file(cfg.model):
        own = (" (an hf: model loads the weights saved in its directory: model.safetensors or pytorch_model.bin "
               "beside its config.json)") if is_hf(cfg.model) else ""
        raise ConfigError("weights_file", path, "a weights file applies only to timm:NAME and torchvision models "
                          f"({', '.join(TORCHVISION_MODELS)}), not to {cfg.model}{own}")
    if not path.strip() or not path.lower().endswith(WEIGHTS_SUFFIXES):
        raise ConfigError("weights_file", path, "the path of the model's state dict in a "
                          + ", ".join(WEIGHTS_SUFFIXES) + " file")


def _check_sharding(cfg: RunConfig) -> None:
    """FSDP shards over processes: it needs more than one."""
    if cfg.sharding == "fsdp" and cfg.world_size == 1:
        raise ConfigError("sharding", cfg.sharding, "ddp with one process (fsdp shards over processes: set nproc "
                          "or nnodes so that nnodes*nproc > 1)")
    if cfg.sharding == "fsdp" and cfg.sync_every_micro_batch:
        raise ConfigError("sync_every_micro_batch", True, "False with sharding fsdp (its fsdp_sync says when "
                          "gradients are reduce-scattered: every or last)")
    if cfg.sharding == "fsdp" and cfg.compile != "off":
        raise ConfigError("compile", cfg.compile, "off with sharding fsdp (gaccum does not compile sharded models)")
