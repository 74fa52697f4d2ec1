"""The Train page's controls: one widget per RunConfig field that matters, with room for its error.

Number fields carry no min/max of their own: a widget with bounds refuses a typed value, shows it
anyway and keeps using the previous one. Here what is typed is what runs; RunConfig validates it,
and a refused value disables Start with a message naming the control.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from gaccum_core import config as cfg
from gaccum_core.config import DEFAULT_RUN
from gaccum_core.train.device import device_choices, processes_note
from dashboard import link
from dashboard.checks import description
from dashboard.choices import choose, generated, image_settings, model_note, text_settings, wants_text
from dashboard.messages import OWN_LABELS, explain
from dashboard.state import TRAIN, FieldWidgets

CLEAR_LABELS = {"off": "off", "step": "per optimizer step", "micro": "per micro-batch"}
REDUCTION_LABELS = {"mean": "mean (exact)", "sum": "sum",
                    "mean_per_micro_batch": "mean per micro-batch (textbook, not exact)"}
SCALES = [2.0**p for p in range(0, 33, 2)]
# Each control's label (its field's, gaccum_core.config.setting): the page names a field by it in every message.
LABELS = {**cfg.by_field("label"), "own_model": OWN_LABELS["model"], "own_dataset": OWN_LABELS["dataset"]}
AC_LABELS = {"off": "off", "selective": "selective (every N-th block)", "full": "full (every block)"}
SYNC_LABELS = {"every": "every micro-batch", "last": "last micro-batch only"}


def _power_of_two(scale: float) -> str:
    exponent = int(scale).bit_length() - 1
    return f"2^{exponent}" if scale == 2.0**exponent else f"{scale:g}"


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
        super().__init__(TRAIN, LABELS, DEFAULT_RUN)
        self.problem: tuple[str, str] | None = None  # (field, message) of a refusal found while drawing
        self.section = ""  # the section being drawn

    def draw(self) -> dict[str, Any]:
        """Every control, each refused value explained under its own; returns the values by field name."""
        refused_link = link.restore(self.prefix, DEFAULT_RUN, device_choices())
        with st.sidebar:
            for section in (self._model_and_data, self._batch, self._precision, self._optimizer, self._length,
                            self._output):
                section()
                self._generated()
        for field, exc in refused_link.items():  # first: a refusal of what is shown now takes its place
            self.warn(field, f"The link's setting was not used, the default is shown: {explain(exc, LABELS)}")
        for field, exc in cfg.problems(self.values, DEFAULT_RUN).items():
            self.error(field, explain(exc, LABELS))
        link.write(self.values, DEFAULT_RUN)
        return self.values

    def _header(self, section: str) -> None:
        """A section's header; the fields whose metadata name it follow its own controls (_generated)."""
        st.header(section)
        self.section = section

    def _generated(self) -> None:
        """The controls of the fields that join the section just drawn (setting's section), where they apply."""
        generated(self, self.section)

    def _model_and_data(self) -> None:
        self._header("Model and data")
        model = choose(self, "model")
        refused = model_note(self, model)
        if refused:
            self.problem = "model", refused
        if cfg.takes_weights_file(model):  # timm's and torchvision's: an hf: model's are in its directory
            path = self.add("weights_file", st.text_input, placeholder="path/to/weights.safetensors, .pth or .bin")
            self.values["weights_file"] = path.strip()
        self.add("no_dropout", st.checkbox)
        dataset = choose(self, "dataset")
        text = dataset in cfg.TEXT_DATASETS
        if wants_text(model, dataset):
            text_settings(self, model, dataset)
        if not text:  # image settings: a text data set has none
            image_settings(self, dataset)
        self._describe_dataset(text)

    def _describe_dataset(self, text: bool) -> None:
        """A line on the data set chosen; described even while the model does not suit it (the
        message under Dataset or Model says so), left out while a data setting is refused. An hf:
        model's text is described in its tokenizer's tokens."""
        values = dict(self.values)
        if text and not cfg.is_language_model(values["model"]):
            values["model"] = "gpt"
        elif not text and cfg.is_language_model(values["model"]):
            values["model"] = DEFAULT_RUN.model
        if values["model"] != self.values["model"]:
            values.pop("weights_file", None)  # the stand-in model takes none
        try:
            st.caption(description(cfg.RunConfig(**values)))
        except (ValueError, OSError):  # the message under the refused control says why
            pass

    def _batch(self) -> None:
        self._header("Accumulation")
        # Typed exactly (a slider jumps values per pixel); the metric is computed from the same values.
        b = self.add("micro_batch_size", st.number_input, step=1)
        self._checkpointing()
        k = self.add("accum_steps", st.number_input, step=1)
        n = self.add("nproc", st.number_input, step=1)
        st.caption(processes_note(self.kept("device", DEFAULT_RUN.device)))  # the Device control is drawn below
        self._sharding(n, k)
        st.metric("Effective batch N·b·k" if n != 1 else "Effective batch b·k", n * b * k)
        reduction = self.add("reduction", st.radio, options=cfg.REDUCTIONS, format_func=REDUCTION_LABELS.get)
        if reduction == "mean_per_micro_batch":
            st.caption("The textbook loop: loss.mean() / k per micro-batch. Not exact: a micro-batch with fewer "
                       "samples (an epoch's last) or fewer target tokens (text: nearly always) weighs as much as a full "
                       "one, so the step differs from one big batch's. mean divides by the window's count instead.")

    def _checkpointing(self) -> None:
        """Activation checkpointing, beside the micro-batch it lets grow, with what it costs."""
        mode = self.add("activation_checkpointing", st.radio, options=cfg.AC_MODES, horizontal=True,
                        format_func=AC_LABELS.get)
        if mode == "selective":
            self.add("ac_every", st.number_input, step=1)
        if mode != "off":
            st.caption("Keeps only each checkpointed block's input and recomputes its activations in backward: "
                       "less activation memory, so a larger b fits, for about one more forward pass of those "
                       "blocks per micro-batch.")

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
        self._header("Precision and memory")
        amp = self.add("amp", st.radio, options=cfg.AMP_MODES, horizontal=True)
        if amp == "fp16":
            # A run's own scale (from the CLI or a reload) may lie between the powers of 4 offered.
            scales = sorted({*SCALES, float(self.kept("init_scale", DEFAULT_RUN.init_scale))})
            self.add("init_scale", st.select_slider, options=scales, format_func=_power_of_two)
            self.add("growth_interval", st.number_input, step=1)
        self.add("grad_clip", st.number_input, step=0.1)
        self.add("clear_cache", st.selectbox, options=cfg.CLEAR_CACHE_MODES,
                 format_func=CLEAR_LABELS.get)
        self.add("compile", st.selectbox, options=cfg.COMPILE_MODES)
        self.add("device", st.selectbox, options=device_choices())

    def _optimizer(self) -> None:
        self._header("Optimizer")
        optimizer = self.add("optimizer", st.selectbox, options=cfg.OPTIMIZERS)
        self.add("lr", st.number_input)
        if optimizer == "sgd":
            self.add("momentum", st.number_input, step=0.05)
        self.add("weight_decay", st.number_input)
        self.add("lr_schedule", st.radio, options=cfg.LR_SCHEDULES, horizontal=True)
        self.add("warmup_steps", st.number_input, step=1)

    def _length(self) -> None:
        self._header("Length")
        self.add("epochs", st.number_input, step=1)
        self.add("max_steps", st.number_input, step=1)
        self.add("eval_every", st.number_input, step=1)
        self.add("eval_batches", st.number_input, step=10)
        self.add("checkpoint_every", st.number_input, step=10)
        self.add("seed", st.number_input, step=1)

    def _output(self) -> None:
        """What a run writes besides its own files."""
        self._header("Output")
        self.add("tensorboard", st.radio, options=cfg.ON_OFF, horizontal=True)


def config_from(values: dict[str, Any]) -> cfg.RunConfig:
    """The RunConfig of the controls' values (by field name); ConfigError naming the first refused one."""
    return cfg.RunConfig(**values)
