"""The Train page's controls: one widget per RunConfig field that matters, with room for its error.

Number fields carry no min/max of their own: a widget with bounds refuses a typed value, shows it
anyway and keeps using the previous one. Here what is typed is what runs; RunConfig validates it,
and a refused value disables Start with a message naming the control.
"""

from __future__ import annotations

import os
import re
from typing import Any

import streamlit as st
import torch

from gaccum_core import config as cfg
from gaccum_core.data import describe_dataset
from gaccum_core.hfdir import directory_version, hf_directory
from gaccum_core.usercode import file_version
from dashboard import link
from dashboard.choices import OWN_LABELS, choose, empty_refusal, model_note, text_settings, wants_text
from dashboard.ui import FieldWidgets
from gaccum_core.train.device import device_choices, max_processes, resolve_device

_CLI_OR_UI = re.compile(r"pass --[a-z-]+ \(CLI\) or tick '([a-z_]+)' \(UI\)")
_SET_FIELD = re.compile(r"\bset ([a-z_]+) to\b")
CLEAR_LABELS = {"off": "off", "step": "per optimizer step", "micro": "per micro-batch"}
REDUCTION_LABELS = {"mean": "mean (exact)", "sum": "sum",
                    "mean_per_micro_batch": "mean per micro-batch (textbook, not exact)"}
SCALES = [2.0**p for p in range(0, 33, 2)]
DEFAULTS = cfg.DEFAULT_RUN
# Each control's label: the page names a field by it in every message.
LABELS = {
    "model": "Model",
    "dataset": "Dataset",
    "own_model": OWN_LABELS["model"],
    "own_dataset": OWN_LABELS["dataset"],
    "no_dropout": "Dropout off",
    "text_file": "Text file",
    "text_field": "JSON field holding the text",
    "text_file_max_mb": "Largest text file (MB)",
    "gpt_preset": "GPT size",
    "max_seq_len": "Sequence length (tokens)",
    "fake_samples": "Fake samples",
    "fake_classes": "Fake classes",
    "data_dir": "Data directory",
    "download": "Download if missing",
    "image_size": "Image size (0 = the data set's own)",
    "micro_batch_size": "Micro-batch size b",
    "accum_steps": "Accumulation steps k",
    "reduction": "Loss reduction",
    "amp": "Mixed precision",
    "init_scale": "Initial loss scale",
    "growth_interval": "Growth interval",
    "grad_clip": "Gradient clipping (0 = off)",
    "clear_cache": "Cache clearing",
    "compile": "torch.compile",
    "device": "Device",
    "optimizer": "Optimizer",
    "lr": "Learning rate",
    "momentum": "Momentum",
    "weight_decay": "Weight decay",
    "lr_schedule": "Schedule",
    "warmup_steps": "Warmup steps",
    "epochs": "Epochs",
    "max_steps": "Max optimizer steps (0 = no limit)",
    "eval_every": "Evaluate every N steps (0 = each epoch)",
    "seed": "Seed",
    "nproc": "Processes N (data-parallel)",
    "checkpoint_every": "Checkpoint every N steps (0 = on Stop and at the end)",
    "sync_every_micro_batch": "All-reduce after every micro-batch (no_sync off)",
    "sharding": "Sharding",
    "fsdp_sync": "FSDP gradient sync",
    "fsdp_reshard_after_backward": "Reshard after backward",
}
SYNC_LABELS = {"every": "every micro-batch", "last": "last micro-batch only"}


def _power_of_two(scale: float) -> str:
    exponent = int(scale).bit_length() - 1
    return f"2^{exponent}" if scale == 2.0**exponent else f"{scale:g}"


def _device_of() -> torch.device:
    """The device the Device control names (drawn further down; the CPU when it names none that exists)."""
    try:
        return resolve_device(st.session_state.get("_keep_cfg_device", DEFAULTS.device))
    except cfg.ConfigError:
        return torch.device("cpu")


