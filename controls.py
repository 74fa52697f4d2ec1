"""The Train page's controls: one widget per RunConfig field that matters, with room for its error.

Number fields carry no min/max of their own: a widget with bounds refuses a typed value, shows it
anyway and keeps using the previous one. Here what is typed is what runs; RunConfig validates it,
and a refused value disables Start with a message naming the control.
"""

from __future__ import annotations

import re
from typing import Any

import streamlit as st
import torch

from gaccum_core import config as cfg
from gaccum_core.data import describe_dataset
from gaccum_core.device import resolve_device
from gaccum_core.engine import max_processes
from ui import widget

_CLI_OR_UI = re.compile(r"pass --[a-z-]+ \(CLI\) or tick '([a-z_]+)' \(UI\)")
_SET_FIELD = re.compile(r"\bset ([a-z_]+) to\b")
CLEAR_LABELS = {"off": "off", "step": "per optimizer step", "micro": "per micro-batch"}
SCALES = [2.0**p for p in range(0, 33, 2)]
DEFAULTS = cfg.RunConfig(model="cnn")
# Each control's label: the page names a field by it in every message.
LABELS = {
    "model": "Model",
    "dataset": "Dataset",
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
}


def _power_of_two(scale: float) -> str:
    exponent = int(scale).bit_length() - 1
    return f"2^{exponent}" if scale == 2.0**exponent else f"{scale:g}"


def _device_of() -> torch.device:
    """The device the Device control names (drawn further down; the CPU when it names none that exists)."""
    try:
        return resolve_device(st.session_state.get("_keep_cfg_device", DEFAULTS.device))
    except cfg.ConfigError:
        return torch.device("cpu")


def _devices() -> list[str]:
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *gpus]


class Controls:
    """Draws the controls in the sidebar and keeps an error slot under each."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}

    def add(self, field: str, draw: Any, **kwargs: Any) -> Any:
        """One control bound to a RunConfig field, followed by an (empty) error slot."""
        self.values[field] = widget(draw, LABELS[field], f"cfg_{field}", getattr(DEFAULTS, field), **kwargs)
        self.slots[field] = st.empty()
        return self.values[field]

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
        return f"{label} = {exc.value!r} is not allowed: {exc.allowed}"

    def error(self, field: str, message: str) -> None:
        """Show a message under the control of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).error(message)

    def warn(self, field: str, message: str) -> None:
        """Show a warning under the control of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).warning(message)

    def draw(self) -> dict[str, Any]:
        """Every control; returns the values by field name."""
        with st.sidebar:
            self._model_and_data()
            self._batch()
            self._precision()
            self._optimizer()
            self._length()
        return self.values

    def _model_and_data(self) -> None:
        st.header("Model and data")
        self.add("model", st.selectbox, options=cfg.MODELS)
        dataset = self.add("dataset", st.selectbox, options=cfg.DATASETS)
        if dataset == "fake":
            self.add("fake_samples", st.number_input, step=256)
            self.add("fake_classes", st.number_input, step=1)
        if dataset in ("mnist", "fashionmnist", "cifar10"):
            self.add("data_dir", st.text_input)
            self.add("download", st.checkbox)
        self.add("image_size", st.number_input, step=8)
        try:
            st.caption(describe_dataset(cfg.RunConfig(**{k: v for k, v in self.values.items()})))
        except ValueError:
            pass

    def _batch(self) -> None:
        st.header("Accumulation")
        # Typed exactly (a slider jumps values per pixel); the metric is computed from the same values.
        b = self.add("micro_batch_size", st.number_input, step=1)
        k = self.add("accum_steps", st.number_input, step=1)
        n = self.add("nproc", st.number_input, step=1)
        if n != 1:
            self.add("sync_every_micro_batch", st.checkbox)
        st.caption(f"N: 1 to {max_processes(_device_of())}, one process per "
                   f"{'GPU' if torch.cuda.is_available() else 'CPU core (for trying it out)'}, "
                   "DDP through torchrun")
        st.metric("Effective batch N·b·k" if n != 1 else "Effective batch b·k", n * b * k)
        self.add("reduction", st.radio, options=cfg.REDUCTIONS, horizontal=True)

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
        self.add("device", st.selectbox, options=_devices())

    def _optimizer(self) -> None:
        st.header("Optimizer")
        optimizer = self.add("optimizer", st.selectbox, options=cfg.OPTIMIZERS)
        self.add("lr", st.number_input, format="%.6g")
        if optimizer == "sgd":
            self.add("momentum", st.number_input, step=0.05)
        self.add("weight_decay", st.number_input, format="%.6g")
        self.add("lr_schedule", st.radio, options=cfg.LR_SCHEDULES, horizontal=True)
        self.add("warmup_steps", st.number_input, step=1)

    def _length(self) -> None:
        st.header("Length")
        self.add("epochs", st.number_input, step=1)
        self.add("max_steps", st.number_input, step=1)
        self.add("eval_every", st.number_input, step=1)
        self.add("checkpoint_every", st.number_input, step=10)
        self.add("seed", st.number_input, step=1)
