"""The Sweeps page's controls: the Train page's settings, with a multiselect for each option to cross, and
the spec they make (or the refusal of the first cell that cannot run, named by its control)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

import streamlit as st

from dashboard import link
from dashboard.controls import CLEAR_LABELS, LABELS, REDUCTION_LABELS
from dashboard.messages import explain
from dashboard.state import kept, set_kept, widget
from gaccum_core import config as cfg
from gaccum_core.sweeps.checks import check_sweep
from gaccum_core.sweeps.spec import SweepSpec
from gaccum_core.train.device import max_processes, resolve_device

PREFIX = "sweep_"
# The default grid: b=8 against b=32 at E=64, the exact mean against the textbook mean per micro-batch,
# twice each: 8 short runs of cnn on digits, the b/k pairs coinciding under mean and not under the other.
# Each control's default, by its name (its key is PREFIX + name, and so is its query parameter in the URL).
DEFAULTS: dict[str, Any] = {
    "model": "cnn", "dataset": "digits", "epochs": 3, "max_steps": 0, "effective_batch": 64,
    "micro_batch_size": [8, 32], "reduction": ["mean", "mean_per_micro_batch"], "amp": ["off"], "compile": ["off"],
    "clear_cache": ["off"], "nproc": [1], "activation_checkpointing": ["off"], "sharding": ["ddp"], "packing": ["off"],
    "optimizer": cfg.DEFAULT_RUN.optimizer, "lr": cfg.DEFAULT_RUN.lr, "seed": 0, "repeats": 3, "same_seed": False,
}
SWEEP_LABELS = {**LABELS, **cfg.by_field("sweep"), "effective_batch": "Effective batch E = N·b·k",
                "repeats": "Repeats per cell", "same_seed": "Same seed each repeat (timing noise alone)"}


def divisors(n: int, most: int = 4096) -> list[int]:
    """The divisors of n up to most: the micro-batch sizes that give a whole k at effective batch n."""
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def _pick(field: str, options: list, **kwargs: Any) -> list:
    """A multiselect of the values to cross, returned in the options' order (the sweep's id follows it)."""
    picked = widget(st.multiselect, SWEEP_LABELS[field], PREFIX + field, DEFAULTS[field], options=options, **kwargs)
    return [o for o in options if o in picked]


def _control(draw: Callable[..., Any], name: str, **kwargs: Any) -> Any:
    """One control, by its name: its label, key and default (shown instead of a link's value it does not offer)."""
    if "options" in kwargs and kept(PREFIX + name, DEFAULTS[name]) not in kwargs["options"]:
        set_kept(PREFIX + name, DEFAULTS[name])
    return widget(draw, SWEEP_LABELS[name], PREFIX + name, DEFAULTS[name], **kwargs)


def _cpu_or_gpus() -> int:
    return max_processes(resolve_device("auto"))


def draw() -> tuple[dict[str, Any], dict[str, list], dict[str, Any]]:
    """Every control in the sidebar, a fresh session's from the URL, then the URL from them; (common settings,
    lists to cross, sweep options)."""
    found, refused = link.restore_controls(PREFIX, DEFAULTS)
    with st.sidebar:
        notes = st.container()  # the link's values not used, above the controls
    common, lists, options = _controls()
    shown = {**common, **lists, **options}
    link.write_controls(shown, DEFAULTS)
    for exc in refused.values():
        notes.warning(f"The link's setting was not used, the default is shown: {explain(exc, SWEEP_LABELS)}")
    for name, text in link.not_shown(found, shown).items():
        notes.warning(f"The link's setting was not used: {SWEEP_LABELS[name]} = {text} is not offered here.")
    return common, lists, options


def _controls() -> tuple[dict[str, Any], dict[str, list], dict[str, Any]]:
    """Every control in the sidebar; (common settings, lists to cross, sweep options)."""
    common: dict[str, Any] = {}
    with st.sidebar:
        st.header("Model and data")
        common["model"] = _control(st.selectbox, "model", options=list(cfg.MODELS))
        common["dataset"] = _control(st.selectbox, "dataset", options=list(cfg.DATASETS))
        common["epochs"] = _control(st.number_input, "epochs")
        common["max_steps"] = _control(st.number_input, "max_steps")
        st.header("Grid")
        effective = _control(st.number_input, "effective_batch")
        lists = {"micro_batch_size": _pick("micro_batch_size", divisors(effective) if effective >= 1 else []),
                 "reduction": _pick("reduction", list(cfg.REDUCTIONS), format_func=REDUCTION_LABELS.get),
                 "amp": _pick("amp", list(cfg.AMP_MODES)),
                 "compile": _pick("compile", list(cfg.COMPILE_MODES)),
                 "clear_cache": _pick("clear_cache", list(cfg.CLEAR_CACHE_MODES), format_func=CLEAR_LABELS.get),
                 "nproc": _pick("nproc", list(range(1, _cpu_or_gpus() + 1))),
                 "activation_checkpointing": _pick("activation_checkpointing", list(cfg.AC_MODES))}
        if any(n > 1 for n in lists["nproc"]):
            lists["sharding"] = _pick("sharding", list(cfg.SHARDINGS))
        if common["dataset"] in cfg.TEXT_DATASETS and common["dataset"] != "tokens":  # tokens: packed by nature
            lists["packing"] = _pick("packing", ["off", "on"])
        st.header("Optimizer and repeats")
        common["optimizer"] = _control(st.selectbox, "optimizer", options=list(cfg.OPTIMIZERS))
        common["lr"] = _control(st.number_input, "lr")
        common["seed"] = _control(st.number_input, "seed")
        options = {"effective_batch": effective, "repeats": _control(st.number_input, "repeats"),
                   "same_seed": _control(st.checkbox, "same_seed")}
    return common, lists, options


def spec_from(common: dict[str, Any], lists: dict[str, list], options: dict[str, Any]) -> SweepSpec:
    """The sweep the controls describe: a list of several values is crossed, one value is common, every
    other setting the Train page's default (device auto). ConfigError naming the first refused field."""
    for field, values in lists.items():
        if not values:
            raise cfg.ConfigError(field, "", "one or more values")
    grid = tuple((field, tuple(values)) for field, values in lists.items() if len(values) > 1)
    singles = {field: values[0] for field, values in lists.items() if len(values) == 1}
    defaults = {f.name: getattr(cfg.DEFAULT_RUN, f.name) for f in dataclasses.fields(cfg.RunConfig)}
    values = {**defaults, **common, **singles}
    return SweepSpec(grid, tuple(values.items()), options["repeats"], options["same_seed"], options["effective_batch"])


@st.cache_data(show_spinner="Checking every cell of the grid…", max_entries=32)
def _checked(spec_json: str, _spec: SweepSpec) -> None:
    """check_sweep, remembered per spec for the specs that pass (a refusal is not cached)."""
    check_sweep(_spec)


def refusal(spec: SweepSpec) -> str | None:
    """Why the sweep cannot start here, in the page's words (the control named), or None."""
    try:
        _checked(json.dumps(spec.to_dict(), sort_keys=True, default=str), spec)
    except cfg.ConfigError as exc:
        return explain(exc, SWEEP_LABELS)
    except ValueError as exc:  # data and model errors explain themselves
        return str(exc)
    return None
