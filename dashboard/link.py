"""A page's settings in its URL, so that a reload (or a shared link) opens the page with them.

Streamlit's session state dies with a reload; the URL does not. Only the values that differ from the
defaults are written (?model=mlp&lr=0.01&name=baseline; a list as comma-separated items,
?micro_batch_size=8,32, read back from that or from the parameter repeated). A fresh session reads
them back, each parsed by its type: the Train page's by its RunConfig field's type and validated by
RunConfig itself (a value that cannot be used is left at its default, and its ConfigError returned for
the page to show under the control); the Sweeps page's by its control's default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import streamlit as st

from dashboard.state import any_kept, kept, set_kept
from gaccum_core.config import ConfigError, RunConfig, problems

NAME = "name"  # the query parameter of the run name
NAME_KEY = "run_name"  # the page's run-name box, kept across page switches
_FIELDS = {f.name: f.type if isinstance(f.type, str) else f.type.__name__ for f in dataclasses.fields(RunConfig)}
_LIST = "list:"  # a list's kind: _LIST + its items' kind


def _parse(field: str, kind: str, text: str) -> Any:
    """A query parameter's text as a value of kind (bool, int, float, str); ConfigError naming the field if it is
    not one."""
    try:
        if kind == "bool":
            return {"true": True, "false": False}[text.lower()]
        if kind == "int":
            number = float(text)
            if not number.is_integer():
                raise ValueError(text)
            return int(number)
        return float(text) if kind == "float" else text
    except (KeyError, ValueError, OverflowError):
        allowed = {"bool": "true or false", "int": "an integer", "float": "a number"}[kind]
        raise ConfigError(field, text, allowed) from None


def _kind(value: Any) -> str:
    """The kind of a control's value, as _parse reads it; a list's from its first item."""
    if isinstance(value, (list, tuple)):
        return _LIST + (_kind(value[0]) if value else "str")
    return type(value).__name__ if isinstance(value, (bool, int, float)) else "str"


def _from_url(kinds: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """The URL's values of these fields, each parsed by its kind, and the refusal of each that cannot be."""
    found, refused = {}, {}
    for field, kind in kinds.items():
        texts = st.query_params.get_all(field)
        if not texts:
            continue  # the default, or a parameter of someone else's
        try:
            if kind.startswith(_LIST):
                found[field] = [_parse(field, kind[len(_LIST):], item) for text in texts for item in text.split(",")
                                if item]
            else:
                found[field] = _parse(field, kind, texts[-1])
        except ConfigError as exc:
            refused[field] = exc
    return found, refused


def _read(defaults: RunConfig, devices: Sequence[str]) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """The URL's settings that can be used, and the refusal of each one that cannot."""
    found, refused = _from_url(_FIELDS)
    if "device" in found and found["device"] not in devices:
        refused["device"] = ConfigError("device", found.pop("device"), "one of " + ", ".join(devices) + " here")
    # Checked together, as a run would be: a field refused is dropped, so its control shows the default.
    for field, exc in problems({**defaults.to_dict(), **found}, defaults).items():
        if field in found:
            del found[field]
            refused[field] = exc
    return found, refused


def restore(prefix: str, defaults: RunConfig, devices: Sequence[str]) -> dict[str, ConfigError]:
    """A fresh session (a reload, a link; nothing adopted, no control kept yet) takes the URL's settings
    and run name; returns the refusal of each setting left at its default. The run name also comes back
    after a visit to another page."""
    if NAME_KEY not in st.session_state:
        name = kept(NAME_KEY, st.query_params.get(NAME, ""))
        st.session_state[NAME_KEY] = name[:40]  # the box holds at most 40 characters
    if any_kept(prefix):
        return {}
    found, refused = _read(defaults, devices)
    for field, value in found.items():
        set_kept(prefix + field, value)
    return refused


def restore_controls(prefix: str, defaults: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """A fresh session's controls (keys prefix + name, their defaults given) take the URL's values, each parsed
    as its default's type: (the values taken, the refusal of each value that is not of its type). A value that
    is of its type but not among its control's options is dropped when the control is drawn: not_shown says so."""
    if any_kept(prefix):
        return {}, {}
    found, refused = _from_url({name: _kind(value) for name, value in defaults.items()})
    for name, value in found.items():
        set_kept(prefix + name, value)
    return found, refused


def not_shown(found: Mapping[str, Any], shown: Mapping[str, Any]) -> dict[str, str]:
    """The link's values (restore_controls) that the controls drawn do not show, as the link wrote them: a value
    (or a list's items) that its control does not offer."""
    unused = {}
    for name, value in found.items():
        if isinstance(value, list):
            value = [item for item in value if item not in shown.get(name, ())]
        if name in shown and value not in ([], shown[name]):
            unused[name] = _text(value)
    return unused


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_text(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def write_controls(values: Mapping[str, Any], defaults: Mapping[str, Any],
                   others: Mapping[str, str] | None = None) -> None:
    """Put the values that differ from their defaults, and others (the run name), in the URL (when they changed)."""
    link = {name: _text(value) for name, value in values.items() if name in defaults and value != defaults[name]}
    link.update(others or {})
    if link != st.query_params.to_dict():
        st.query_params.from_dict(link)


def write(values: dict[str, Any], defaults: RunConfig) -> None:
    """Put the settings that differ from the defaults, and the run name, in the URL (when they changed)."""
    name = st.session_state.get(NAME_KEY, "")
    set_kept(NAME_KEY, name)
    write_controls(values, {field: getattr(defaults, field) for field in _FIELDS}, {NAME: name} if name else {})
