"""RunConfig: the one frozen description of a training run, validated on construction. Each field declares
itself once, in its metadata (setting): its help, its control's label, its short word, when it applies, its
choices, what a run's label makes of it, what the planner makes of it, whether a sweep may cross it, its
usual Sweeps-page axis and its Train-page section. The controls, the command line's flags, the docs' settings
table, the labels and the sweeps read it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gaccum_core.presets import GPT_PRESETS, preset_words
from gaccum_core.validation import check
from gaccum_core.values import *  # noqa: F401,F403  (the fixed sets, model forms and ConfigError, said as config.X)
from gaccum_core.values import (AC_MODES, AMP_MODES, CLEAR_CACHE_MODES, COMPILE_MODES, FSDP_SYNCS, GPT_PRESET_NAMES,
                                IMPORTED_KEY, LOSS_AGGS, LR_SCHEDULES, MODELS, ON_OFF, OPTIMIZERS, RECORD_DATASETS,
                                REDUCTIONS, SHARDINGS, TEXT_DATASETS, TOKEN_DTYPES, ConfigError, loss_aggs_for)

_DOWNLOADED = ("mnist", "fashionmnist", "cifar10")
# What a run's label makes of a field (in_label): always named; named when not the default (usual); said by another
# field's words (other: gpt_preset in gpt-tiny); never (where a run ran, what it wrote). None: named where runs differ.
IN_LABEL = ("always", "usual", "other", "never")
# What the planner makes of a field (planner): it picks or crosses it; it ignores it (a run's length or processes,
# no plan flag); the run it measures has it (base: the Plan page asks for it). None: a plan flag, not on the page.
PLANNER = ("chooses", "ignores", "base")


def setting(default: Any, label: str | None, help_text: str, *, choices: tuple[str, ...] | None = None,
            short: str | None = None, applies: Callable[[Any], bool] | None = None, in_label: str | None = None,
            column: bool = False, planner: str | None = None, cross: bool = True, sweep: str | None = None,
            section: str | None = None, offered: Callable[[Any], tuple[str, ...]] | None = None) -> Any:
    """A RunConfig field and everything said about it: label (its control's; None: no control), help (one
    line), choices (a fixed set), short (its word in labels: b), applies (the runs it changes; None: all),
    in_label (IN_LABEL), column (a column of the runs table), planner (PLANNER), cross (whether a sweep may
    cross it; False: where a run runs or reads, what it writes or records), sweep (its axis's label among the
    Sweeps page's usual axes; None: a crossed field's axis is under More axes, by its label) and section (the
    Train page's section its generated control joins; None: the page draws it itself, or none); offered (the
    choices a control offers a run; None: all)."""
    assert in_label in (None, *IN_LABEL) and planner in (None, *PLANNER), (in_label, planner)
    return dataclasses.field(default=default, metadata={
        "label": label, "help": help_text, "choices": choices, "short": short, "applies": applies,
        "in_label": in_label, "column": column, "planner": planner, "cross": cross, "sweep": sweep,
        "section": section, "offered": offered})


def _has_fields(c: Any) -> bool:
    """.jsonl lines and hf-dataset rows have fields; a .txt file's paragraphs do not."""
    return c.dataset == "hf-dataset" or (c.dataset == "text" and not c.text_file.strip().lower().endswith(".txt"))


