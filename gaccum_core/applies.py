"""Which settings change what a run does: init_scale only with fp16, text settings only for text, sharding only
with several processes... Every setting not named here applies to every run. What a run's label may name
(gaccum_core.runs.catalog)."""

from __future__ import annotations

from typing import Callable

from gaccum_core.config import RunConfig

_DOWNLOADED = ("mnist", "fashionmnist", "cifar10")
# The settings that apply to some runs only, and to which: every other setting applies to every run.
_APPLIES_WHEN: dict[str, Callable[[RunConfig], bool]] = {
    "init_scale": lambda c: c.amp == "fp16",  # the GradScaler's: fp16 only
    "growth_interval": lambda c: c.amp == "fp16",
    "momentum": lambda c: c.optimizer == "sgd",
    "sharding": lambda c: c.world_size > 1,  # one process shards nothing and syncs with nobody
    "sync_every_micro_batch": lambda c: c.world_size > 1 and c.sharding == "ddp",
    "fsdp_sync": lambda c: c.sharding == "fsdp",
    "fsdp_reshard_after_backward": lambda c: c.sharding == "fsdp",
    "ac_every": lambda c: c.activation_checkpointing == "selective",
    "gpt_preset": lambda c: c.model == "gpt",
    "data_dir": lambda c: c.dataset in (*_DOWNLOADED, "imagefolder", "tokens", "hf-dataset"),
    "download": lambda c: c.dataset in _DOWNLOADED,
    "image_size": lambda c: not c.is_text,
    "fake_samples": lambda c: c.dataset == "fake",
    "fake_classes": lambda c: c.dataset == "fake",
    "text_file": lambda c: c.dataset == "text",
    "text_file_max_mb": lambda c: c.dataset == "text",
    # .jsonl lines and hf-dataset rows have fields; a .txt file's paragraphs do not
    "text_field": lambda c: c.dataset == "hf-dataset" or (c.dataset == "text" and not c.text_file.strip().lower()
                                                         .endswith(".txt")),
    "cache_dir": lambda c: c.dataset in ("text", "hf-dataset"),
    "token_dtype": lambda c: c.dataset == "tokens",
    "max_seq_len": lambda c: c.is_text,
    "packing": lambda c: c.is_text and c.dataset != "tokens",  # a tokens data set is packed by nature
}


def applies(config: RunConfig, name: str) -> bool:
    """Whether the setting `name` changes what this run does (init_scale only with fp16, text settings only
    for text, sharding only with several processes…): what a run's label may name."""
    rule = _APPLIES_WHEN.get(name)
    return rule is None or rule(config)
