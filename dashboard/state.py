"""Widget state: values that survive reruns and page switches, and the one key scheme that keeps them.

Streamlit deletes a widget's key when the user goes to another page, so each widget's value is also
kept under a permanent key (`kept_key`): the widget's key with the prefix `_keep_`. Every page and
module reads and writes kept values through this module, never by spelling the permanent key itself.
Widgets named by a field (FieldWidgets) take their key as a page prefix (cfg_, plan_, eq_, sweep_) + field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Mapping

import streamlit as st

from gaccum_core.config import RunConfig, by_field

_KEPT = "_keep_"  # the permanent key of widget `key` is _KEPT + key
TRAIN = "cfg_"  # the Train page's controls: cfg_ + a RunConfig field


def kept_key(key: str) -> str:
    """The permanent key that keeps widget `key`'s value across page switches."""
    return _KEPT + key


def kept(key: str, default: Any = None) -> Any:
    """Widget `key`'s kept value, or default when none is kept."""
    return st.session_state.get(kept_key(key), default)


def set_kept(key: str, value: Any) -> None:
    """Give widget `key` this value the next time it is drawn (on this page or another)."""
    st.session_state[kept_key(key)] = value


def any_kept(prefix: str) -> bool:
    """Whether any widget whose key starts with prefix has a kept value (the session has its own settings)."""
    return any(str(key).startswith(kept_key(prefix)) for key in st.session_state)


def keep(key: str, default: Any) -> None:
    """Restore a widget's value from its permanent key, or start it at default."""
    permanent = kept_key(key)
    if permanent not in st.session_state:
        st.session_state[permanent] = default
    st.session_state[key] = st.session_state[permanent]


def _store(key: str) -> None:
    st.session_state[kept_key(key)] = st.session_state[key]


def drop_missing(key: str, options: Sequence[str]) -> None:
    """Forget picks (a multiselect's value and its kept copy) that are no longer among the options."""
    for name in (key, kept_key(key)):
        picked = st.session_state.get(name)
        if isinstance(picked, list) and any(p not in options for p in picked):
            st.session_state[name] = [p for p in picked if p in options]


# sprintf-js's %g without a precision prints the number itself (0.9999, 1e-7, 1000): a number box shows
# what runs, where Streamlit's default %0.2f shows momentum 0.9999 as 1.00.
EXACT_FORMAT = "%g"


def _whole(value: Any) -> Any:
    """A whole number typed into a float box as an int (1e3 is 1000); anything else as it came, for the
    page's check to refuse by name."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def _number_box(default: Any, kwargs: dict[str, Any]) -> bool:
    """Set a number box to show its value exactly; True for an integer one, which is drawn as a float box
    because the browser reads an integer box with parseInt ("1e3" would be 1)."""
    kwargs.setdefault("format", EXACT_FORMAT)
    whole = isinstance(default, int) and not isinstance(default, bool)
    if whole:
        for name in ("step", "min_value", "max_value"):
            if kwargs.get(name) is not None:
                kwargs[name] = float(kwargs[name])
        kwargs.setdefault("step", 1.0)
    return whole


def widget(draw: Callable[..., Any], label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """Draw a widget whose value survives reruns and page switches; help text its RunConfig field's. A number
    box shows its value exactly, and an integer one takes 1e3 as 1000 (2.5 comes back as 2.5, to refuse)."""
    whole = draw is st.number_input and _number_box(default, kwargs)
    keep(key, default)
    kwargs.setdefault("help", by_field("help").get(key.removeprefix(TRAIN)))
    value = draw(label, key=key, on_change=_store, args=(key,), **kwargs)
    return _whole(value) if whole else value


class FieldWidgets:
    """Widgets named by a field (a RunConfig field or a page's own), each followed by an empty slot for
    the message that refuses its value; keys are prefix + field. A widget's default is the one given,
    else the field's value in `defaults`; its help is its field's unless the page has its own words."""

    def __init__(self, prefix: str, labels: Mapping[str, str], defaults: Any = None) -> None:
        self.prefix, self.labels, self.defaults = prefix, labels, defaults
        self.values: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}

    def add(self, field: str, draw: Callable[..., Any], default: Any = None, **kwargs: Any) -> Any:
        """One widget for `field`, kept across reruns and page switches, then its (empty) message slot."""
        if default is None:
            default = getattr(self.defaults, field)
        kwargs.setdefault("help", by_field("help").get(field))
        self.values[field] = widget(draw, self.labels[field], self.prefix + field, default, **kwargs)
        self.slots[field] = st.empty()
        return self.values[field]

    def kept(self, field: str, default: Any = None) -> Any:
        """The value kept for `field`'s widget (set before it is drawn, e.g. further down the page)."""
        return kept(self.prefix + field, default)

    def error(self, field: str, message: str) -> None:
        """Show a message under the widget of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).error(message)

    def warn(self, field: str, message: str) -> None:
        """Show a warning under the widget of `field` (or at the top of the sidebar)."""
        self.slots.get(field, st.sidebar).warning(message)


def adopt_settings(config: RunConfig, prefix: str = TRAIN, fields: Iterable[str] | None = None,
                   replace: bool = False) -> bool:
    """Give a page's controls (keys prefix + field) the settings of `config`: those of `fields`, else all.
    Unless replace, only a fresh session's (a run in progress adopted on a reload): False if the session
    already has its own settings, which are then left alone."""
    values = dataclasses.asdict(config)
    names = list(values) if fields is None else [name for name in fields if name in values]
    if not replace and any(kept_key(prefix + name) in st.session_state for name in values):
        return False
    for name in names:
        set_kept(prefix + name, values[name])
    return True


def session_runs(is_known: Callable[[str], bool]) -> list[str]:
    """Run ids started from this browser session, oldest first; runs deleted since are dropped, and
    named once in session_state["deleted_elsewhere"] for the page to say so."""
    runs = st.session_state.setdefault("session_runs", [])
    gone = [run_id for run_id in runs if not is_known(run_id)]
    if gone:
        st.session_state.setdefault("deleted_elsewhere", []).extend(gone)
        runs[:] = [run_id for run_id in runs if run_id not in gone]
    return runs
