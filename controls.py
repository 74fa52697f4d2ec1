"""The Train page's controls: one widget per RunConfig field that matters, with room for its error.

Number fields carry no min/max of their own: a widget with bounds refuses a typed value, shows it
anyway and keeps using the previous one. Here what is typed is what runs; RunConfig validates it,
and a refused value disables Start with a message naming the control.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
import torch

from gaccum_core import config as cfg
from gaccum_core.data import describe_dataset
from ui import widget

CLEAR_LABELS = {"off": "off", "step": "per optimizer step", "micro": "per micro-batch"}
SCALES = [2.0**p for p in range(0, 33, 2)]
DEFAULTS = cfg.RunConfig(model="cnn")


def _power_of_two(scale: float) -> str:
    exponent = int(scale).bit_length() - 1
    return f"2^{exponent}" if scale == 2.0**exponent else f"{scale:g}"


def _devices() -> list[str]:
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *gpus]


class Controls:
    """Draws the controls in the sidebar and keeps an error slot under each."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}
        self.labels: dict[str, str] = {}

    def add(self, field: str, draw: Any, label: str, **kwargs: Any) -> Any:
        """One control bound to a RunConfig field, followed by an (empty) error slot."""
        self.values[field] = widget(draw, label, f"cfg_{field}", getattr(DEFAULTS, field), **kwargs)
        self.slots[field] = st.empty()
        self.labels[field] = label
        return self.values[field]

    def explain(self, exc: cfg.ConfigError) -> str:
        """A ConfigError in the words of the page: the control's label, the value, what is allowed."""
        label = self.labels.get(exc.field)
        if label is None:
            return str(exc)
        return f"{label} = {exc.value!r} is not allowed: {exc.allowed}"

    def error(self, field: str, message: str) -> None:
        """Show a message under the control of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).error(message)

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
        self.add("model", st.selectbox, "Model", options=cfg.MODELS)
        dataset = self.add("dataset", st.selectbox, "Dataset", options=cfg.DATASETS)
        if dataset == "fake":
            self.add("fake_samples", st.number_input, "Fake samples", step=256)
            self.add("fake_classes", st.number_input, "Fake classes", step=1)
        if dataset in ("mnist", "fashionmnist", "cifar10"):
            self.add("data_dir", st.text_input, "Data directory")
            self.add("download", st.checkbox, "Download if missing")
        self.add("image_size", st.number_input, "Image size (0 = the data set's own)", step=8)
        try:
            st.caption(describe_dataset(cfg.RunConfig(**{k: v for k, v in self.values.items()})))
        except ValueError:
            pass

    def _batch(self) -> None:
        st.header("Accumulation")
        # Typed exactly (a slider jumps values per pixel); the metric is computed from the same values.
        b = self.add("micro_batch_size", st.number_input, "Micro-batch size b", step=1)
        k = self.add("accum_steps", st.number_input, "Accumulation steps k", step=1)
        st.metric("Effective batch b·k", b * k)
        self.add("reduction", st.radio, "Loss reduction", options=cfg.REDUCTIONS, horizontal=True)

    def _precision(self) -> None:
        st.header("Precision and memory")
        amp = self.add("amp", st.radio, "Mixed precision", options=cfg.AMP_MODES, horizontal=True)
        if amp == "fp16":
            # A run's own scale (from the CLI or a reload) may lie between the powers of 4 offered.
            scales = sorted({*SCALES, float(st.session_state.get("_keep_cfg_init_scale", DEFAULTS.init_scale))})
            self.add("init_scale", st.select_slider, "Initial loss scale", options=scales, format_func=_power_of_two)
            self.add("growth_interval", st.number_input, "Growth interval", step=1)
        self.add("grad_clip", st.number_input, "Gradient clipping (0 = off)", step=0.1)
        self.add("clear_cache", st.selectbox, "Cache clearing", options=cfg.CLEAR_CACHE_MODES,
                 format_func=CLEAR_LABELS.get)
        self.add("compile", st.selectbox, "torch.compile", options=cfg.COMPILE_MODES)
        self.add("device", st.selectbox, "Device", options=_devices())

    def _optimizer(self) -> None:
        st.header("Optimizer")
        optimizer = self.add("optimizer", st.selectbox, "Optimizer", options=cfg.OPTIMIZERS)
        self.add("lr", st.number_input, "Learning rate", format="%.6g")
        if optimizer == "sgd":
            self.add("momentum", st.number_input, "Momentum", step=0.05)
        self.add("weight_decay", st.number_input, "Weight decay", format="%.6g")
        self.add("lr_schedule", st.radio, "Schedule", options=cfg.LR_SCHEDULES, horizontal=True)
        self.add("warmup_steps", st.number_input, "Warmup steps", step=1)

    def _length(self) -> None:
        st.header("Length")
        self.add("epochs", st.number_input, "Epochs", step=1)
        self.add("max_steps", st.number_input, "Max optimizer steps (0 = no limit)", step=1)
        self.add("eval_every", st.number_input, "Evaluate every N steps (0 = each epoch)", step=1)
        self.add("seed", st.number_input, "Seed", step=1)