@dataclass(frozen=True)
class RunConfig:
    """Every setting of one accumulation experiment."""

    model: str = setting("mlp", "Model",
            "model to train: " + ", ".join(MODELS) + ", timm:NAME (any timm image model, untrained), "
            "MODULE:FUNCTION / FILE.py:FUNCTION (your factory, called with input_shape=(C, H, W), num_classes=N), "
            "or hf:DIR (a Hugging Face causal language model saved in DIR with its tokenizer; never downloaded)",
            in_label="always", column=True, planner="base")
    dataset: str = setting("digits", "Dataset",
            "data set: digits (bundled, no download), mnist, fashionmnist, cifar10 (from data_dir), fake, "
            "imagefolder (your images in data_dir, one sub-folder per class), MODULE:FUNCTION / "
            "FILE.py:FUNCTION (your function returning (train, test) datasets of (image tensor, int label)); "
            "text for gpt and hf:DIR: pydoc (Python's documentation topics, bundled), text (text_file), tokens "
            "(nanoGPT's data_dir/train.bin and val.bin of token ids) or hf-dataset (a folder datasets' "
            "save_to_disk wrote, or of .parquet files, in data_dir; its text_field) or sft (records of a prompt and "
            "a completion, the loss over completion tokens: bundled, or text_file's .jsonl, or data_dir's rows)",
            column=True, planner="base")
    micro_batch_size: int = setting(32, "Micro-batch size b",
            "samples per forward/backward pass (b)",
            short="b", in_label="always", column=True, planner="chooses", sweep="Micro-batch sizes b")
    accum_steps: int = setting(4, "Accumulation steps k",
            "micro-batches accumulated per optimizer step (k); effective batch = b*k",
            short="k", in_label="always", column=True, planner="chooses")
    reduction: str = setting("mean", "Loss reduction",
            "loss reduction: mean (exact: each micro-batch's summed loss over the window's samples, or "
            "target tokens for text), sum, or mean_per_micro_batch (the textbook loop: each micro-batch's "
            "mean loss divided by k; NOT exact when micro-batches hold different sample or token counts)",
            choices=REDUCTIONS, in_label="usual", column=True, sweep="Loss reductions")
    amp: str = setting("off", "Mixed precision",
            "mixed precision: off, fp16 (autocast + GradScaler) or bf16 (autocast, no scaler)",
            choices=AMP_MODES, in_label="usual", column=True, planner="chooses", sweep="Precisions")
    init_scale: float = setting(65536.0, "Initial loss scale",
            "GradScaler's initial loss scale (fp16 only)",
            applies=lambda c: c.amp == "fp16", column=True)
    growth_interval: int = setting(2000, "Growth interval",
            "clean steps before the GradScaler doubles the scale (fp16 only)",
            applies=lambda c: c.amp == "fp16")
    grad_clip: float = setting(0.0, "Gradient clipping (0 = off)",
            "clip the gradient norm to this value after unscaling (0 = off)",
            column=True)
    clear_cache: str = setting("off", "Cache clearing",
            "gc.collect() + torch.cuda.empty_cache(): off, after each optimizer step, or after each micro-batch",
            choices=CLEAR_CACHE_MODES, in_label="usual", column=True, planner="chooses")
    compile: str = setting("off", "torch.compile",
            "torch.compile mode: off, default, reduce-overhead, max-autotune",
            choices=COMPILE_MODES, in_label="usual", column=True, planner="chooses")
    optimizer: str = setting("sgd", "Optimizer",
            "sgd (with momentum), adam or adamw",
            choices=OPTIMIZERS, column=True, planner="base")
    lr: float = setting(0.05, "Learning rate",
            "base learning rate",
            column=True)
    momentum: float = setting(0.9, "Momentum",
            "SGD momentum (ignored by adam/adamw)",
            applies=lambda c: c.optimizer == "sgd")
    weight_decay: float = setting(0.0, "Weight decay",
            "weight decay")
    lr_schedule: str = setting("constant", "Schedule",
            "constant or cosine (after warmup), advanced once per optimizer step",
            choices=LR_SCHEDULES, column=True)
    warmup_steps: int = setting(0, "Warmup steps",
            "optimizer steps of linear warmup")
    epochs: int = setting(1, "Epochs",
            "passes over the training set",
            planner="ignores")
    max_steps: int = setting(0, "Max optimizer steps (0 = no limit)",
            "stop after this many optimizer steps (0 = no limit)",
            planner="ignores")
    seed: int = setting(0, "Seed",
            "seed for the initial weights, the sample order and what training draws (dropout; each rank its own)",
            column=True)
    device: str = setting("auto", "Device",
            "auto, cpu, cuda or cuda:N",
            in_label="never", planner="base", cross=False)
    data_dir: str = setting("data", "Data directory",
            "where mnist, fashionmnist and cifar10 are read from; for imagefolder, the folder of class "
            "folders (or of train/ and val/ each holding them); for tokens, the folder of train.bin (and "
            "val.bin); for hf-dataset (and sft or pg, when not 'data'), the folder datasets' save_to_disk wrote, or of "
            ".parquet files",
            applies=lambda c: c.dataset in (*_DOWNLOADED, "imagefolder", "tokens", "hf-dataset", *RECORD_DATASETS),
            planner="base", cross=False)
    download: bool = setting(False, "Download if missing",
            "download mnist/fashionmnist/cifar10 into data_dir when missing",
            applies=lambda c: c.dataset in _DOWNLOADED, in_label="never", cross=False)
    image_size: int = setting(0, "Image size (0 = the data set's own)",
            "resize images to this size for the model (0 = the data set's own size; fake: generated size)",
            applies=lambda c: not c.is_text, planner="base")
    fake_samples: int = setting(1024, "Fake samples",
            "training samples of the fake data set (its test split is a fifth of that)",
            applies=lambda c: c.dataset == "fake", planner="base")
    fake_classes: int = setting(10, "Fake classes",
            "classes of the fake data set",
            applies=lambda c: c.dataset == "fake")
    eval_every: int = setting(0, "Evaluate every N steps (0 = each epoch)",
            "evaluate on the test split every N optimizer steps (0 = at the end of each epoch)",
            planner="ignores", cross=False)
    nproc: int = setting(1, "Processes N (data-parallel)",
            "data-parallel processes per machine (DDP through torchrun, one GPU each on CUDA); "
            "effective batch = nnodes*nproc*b*k",
            short="N", in_label="usual", planner="chooses")
    nnodes: int = setting(1, None,
            "machines in a data-parallel job (the command line's --node-rank and --rdzv-endpoint join them)",
            in_label="other", planner="ignores")
    checkpoint_every: int = setting(100, "Checkpoint every N steps (0 = on Stop and at the end)",
            "write checkpoint.pt every N optimizer steps, besides on Stop and at the end "
            "(0 = only then); a killed run resumes from the last one",
            planner="ignores", cross=False)
    sync_every_micro_batch: bool = setting(False, "All-reduce after every micro-batch (no_sync off)",
            "all-reduce gradients after every micro-batch instead of once per window "
            "(turns DDP's no_sync off, to see what it saves)",
            applies=lambda c: c.world_size > 1 and c.sharding == "ddp", planner="ignores")
    sharding: str = setting("ddp", "Sharding",
            "ddp: every process holds the whole model, its gradients and optimizer state; fsdp: FSDP2 "
            "shards them over the processes (each block, then the root), gathering weights per block as it "
            "computes (needs nnodes*nproc > 1)",
            choices=SHARDINGS, applies=lambda c: c.world_size > 1, in_label="usual", planner="chooses")
    fsdp_sync: str = setting("every", "FSDP gradient sync",
            "with fsdp: reduce-scatter gradients after every micro-batch (each rank keeps 1/N of the "
            "gradient) or only after the window's last (k times fewer collectives, but each rank keeps the "
            "whole fp32 gradient between micro-batches)",
            choices=FSDP_SYNCS, applies=lambda c: c.sharding == "fsdp", in_label="other", planner="chooses")
    fsdp_reshard_after_backward: str = setting("on", "Reshard after backward",
            "with fsdp: on frees each block's gathered weights after its backward; off "
            "keeps them between a window's micro-batches (fewer all-gathers, more memory)",
            choices=ON_OFF, applies=lambda c: c.sharding == "fsdp", in_label="other", planner="ignores")
    text_file: str = setting("", "Text file",
            "what the text data set reads: a UTF-8 text file split on blank lines into documents, or .jsonl, "
            "one JSON object a line whose text_field is a document; or a folder or glob of such files (shards, "
            "read in sorted order). Tokenised once into the token cache (cache_dir), of any size. For sft and pg: "
            "a .jsonl file (folder, glob) of records (empty: data_dir's rows when it is set, else the bundled records)",
            applies=lambda c: c.dataset in ("text", *RECORD_DATASETS), planner="base", cross=False)
    text_file_max_mb: int = setting(256, "Largest document read at once (MB)",
            "the most text read into memory at once, in MB: a larger document (a paragraph or a "
            ".jsonl line) is refused; the corpus itself may be of any size",
            applies=lambda c: c.dataset in ("text", *RECORD_DATASETS), in_label="never", planner="base", cross=False)
    text_field: str = setting("text", "JSON field holding the text",
            "the field of each .jsonl line that holds its document's text",
            applies=_has_fields, planner="base", cross=False)
    prompt_field: str = setting("prompt", "Prompt field",
            "the field of each sft or pg record (a .jsonl line, or a row of data_dir) that holds its prompt, whose "
            "tokens the loss leaves out",
            applies=lambda c: c.dataset in RECORD_DATASETS, planner="base", cross=False, section="Model and data")
    completion_field: str = setting("completion", "Completion field",
            "the field of each sft or pg record that holds its completion, whose tokens the loss counts",
            applies=lambda c: c.dataset in RECORD_DATASETS, planner="base", cross=False, section="Model and data")
    advantage_field: str = setting("advantage", "Advantage field",
            "the field of each pg record that holds its advantage (a number): each completion token's loss is "
            "-advantage * log p(token)",
            applies=lambda c: c.dataset == "pg", planner="base", cross=False, section="Model and data")
    group_field: str = setting("group", "Group field",
            "the field of each pg record that holds its group (a string or integer id shared by the completions "
            "of one prompt): the epoch order and the held-out split keep a group together",
            applies=lambda c: c.dataset == "pg", planner="base", cross=False, section="Model and data")
    loss_agg: str = setting("token-mean", "Loss aggregation",
            "how sft's and pg's per-token losses are averaged over a window, exactly under accumulation: token-mean "
            "(over the loss tokens), seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (each "
            "sequence's token mean, sum, or sum / loss_agg_norm, averaged over sequences) or group-mean-token-mean "
            "(pg only: each prompt group's token mean, averaged over groups)",
            choices=LOSS_AGGS, applies=lambda c: c.dataset in RECORD_DATASETS, in_label="usual",
            section="Model and data", offered=lambda c: loss_aggs_for(c.dataset))
    loss_agg_norm: int = setting(0, "Aggregation constant C (0 = the longest completion)",
            "seq-mean-token-sum-norm's divisor C (Dr. GRPO's constant): 0 = the longest completion in the "
            "training split after truncation",
            applies=lambda c: c.loss_agg == "seq-mean-token-sum-norm", in_label="other",
            section="Model and data")
    max_seq_len: int = setting(128, "Sequence length (tokens)",
            "longest sequence (tokens) of the text data sets: documents are cut into chunks of this length "
            "(at most the positions the model embeds)",
            applies=lambda c: c.is_text, planner="base")
    gpt_preset: str = setting("tiny", "GPT size",
            "size of the gpt model: " + ", ".join(preset_words(name) for name in GPT_PRESETS)
            + "; tiny suits the CPU, gpt2 is GPT-2 small's shape",
            choices=GPT_PRESET_NAMES, applies=lambda c: c.model == "gpt", in_label="other", planner="base")
    no_dropout: bool = setting(False, "Dropout off",
            "turn the model's dropout off (every dropout layer's p, and an hf: model's dropout settings, "
            "set to 0): accumulated and big-batch steps then compute the same function")
    packing: str = setting("off", "Packing (documents joined into full sequences)",
            "off: each document cut into sequences of max_seq_len, its last one padded (micro-batches hold "
            "different numbers of target tokens); on: documents joined with an end-of-text token and cut into "
            "full sequences (nanoGPT), so every micro-batch holds the same number. A tokens data set is packed "
            "by nature",
            choices=ON_OFF, applies=lambda c: c.is_text and c.dataset != "tokens", planner="base")
    token_dtype: str = setting("uint16", "Token id width",
            "the width of a tokens data set's ids in train.bin and val.bin: uint16 (as nanoGPT writes them, "
            "for a vocabulary of at most 65,536 ids) or uint32",
            choices=TOKEN_DTYPES, applies=lambda c: c.dataset == "tokens", planner="base", cross=False)
    cache_dir: str = setting("", "Token cache folder (empty = beside the runs)",
            "where text is kept tokenised (one flat file of token ids per corpus and tokenizer, reused by "
            "later runs, other ranks and the planner); empty: GACCUM_CACHE_DIR, else token-cache beside the "
            "runs directory (--runs-dir, else GACCUM_RUNS_DIR, else ./runs)",
            applies=lambda c: c.dataset in ("text", "hf-dataset", *RECORD_DATASETS), in_label="never", planner="base",
            cross=False)
    eval_batches: int = setting(50, "Batches per evaluation (0 = the whole test split)",
            "batches of the test split each evaluation reads: the same ones every time, so evaluations "
            "compare (0 = the whole split)",
            cross=False)
    activation_checkpointing: str = setting("off", "Activation checkpointing",
            "keep only each block's input and recompute its activations during backward "
            "(torch.utils.checkpoint, non-reentrant, dropout masks preserved): off, selective "
            "(every ac_every-th block) or full (every block); less activation memory for more "
            "compute, the lever beside accumulation",
            choices=AC_MODES, short="checkpointing", in_label="usual", planner="chooses")
    ac_every: int = setting(2, "Checkpoint every N-th block",
            "with selective activation checkpointing: checkpoint every N-th block (1 = every block, as full)",
            applies=lambda c: c.activation_checkpointing == "selective", in_label="other", planner="base")
    weights_file: str = setting("", "Weights file (empty = untrained)",
            "start a timm:NAME or torchvision model from your weights: a .safetensors, .pth, .pt or .bin "
            "file of its state dict (empty: untrained, drawn from the seed). Every key and shape must fit; "
            "a classifier of other classes is left freshly initialised for the data set's",
            cross=False)
    tensorboard: str = setting("on", "TensorBoard event files (tb/ in the run's folder)",
            "on: the run also writes TensorBoard event files into its folder's tb/ as it trains (every "
            "metrics.csv and eval.csv column as a scalar, its settings and final figures as hparams; "
            "`tensorboard --logdir` on the runs directory shows them); off: none",
            choices=ON_OFF, in_label="never", cross=False)

    def __post_init__(self) -> None:
        check(self)

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step in a full window: every process's micro-batch times accum_steps."""
        return self.world_size * self.micro_batch_size * self.accum_steps

    @property
    def is_text(self) -> bool:
        """Causal language modelling (gpt on pydoc or a text file) rather than image classification."""
        return self.dataset in TEXT_DATASETS

    @property
    def world_size(self) -> int:
        """Data-parallel processes in the whole job."""
        return self.nnodes * self.nproc

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain JSON-ready dict."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The config as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build a config from a dict; unknown keys are an error, missing keys take defaults."""
        if not isinstance(data, dict):
            raise ConfigError("config", type(data).__name__, "a JSON object of RunConfig fields")
        names = {f.name for f in dataclasses.fields(cls)}
        # config.json's record of resumed changes, and an imported run's marker (where it came from): no settings
        data = {k: v for k, v in data.items() if k not in ("history", IMPORTED_KEY)}
        for key in data:
            if key not in names:
                raise ConfigError(key, data[key], f"a known field ({', '.join(sorted(names))})")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        """Parse a config written by to_json (or by hand)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError("config.json", text[:40], f"valid JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        """Read a config.json file."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def extended(self, epochs: int | None = None, max_steps: int | None = None) -> "RunConfig":
        """This run planned at least as long (a resume's new length): ConfigError for a shorter one."""
        if epochs is not None and epochs < self.epochs:
            raise ConfigError("epochs", epochs, f"at least {self.epochs}, this run's epochs: a resumed run "
                                                "can only be extended")
        if max_steps is not None and max_steps != 0 and (self.max_steps == 0 or max_steps < self.max_steps):
            allowed = ("0 (no limit), this run's step limit" if self.max_steps == 0 else
                       f"at least {self.max_steps} (this run's step limit) or 0 (no limit)")
            raise ConfigError("max_steps", max_steps, f"{allowed}: a resumed run can only be extended")
        lengths = {k: v for k, v in (("epochs", epochs), ("max_steps", max_steps)) if v is not None}
        return self.replace(**lengths)


