"""One vocabulary for a run's settings, in every place that names them: legends, chips, status lines, the runs
table's labels, a sweep cell's label and axes, an imported run's message. Generated from RunConfig's metadata: a
field's short word (b, k, N), whether a label always names it, names it when not the default, says it by another
field's words or never (in_label), and whether it applies to a run (config.applies). Pure."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gaccum_core.config import HF_PREFIX, RunConfig, applies, by_field, fields_with, is_factory, is_hf, short_word

# The words: the model as it is called (gpt-tiny), b and k, the precision (fp16, bf16; fp32 where amp is off and
# runs differ in it), the processes as N, sharding with its sync (fsdp/last, reshard off; ddp beside an fsdp run),
# activation checkpointing by its mode (ckpt/full, ckpt/selective/2), any other setting as field=value
# (clear_cache=step). A label names a setting only where it applies to its run: no GradScaler scale without fp16,
# no sharding for one process, no text settings for images.
_ALWAYS = fields_with("in_label", "always")
# Named whenever not the default (in_label usual), in RunConfig's order but the precision first (b=8 k=4 fp16
# reduction=sum), and the processes by their count in the whole job (N: nproc, and nnodes with it).
_USUAL = tuple(sorted(("world_size" if name == "nproc" else name for name in fields_with("in_label", "usual")),
                      key=lambda name: name != "amp"))
# The data sets whose data_dir is what they train on (not where a named data set is kept): it tells runs apart.
_DATA_IN_DATA_DIR = ("imagefolder", "tokens", "hf-dataset")
# The usual settings whose default is named too beside a run that differs in it: fp32 beside fp16 or bf16, ddp
# beside fsdp, token-mean beside another aggregation (a reduction=sum run says its reduction; a mean one does not).
_SAID_BESIDE = ("amp", "sharding", "loss_agg")
_DEFAULT = RunConfig()


def short_model(model: str) -> str:
    """A model's name without the folders of its path: hf:DIR and FILE.py:FUNCTION by their last part."""
    if is_hf(model):
        return HF_PREFIX + Path(model.removeprefix(HF_PREFIX)).name
    where, _, function = model.rpartition(":")
    return f"{Path(where).name}:{function}" if is_factory(model) and where.endswith(".py") else model


def value_text(name: str, value: Any) -> str:
    """One value of a setting in the labels' words, where no other setting changes them: b=8, fp32 (amp off),
    bf16, ckpt/full, from w.safetensors, N=2, clear_cache=step."""
    if name == "model":
        return short_model(value)
    if name == "amp":
        return "fp32" if value == "off" else str(value)
    if name == "sharding":
        return str(value)
    if name == "activation_checkpointing":
        return f"ckpt/{value}"
    if name == "loss_agg":  # the mode's own name: seq-mean-token-mean
        return str(value)
    if name == "weights_file":  # by the file's name: from w.safetensors, or untrained
        return f"from {Path(value).name}" if value else "untrained"
    return f"{short_word('nproc' if name == 'world_size' else name)}={value}"


def setting_text(name: str, config: RunConfig) -> str:
    """One setting of a run in the labels' words, with the settings that complete it: gpt-tiny, N=4 (nnodes·nproc),
    fsdp/last reshard off, ckpt/selective/2, seq-mean-token-sum-norm/C=64; a field a label says by another's words
    (in_label other) in those (gpt_preset: gpt-mini); any other as value_text says it."""
    if name in ("model", "gpt_preset") and config.model == "gpt":
        return f"gpt-{config.gpt_preset}"
    if name in ("nproc", "nnodes", "world_size"):
        return value_text("world_size", config.world_size)
    if name in ("sharding", "fsdp_sync", "fsdp_reshard_after_backward") and config.sharding == "fsdp":
        reshard = " reshard off" if config.fsdp_reshard_after_backward == "off" else ""  # it keeps the weights
        return f"fsdp/{config.fsdp_sync}{reshard}"  # and when it reduce-scatters
    if name in ("activation_checkpointing", "ac_every") and config.activation_checkpointing == "selective":
        return f"ckpt/selective/{config.ac_every}"
    if name in ("loss_agg", "loss_agg_norm") and config.loss_agg == "seq-mean-token-sum-norm":
        return f"{config.loss_agg}/C={config.loss_agg_norm or 'longest'}"  # 0: the longest completion
    return value_text(name, getattr(config, name))