def file_stamp(path: str) -> tuple[int, int] | None:
    """(modification time, size) of a file, so a cached description follows its edits; None if unreadable."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_mtime_ns, info.st_size


def file_stamps(config: cfg.RunConfig) -> tuple:
    """The versions of the files that settings read, for a cache key: the text file, an hf: model's
    directory, your model's and data set's FILE.py (ConfigError naming model for an hf: directory that is not one)."""
    text = file_stamp(config.text_file) if config.dataset == "text" else None
    tokenizer = directory_version(hf_directory(config.model)) if cfg.is_hf(config.model) else None
    mine = tuple(file_version(getattr(config, f)) for f in ("model", "dataset") if cfg.is_factory(getattr(config, f)))
    return text, tokenizer, mine


@st.cache_data(show_spinner=False, max_entries=32)
def _description(config_json: str, stamps: tuple) -> str:
    """describe_dataset, remembered per settings and file versions: a text set is read and cut to describe it."""
    return describe_dataset(cfg.RunConfig.from_json(config_json))


# What to do, after a ConfigError's own words, for settings that only make sense together:
# (field, words of the error's allowed text, hint).
_HINTS = (
    ("dataset", "text data set", ". Pick pydoc (bundled) or text (your own file) under Dataset, "
                                 "or an image model under Model"),
    ("model", "language model", ". Pick gpt under Model (or your own… and type hf:DIR), "
                                "or an image data set under Dataset"),
    ("max_seq_len", "positions", ". Shorten the sequences, or pick a larger GPT size"),
    ("sharding", "one process", ". Set Processes N to 2 or more, or pick ddp"),
)


def fsdp_trade_off(n: Any, k: Any, sync: str, reshard: str) -> str:
    """What the FSDP options chosen cost and save per optimizer step, in the page's numbers (N, k)."""
    share = f"1/{n}" if isinstance(n, int) and n > 1 else "1/N"
    if sync == "every":
        words = (f"Every micro-batch reduce-scatters ({k} times a step): each rank keeps {share} of the gradient "
                 "between micro-batches.")
    else:
        words = (f"Only a window's last micro-batch reduce-scatters ({k} times fewer collectives), but each rank "
                 "keeps the whole fp32 gradient between micro-batches.")
    kept = ("Weights are gathered again for each micro-batch." if reshard == "on"
            else "Gathered weights stay between micro-batches: fewer all-gathers, more memory.")
    return f"{words} {kept}"


