"""Your own code named in a setting: `MODULE:FUNCTION` (a module on the Python path) or `FILE.py:FUNCTION`.

Shared by your model factories (the model field) and your data set functions (the dataset field). It
runs your code, in the server's process and in the run's worker: the dashboard listens on loopback only.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

from gaccum_core.config import ConfigError, first_line


def _import_file(field: str, value: str, where: str) -> ModuleType:
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(field, value, f"MODULE:FUNCTION or FILE.py:FUNCTION: there is no file {path}")
    # Keyed by the file's version too: the server's process sees an edited file on the next run.
    name = f"gaccum_usercode_{abs(hash((str(path), path.stat().st_mtime_ns)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        raise ConfigError(field, value, f"a file that imports: {first_line(exc)}") from None
    sys.modules[name] = module
    return module


def _import(field: str, value: str, where: str) -> ModuleType:
    if where.endswith(".py"):
        return _import_file(field, value, where)
    try:
        return importlib.import_module(where)
    except Exception as exc:  # ModuleNotFoundError, or the module's own error while importing
        raise ConfigError(field, value, f"an importable module: {first_line(exc)}") from None


def user_function(field: str, value: str) -> Callable:
    """The FUNCTION that the setting field=value ('MODULE:FUNCTION' or 'FILE.py:FUNCTION') names;
    ConfigError naming the field when it cannot be imported or is not there."""
    where, _, function = value.rpartition(":")
    found = getattr(_import(field, value, where), function, None)
    if not callable(found):
        raise ConfigError(field, value, f"a function {function} in {where}: there is none")
    return found


def call_user_function(field: str, value: str, purpose: str, **arguments: object) -> object:
    """user_function(field, value)(**arguments); what it raises becomes a ConfigError saying what it was for."""
    build = user_function(field, value)
    try:
        return build(**arguments)
    except Exception as exc:
        raise ConfigError(field, value, f"{purpose}: it raised {first_line(exc)}") from None
