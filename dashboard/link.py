"""The Train page's settings in its URL, so that a reload (or a shared link) opens the page with them.

Streamlit's session state dies with a reload; the URL does not. Only the fields that differ from the
defaults are written (?model=mlp&lr=0.01&name=baseline). A fresh session reads them back, each parsed
by its field's type and validated by RunConfig itself; a value that cannot be used is left at its
default, and its ConfigError is returned for the page to show under the control.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import streamlit as st

from dashboard.state import any_kept, kept, set_kept
from gaccum_core.config import ConfigError, RunConfig, problems

NAME = "name"  # the query parameter of the run name
NAME_KEY = "run_name"  # the page's run-name box, kept across page switches
_FIELDS = {f.name: f.type if isinstance(f.type, str) else f.type.__name__ for f in dataclasses.fields(RunConfig)}


def _parse(field: str, text: str) -> Any:
    """A query parameter's text as its field's type; ConfigError naming the field if it is not one."""
    kind = _FIELDS[field]
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


def _read(defaults: RunConfig, devices: Sequence[str]) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """The URL's settings that can be used, and the refusal of each one that cannot."""
    found, refused = {}, {}
    for field, text in st.query_params.to_dict().items():
        if field not in _FIELDS:
            continue  # not a setting (the run name, or a parameter of someone else's)
        try:
            found[field] = _parse(field, text)
        except ConfigError as exc:
            refused[field] = exc
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


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def write(values: dict[str, Any], defaults: RunConfig) -> None:
    """Put the settings that differ from the defaults, and the run name, in the URL (when they changed)."""
    link = {field: _text(value) for field, value in values.items()
            if field in _FIELDS and value != getattr(defaults, field)}
    name = st.session_state.get(NAME_KEY, "")
    set_kept(NAME_KEY, name)
    if name:
        link[NAME] = name
    if link != st.query_params.to_dict():
        st.query_params.from_dict(link)