class Controls(FieldWidgets):
    """Draws the controls in the sidebar and keeps an error slot under each."""

    def __init__(self) -> None:
        super().__init__("cfg_", LABELS, DEFAULTS)
        self.problem: tuple[str, str] | None = None  # (field, message) of a refusal found while drawing

    @staticmethod
    def in_page_words(message: str) -> str:
        """A message from gaccum_core with its field names (and CLI advice) in the page's labels."""
        message = _CLI_OR_UI.sub(lambda m: f"tick '{LABELS.get(m[1], m[1])}'", message)
        return _SET_FIELD.sub(lambda m: f"set '{LABELS[m[1]]}' to" if m[1] in LABELS else m[0], message)

    @staticmethod
    def explain(exc: cfg.ConfigError) -> str:
        """A ConfigError in the words of the page: the control's label, the value, what is allowed."""
        label = LABELS.get(exc.field)
        if label is None:
            return str(exc)
        empty = empty_refusal(exc)
        if empty:
            return empty
        hint = next((h for field, words, h in _HINTS if field == exc.field and words in exc.allowed), "")
        return f"{label} = {exc.value!r} is not allowed: {exc.allowed}{hint}"

    def draw(self) -> dict[str, Any]:
        """Every control, each refused value explained under its own; returns the values by field name."""
        refused_link = link.restore(self.prefix, DEFAULTS, device_choices())
        with st.sidebar:
            self._model_and_data()
            self._batch()
            self._precision()
            self._optimizer()
            self._length()
        for field, exc in refused_link.items():  # first: a refusal of what is shown now takes its place
            self.warn(field, f"The link's setting was not used, the default is shown: {self.explain(exc)}")
        for field, exc in cfg.problems(self.values, DEFAULTS).items():
            self.error(field, self.explain(exc))
        link.write(self.values, DEFAULTS)
        return self.values

    def _model_and_data(self) -> None:
        st.header("Model and data")
        model = choose(self, "model")
        refused = model_note(self, model)
        if refused:
            self.problem = "model", refused
        self.add("no_dropout", st.checkbox)
        dataset = choose(self, "dataset")
        text = dataset in cfg.TEXT_DATASETS
        if wants_text(model, dataset):
            text_settings(self, model, dataset)
        if not text:  # image settings: a text data set has none
            if dataset == "fake":
                self.add("fake_samples", st.number_input, step=256)
                self.add("fake_classes", st.number_input, step=1)
            if dataset in ("mnist", "fashionmnist", "cifar10"):
                self.add("data_dir", st.text_input)
                self.add("download", st.checkbox)
            if dataset == "imagefolder":
                self.add("data_dir", st.text_input, help="a folder with one sub-folder of images per class, "
                         "or train/ and val/ (or test/) each holding such sub-folders")
            self.add("image_size", st.number_input, step=8)
        self._describe_dataset(text)

    def _describe_dataset(self, text: bool) -> None:
        """A line on the data set chosen; described even while the model does not suit it (the
        message under Dataset or Model says so), left out while a data setting is refused. An hf:
        model's text is described in its tokenizer's tokens."""
        values = dict(self.values)
        if text and not cfg.is_language_model(values["model"]):
            values["model"] = "gpt"
        elif not text and cfg.is_language_model(values["model"]):
            values["model"] = DEFAULTS.model
        try:
            config = cfg.RunConfig(**values)
            st.caption(_description(config.to_json(), file_stamps(config)))
        except (ValueError, OSError):  # the message under the refused control says why
            pass

    def _batch(self) -> None:
        st.header("Accumulation")
        # Typed exactly (a slider jumps values per pixel); the metric is computed from the same values.
        b = self.add("micro_batch_size", st.number_input, step=1)
        k = self.add("accum_steps", st.number_input, step=1)
        n = self.add("nproc", st.number_input, step=1)
        st.caption(f"N: 1 to {max_processes(_device_of())}, one process per "
                   f"{'GPU' if torch.cuda.is_available() else 'CPU core (for trying it out)'}, "
                   "DDP or FSDP through torchrun")
        self._sharding(n, k)
        st.metric("Effective batch N·b·k" if n != 1 else "Effective batch b·k", n * b * k)
        reduction = self.add("reduction", st.radio, options=cfg.REDUCTIONS, format_func=REDUCTION_LABELS.get)
        if reduction == "mean_per_micro_batch":
            st.caption("The textbook loop: loss.mean() / k per micro-batch. Not exact: a micro-batch with fewer "
                       "samples (an epoch's last) or fewer target tokens (text: nearly always) weighs as much as a full "
                       "one, so the step differs from one big batch's. mean divides by the window's count instead.")

    def _sharding(self, n: Any, k: Any) -> None:
        """Sharding, then its own options: FSDP's sync and resharding, or DDP's all-reduce per micro-batch."""
        sharding = self.add("sharding", st.radio, options=cfg.SHARDINGS, horizontal=True)
        if sharding == "fsdp":
            sync = self.add("fsdp_sync", st.radio, options=cfg.FSDP_SYNCS, horizontal=True,
                            format_func=SYNC_LABELS.get)
            reshard = self.add("fsdp_reshard_after_backward", st.radio, options=cfg.ON_OFF, horizontal=True)
            st.caption(fsdp_trade_off(n, k, sync, reshard))
        elif n != 1:
            self.add("sync_every_micro_batch", st.checkbox)

    def _precision(self) -> None:
        st.header("Precision and memory")
        amp = self.add("amp", st.radio, options=cfg.AMP_MODES, horizontal=True)
        if amp == "fp16":
            # A run's own scale (from the CLI or a reload) may lie between the powers of 4 offered.
            scales = sorted({*SCALES, float(st.session_state.get("_keep_cfg_init_scale", DEFAULTS.init_scale))})
            self.add("init_scale", st.select_slider, options=scales, format_func=_power_of_two)
            self.add("growth_interval", st.number_input, step=1)
        self.add("grad_clip", st.number_input, step=0.1)
        self.add("clear_cache", st.selectbox, options=cfg.CLEAR_CACHE_MODES,
                 format_func=CLEAR_LABELS.get)
        self.add("compile", st.selectbox, options=cfg.COMPILE_MODES)
        self.add("device", st.selectbox, options=device_choices())

    def _optimizer(self) -> None:
        st.header("Optimizer")
        optimizer = self.add("optimizer", st.selectbox, options=cfg.OPTIMIZERS)
        self.add("lr", st.number_input)
        if optimizer == "sgd":
            self.add("momentum", st.number_input, step=0.05)
        self.add("weight_decay", st.number_input)
        self.add("lr_schedule", st.radio, options=cfg.LR_SCHEDULES, horizontal=True)
        self.add("warmup_steps", st.number_input, step=1)

    def _length(self) -> None:
        st.header("Length")
        self.add("epochs", st.number_input, step=1)
        self.add("max_steps", st.number_input, step=1)
        self.add("eval_every", st.number_input, step=1)
        self.add("checkpoint_every", st.number_input, step=10)
        self.add("seed", st.number_input, step=1)
