"""The Sweeps page's controls: the settings every run shares, an axis for each field a sweep may cross (generated
from its metadata: a multiselect of its choices, a box of comma-separated numbers parsed as the command line's
flag is), and the spec they make (or the refusal of the first cell that cannot run, named by its control)."""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

import streamlit as st

from dashboard import link
from dashboard.choices import unchecked
from dashboard.controls import CLEAR_LABELS, LABELS, REDUCTION_LABELS
from dashboard.messages import explain
from dashboard.state import drop_missing, kept, set_kept, widget
from gaccum_core import config as cfg
from gaccum_core.sweeps.checks import check_sweep
from gaccum_core.sweeps.spec import AXES, KINDS, SweepSpec, parse_values
from gaccum_core.train.device import max_processes, resolve_device

PREFIX = "sweep_"
# One value each on the page (the command line crosses them), and k, which the page derives from E.
_ONE_VALUE = ("model", "dataset", "epochs", "max_steps", "accum_steps")
# The axes the page offered before any other, in their order then: a grid of them keeps its sweep id.
_FIRST = ("micro_batch_size", "reduction", "amp", "compile", "clear_cache", "nproc", "activation_checkpointing",
          "sharding", "packing")
PAGE_AXES = tuple(dict.fromkeys(_FIRST + tuple(n for n in AXES if n in LABELS and n not in _ONE_VALUE)))
USUAL = tuple(cfg.by_field("sweep"))  # shown; the others under More axes
_PICKED = ("micro_batch_size", "nproc")  # numbers picked among the page's options: b divides E, N fits here
_FORMATS = {"reduction": REDUCTION_LABELS.get, "clear_cache": CLEAR_LABELS.get}
_MOST_PROBES = 1024  # combinations of the axes above an axis read to tell whether it applies to any


def axis_control(name: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The widget a crossed field's metadata and type ask for: a multiselect of its choices (or of false and
    true), the default first (a grid follows the options' order), or a text box of comma-separated numbers."""
    choices = cfg.by_field("choices").get(name, (False, True) if KINDS[name] == "bool" else None)
    if choices is None:
        return st.text_input, {}
    default = getattr(cfg.DEFAULT_RUN, name)
    return st.multiselect, {"options": [default, *(c for c in choices if c != default)],
                            "format_func": _FORMATS.get(name, lambda value: str(value).lower())}


def _default(name: str) -> Any:
    """An axis's default: the Train page's value, as the one item picked or the box's text."""
    value = getattr(cfg.DEFAULT_RUN, name)
    return str(value) if axis_control(name)[0] is st.text_input and name not in _PICKED else [value]


# The default grid: b=8 against b=32 at E=64, the exact mean against the textbook mean per micro-batch,
# three times each: 12 short runs of cnn on digits, the b/k pairs coinciding under mean and not under the other.
# Each control's default, by its name (its key is PREFIX + name, and so is its query parameter in the URL).
DEFAULTS: dict[str, Any] = {
    "model": "cnn", "dataset": "digits", "epochs": 3, "max_steps": 0, "effective_batch": 64,
    **{name: _default(name) for name in PAGE_AXES},
    "micro_batch_size": [8, 32], "reduction": ["mean", "mean_per_micro_batch"], "repeats": 3, "same_seed": False,
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


def draw() -> tuple[dict[str, Any], dict[str, list | str], dict[str, Any]]:
    """Every control in the sidebar, a fresh session's from the URL, then the URL from them; (common settings,
    each axis's values or text, sweep options)."""
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


def _controls() -> tuple[dict[str, Any], dict[str, list | str], dict[str, Any]]:
    """Every control in the sidebar; (common settings, each axis's values or text, sweep options)."""
    common: dict[str, Any] = {}
    with st.sidebar:
        st.header("Model and data")
        common["model"] = _control(st.selectbox, "model", options=list(cfg.MODELS))
        common["dataset"] = _control(st.selectbox, "dataset", options=list(cfg.DATASETS))
        common["epochs"] = _control(st.number_input, "epochs")
        common["max_steps"] = _control(st.number_input, "max_steps")
        st.header("Grid")
        effective = _control(st.number_input, "effective_batch")
        lists: dict[str, list | str] = {}
        for name in USUAL:
            lists[name] = _axis(name, effective, common)
        with st.expander("More axes"):
            for name in PAGE_AXES:
                if name not in USUAL and _applies_to_some(name, common, lists):
                    lists[name] = _axis(name, effective, common)
        st.header("Repeats")
        options = {"effective_batch": effective, "repeats": _control(st.number_input, "repeats"),
                   "same_seed": _control(st.checkbox, "same_seed")}
    return common, lists, options


def _axis(name: str, effective: int, common: dict[str, Any]) -> list | str:
    """One axis's control: the values picked (among those its field offers the common settings: no
    group-mean-token-mean for sft), or the box's text (parsed by spec_from)."""
    if name == "micro_batch_size":
        return _pick(name, divisors(effective) if effective >= 1 else [])
    if name == "nproc":
        return _pick(name, list(range(1, _cpu_or_gpus() + 1)))
    draw, kwargs = axis_control(name)
    help_text = cfg.by_field("help")[name]
    if draw is st.text_input:
        return widget(st.text_input, SWEEP_LABELS[name], PREFIX + name, DEFAULTS[name],
                      help=f"{help_text} (comma-separated values to cross)")
    options, offered = kwargs.pop("options"), cfg.by_field("offered").get(name)
    if offered is not None:
        shown = offered(unchecked({**cfg.DEFAULT_RUN.to_dict(), **common}))
        options = [option for option in options if option in shown]
        drop_missing(PREFIX + name, options)
    return _pick(name, options, help=help_text, **kwargs)


def _applies_to_some(name: str, common: dict[str, Any], lists: dict[str, list | str]) -> bool:
    """Whether the field changes a run of some combination of the axes drawn above it (sharding only with
    N > 1, packing only for text): an axis that changes no run is not offered."""
    base = {**cfg.DEFAULT_RUN.to_dict(), **common}
    picked = {field: _soft_values(field, value) for field, value in lists.items()}
    picked = {field: values for field, values in picked.items() if values}
    combinations = itertools.islice(itertools.product(*picked.values()), _MOST_PROBES)
    return any(cfg.applies(unchecked({**base, **dict(zip(picked, combination))}), name)
               for combination in combinations)


def _soft_values(field: str, value: list | str) -> list:
    """An axis's values, a box's text parsed; none when it cannot be (spec_from refuses it by name)."""
    if not isinstance(value, str):
        return value
    try:
        return list(parse_values(field, KINDS[field], value))
    except cfg.ConfigError:
        return []


def spec_from(common: dict[str, Any], lists: dict[str, list | str], options: dict[str, Any]) -> SweepSpec:
    """The sweep the controls describe: an axis of several values is crossed, of one value common, every other
    setting the Train page's default (device auto). ConfigError naming the first refused field: an empty axis,
    or a box's text the command line's flag would refuse."""
    picked = {}
    for field, values in lists.items():
        if isinstance(values, str):
            values = parse_values(field, KINDS[field], values)
        if not values:
            raise cfg.ConfigError(field, "", "one or more values")
        picked[field] = tuple(values)
    grid = tuple((field, values) for field, values in picked.items() if len(values) > 1)
    singles = {field: values[0] for field, values in picked.items() if len(values) == 1}
    values = {**cfg.DEFAULT_RUN.to_dict(), **common, **singles}
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
