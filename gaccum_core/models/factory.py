"""`MODULE:FUNCTION` or `path/to/file.py:FUNCTION`: your own image classifier.

gaccum calls FUNCTION(input_shape=(C, H, W), num_classes=N) under the run's seed and trains what it
returns, an nn.Module mapping a (B, C, H, W) float batch to (B, N) logits. It runs your code, in the
server's process and in the run's worker: the dashboard listens on loopback only.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from torch import nn

from gaccum_core.config import ConfigError


def _import(model: str, where: str) -> ModuleType:
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ConfigError("model", model, f"MODULE:FUNCTION or FILE.py:FUNCTION: there is no file {path}")
        name = f"gaccum_factory_{abs(hash(str(path)))}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as exc:
            raise ConfigError("model", model, f"a file that imports: {_first_line(exc)}") from None
        sys.modules[name] = module
        return module
    try:
        return importlib.import_module(where)
    except Exception as exc:  # ModuleNotFoundError, or the module's own error while importing
        raise ConfigError("model", model, f"an importable module: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def build_factory_model(model: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Your FUNCTION's module for model 'MODULE:FUNCTION'; ConfigError naming what went wrong."""
    where, _, function = model.rpartition(":")
    build = getattr(_import(model, where), function, None)
    if not callable(build):
        raise ConfigError("model", model, f"a function {function} in {where}: there is none")
    try:
        net = build(input_shape=tuple(input_shape), num_classes=num_classes)
    except Exception as exc:
        raise ConfigError("model", model, f"a factory that builds a model for input_shape={tuple(input_shape)}, "
                          f"num_classes={num_classes}: it raised {_first_line(exc)}") from None
    if not isinstance(net, nn.Module):
        raise ConfigError("model", model, f"a factory returning an nn.Module: it returned a {type(net).__name__}")
    return net