# Each field that takes one of a fixed set of values, and that set: the config's check, the CLI's choices.
CHOICES: dict[str, tuple[str, ...]] = {f.name: f.metadata["choices"] for f in dataclasses.fields(RunConfig)
                                       if f.metadata["choices"] is not None}


def fields_with(key: str, value: Any = True) -> tuple[str, ...]:
    """The RunConfig fields (in their order) whose metadata `key` is `value`: fields_with("column")."""
    return tuple(name for name, f in _FIELDS.items() if f.metadata[key] == value)


def by_field(key: str) -> dict[str, Any]:
    """One piece of every field's metadata, by field name, where it is set: by_field("help"), by_field("label")."""
    return {name: f.metadata[key] for name, f in _FIELDS.items() if f.metadata[key] is not None}


def short_word(name: str) -> str:
    """A setting's word in labels: b for micro_batch_size, N for nproc, else its name."""
    field = _FIELDS.get(name)
    return (field.metadata["short"] if field else None) or name


def applies(config: RunConfig, name: str) -> bool:
    """Whether the setting `name` changes what this run does (init_scale only with fp16, text settings only
    for text, sharding only with several processes…): what a run's label may name. Not a field: always."""
    rule = _FIELDS[name].metadata["applies"] if name in _FIELDS else None
    return rule is None or rule(config)


_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


# What a person gets without choosing: the Train page's controls and the command line's flags start here.
# 30 epochs of digits: 360 optimizer steps, long enough to watch the loss fall from 2.3 to about 0.02
# and test accuracy climb to 0.97 (one epoch was 12 steps, over in a second, loss 2.30 → 2.07).
DEFAULT_RUN = RunConfig(model="cnn", epochs=30)


def problems(values: dict[str, Any], defaults: RunConfig = DEFAULT_RUN) -> dict[str, ConfigError]:
    """Every field of `values` that RunConfig refuses, each with its own ConfigError (empty when they run).

    RunConfig stops at the first refused field, so each one found is set back to its default and the
    config is built again: the rules stay RunConfig's own. A refusal that names a field already
    refused (the default does not suit another field) ends the search."""
    found: dict[str, ConfigError] = {}
    while True:
        try:
            RunConfig(**{**values, **{name: getattr(defaults, name) for name in found}})
        except ConfigError as exc:
            if exc.field in found or exc.field not in values:
                found.setdefault(exc.field, exc)
                return found
            found[exc.field] = exc
        else:
            return found
