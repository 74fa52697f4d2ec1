"""Your loop as verify takes it: the file's setup/window/objective functions, and the batch it splits.

A batch is a dict of tensors whose first dimension counts the samples, or a list of samples; a micro-batch
is the same kind holding some consecutive samples.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import torch

from gaccum_core.config import ConfigError
from gaccum_core.usercode import user_function
from gaccum_core.words import first_line

Batch = Mapping[str, torch.Tensor] | list  # a dict of tensors (first dimension: samples) or a list of samples
OBJECTIVE = "objective"  # the optional objective's name when none is asked for


class VerifyError(ValueError):
    """Input verify refuses, in one line: what (and its value), and what is allowed."""


@dataclass(frozen=True)
class Loop:
    """The functions of your file: setup() -> (model, batch), window(model, micro_batches), objective or None."""

    setup: Callable[[], tuple[torch.nn.Module, Batch]]
    window: Callable[..., Any]
    objective: Callable[[torch.nn.Module, Batch], torch.Tensor] | None = None
    path: str = ""


def load_loop(path: str, setup: str = "setup", window: str = "window", objective: str = OBJECTIVE) -> Loop:
    """Import your file (as whoever runs the command runs it) and return its functions; objective is optional."""
    if not str(path).endswith(".py"):
        raise VerifyError(f"file={str(path)!r} is not allowed: a Python file (FILE.py) defining {setup} and {window}")
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ beside your file
    try:
        functions = {role: _function(path, role, name) for role, name in (("setup", setup), ("window", window))}
        try:
            wanted = user_function("objective", f"{path}:{objective}")
        except ConfigError:  # none by that name: the loop is checked without an objective
            wanted = None
    finally:
        sys.dont_write_bytecode = writes
    return Loop(functions["setup"], functions["window"], wanted, str(path))


def _function(path: str, role: str, name: str) -> Callable:
    try:
        return user_function(role, f"{path}:{name}")
    except ConfigError as exc:
        raise VerifyError(str(exc)) from None


def call_setup(loop: Loop) -> tuple[torch.nn.Module, Batch]:
    """setup()'s (model, batch); VerifyError when it raises or returns something else."""
    try:
        made = loop.setup()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - your code's error, said in one line
        raise VerifyError(f"setup in {loop.path} raised {first_line(exc)}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise VerifyError(f"setup in {loop.path} returned {type(made).__name__}: (model, batch) is allowed, "
                          "an nn.Module and its batch")
    return made


def batch_size(batch: Batch) -> int:
    """The number of samples in the batch; VerifyError when it is not a batch verify can split."""
    if isinstance(batch, list):
        sizes = {"the list": len(batch)}
    elif isinstance(batch, Mapping):
        wrong = [key for key, value in batch.items() if not (torch.is_tensor(value) and value.dim() > 0)]
        if wrong or not batch:
            raise VerifyError(f"batch[{wrong[0]!r}] is not allowed: a tensor whose first dimension counts samples"
                              if wrong else "batch={} is not allowed: a dict of tensors or a list of samples")
        sizes = {key: len(value) for key, value in batch.items()}
    else:
        raise VerifyError(f"batch of type {type(batch).__name__} is not allowed: a dict of tensors (first dimension "
                          "= samples) or a list of samples")
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"{key}: {size}" for key, size in sizes.items())
        raise VerifyError(f"batch with tensors of unequal first dimension ({shown}) is not allowed: every tensor "
                          "holds the same samples")
    samples = next(iter(sizes.values()))
    if samples < 2:
        raise VerifyError(f"batch of {samples} sample{'' if samples == 1 else 's'} is not allowed: at least 2, "
                          "so that it can be split")
    return samples


def split_batch(batch: Batch, sizes: tuple[int, ...]) -> list[Batch]:
    """The batch as consecutive micro-batches of these sizes (they add up to its samples)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    if isinstance(batch, list):
        return [batch[start:start + size] for start, size in zip(starts, sizes)]
    return [{key: value[start:start + size] for key, value in batch.items()} for start, size in zip(starts, sizes)]


def to_device(model: torch.nn.Module, batch: Batch, device: torch.device | None) -> Batch:
    """The model moved to device (in place) and the batch's tensors with it; a list batch is passed as it is."""
    if device is None:
        return batch
    model.to(device)
    return batch if isinstance(batch, list) else {key: value.to(device) for key, value in batch.items()}