def _usual(config: RunConfig, beside: Collection[str] = ()) -> list[str]:
    """The settings a label names whenever they are not the default (fp16 whenever amp is on), and those in
    beside even at the default (fp32)."""
    return [name for name in _USUAL
            if (getattr(config, name) != getattr(_DEFAULT, name) or name in beside) and applies(config, name)]


def run_label(config: RunConfig, known: Collection[str] | None = None, beside: Collection[str] = ()) -> str:
    """A short legend text naming what usually differs between compared runs: model, b, k, and the
    precision, reduction, cache clearing, compilation and processes when not the default. known: the settings
    an imported run's hparams named (known_settings), the only ones said; None for a run of gaccum's. beside: the
    usual settings named even at their default, where compared runs differ in them (fp32 beside fp16)."""
    return " ".join(setting_text(name, config) for name in (*_ALWAYS, *_usual(config, beside))
                    if known is None or name in known)


def _named(config: RunConfig, name: str, known: Collection[str] | None = None) -> bool:
    """Whether a label may name this setting of this run: it applies to the run (and the run knows it), and
    data_dir only where it holds what the run trains on (a named data set's data_dir is only where it is kept)."""
    return applies(config, name) and (name != "data_dir" or config.dataset in _DATA_IN_DATA_DIR) and \
        (known is None or name in known)


def _differing(configs: Sequence[RunConfig], known: Sequence[Collection[str] | None]) -> list[str]:
    """The settings (RunConfig's order) in which the runs they apply to (and that know them) differ, but those a
    label names anyway (the usual ones are named where not the default: fp16 against nothing says amp=off)."""
    skip = set(by_field("in_label"))  # named anyway, said by another's words, or never
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name not in skip]
    return [name for name in fields
            if len({getattr(c, name) for c, sure in zip(configs, known) if _named(c, name, sure)}) > 1]


def run_labels(configs: Sequence[RunConfig], names: Sequence[str] | None = None,
               run_ids: Sequence[str] | None = None,
               known: Sequence[Collection[str] | None] | None = None) -> list[str]:
    """One legend text per run: model, b and k, the usual settings (run_label), every other setting in
    which the runs it applies to differ (where it applies), then the run's name if it has one. Runs that still
    share a label are told apart by when they were created (from run_ids), never by the end of their id. known: per
    run, the settings an imported run's hparams named (known_settings; None for a run of gaccum's): such a run is
    said "imported" with those alone, its other settings (gaccum's defaults in its config) never."""
    known = list(known) if known is not None else [None] * len(configs)
    differing = _differing(configs, known)
    beside = [name for name in _SAID_BESIDE  # fp32 beside fp16, ddp beside fsdp
              if len({getattr(c, name) for c, sure in zip(configs, known) if _named(c, name, sure)}) > 1]
    labels = []
    for i, (config, sure) in enumerate(zip(configs, known)):
        said = [setting_text(n, config) for n in differing if _named(config, n, sure)]
        text = " ".join(part for part in ["imported" if sure is not None else "", run_label(config, sure, beside),
                                          *said] if part)
        name = names[i] if names is not None else ""
        labels.append(f"{text} · {name}" if name else text)
    return _told_apart(labels, run_ids)


def created_text(run_id: str) -> str:
    """When the run was created, from its id (UTC time, then a random part): "run of 14:03:05", in
    this machine's time zone; the id itself when it holds no time."""
    try:
        created = datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return run_id
    return f"run of {created.astimezone():%H:%M:%S}"


def _told_apart(labels: list[str], run_ids: Sequence[str] | None) -> list[str]:
    """labels with each repeated one followed by its run's creation time (and a count when even that repeats)."""
    if run_ids is None:
        return labels
    repeated = {label for label, count in Counter(labels).items() if count > 1}  # not list.count: 10,000 runs
    told = [f"{label} · {created_text(run_id)}" if label in repeated else label
            for label, run_id in zip(labels, run_ids)]
    still = {label for label, count in Counter(told).items() if count > 1}  # created in the same second
    seen: dict[str, int] = {}
    for i, label in enumerate(told):
        if label in still:
            seen[label] = seen.get(label, 0) + 1
            told[i] = f"{label} ({seen[label]})"
    return told
