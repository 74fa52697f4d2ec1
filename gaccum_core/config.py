"""RunConfig: the one frozen description of a training run, validated on construction."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaccum_core.presets import GPT_PRESETS

REDUCTIONS = ("mean", "sum", "mean_per_micro_batch")
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
# hf-dataset (a datasets save_to_disk folder or a folder of .parquet files)
TEXT_DATASETS = ("pydoc", "text", "tokens", "hf-dataset")
TOKEN_DTYPES = ("uint16", "uint32")  # the width of a tokens data set's ids (nanoGPT writes uint16)
# Activation checkpointing: none, every ac_every-th block (selective), or every block (full)
AC_MODES = ("off", "selective", "full")
DATASETS = IMAGE_DATASETS + TEXT_DATASETS
TEXT_MODELS = ("gpt",)
TIMM_PREFIX = "timm:"  # timm:NAME, any timm image model, untrained
_TIMM_NAME_RE = re.compile(r"^timm:[A-Za-z0-9_.\-]{1,100}$")
HF_PREFIX = "hf:"  # hf:DIR, a Hugging Face causal language model saved in a local directory
MAX_SEQ_LEN = 1 << 20  # far beyond any model's positions; hf: models are checked against their own when loaded
# The key of an imported run's config.json that says where it came from (gaccum_core.runs.tb_import): its
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


def _one_of(default: str, allowed: tuple[str, ...]) -> Any:
    """A RunConfig field that takes one of a fixed set of values (collected in CHOICES)."""
    return dataclasses.field(default=default, metadata={"choices": allowed})


@dataclass(frozen=True)
class RunConfig:
    """Every setting of one accumulation experiment."""

    model: str = "mlp"
    dataset: str = "digits"
    micro_batch_size: int = 32
    accum_steps: int = 4
    reduction: str = _one_of("mean", REDUCTIONS)
    amp: str = _one_of("off", AMP_MODES)
    init_scale: float = 65536.0
    growth_interval: int = 2000
    grad_clip: float = 0.0
    clear_cache: str = _one_of("off", CLEAR_CACHE_MODES)
    compile: str = _one_of("off", COMPILE_MODES)
    optimizer: str = _one_of("sgd", OPTIMIZERS)
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = _one_of("constant", LR_SCHEDULES)
    warmup_steps: int = 0
    epochs: int = 1
    max_steps: int = 0
    seed: int = 0
    device: str = "auto"
    data_dir: str = "data"
    download: bool = False
    image_size: int = 0
    fake_samples: int = 1024
    fake_classes: int = 10
    eval_every: int = 0
    nproc: int = 1
    nnodes: int = 1
    checkpoint_every: int = 100
    sync_every_micro_batch: bool = False
    sharding: str = _one_of("ddp", SHARDINGS)
    fsdp_sync: str = _one_of("every", FSDP_SYNCS)
    fsdp_reshard_after_backward: str = _one_of("on", ON_OFF)
    text_file: str = ""
    text_file_max_mb: int = 256
    text_field: str = "text"
    max_seq_len: int = 128
    gpt_preset: str = _one_of("tiny", GPT_PRESET_NAMES)
    no_dropout: bool = False
    packing: str = _one_of("off", ON_OFF)
    token_dtype: str = _one_of("uint16", TOKEN_DTYPES)
    cache_dir: str = ""
    eval_batches: int = 50
    activation_checkpointing: str = _one_of("off", AC_MODES)
    ac_every: int = 2
    weights_file: str = ""
    tensorboard: str = _one_of("on", ON_OFF)  # event files in the run's tb/ as it trains (runs.tensorboard)

    def __post_init__(self) -> None:
        _check_types(self)
        _check_choices(self)
        _check_ranges(self)

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
                                       if "choices" in f.metadata}


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
    if not re.match(r"^\w{1,100}$", cfg.text_field):
        raise ConfigError("text_field", cfg.text_field, "a JSON field name (letters, digits, _)")
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(name, getattr(cfg, name), "one of " + ", ".join(allowed))
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
