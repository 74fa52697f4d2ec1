"""The environment variables a dashboard server reads (those the README documents), checked before it starts
anything: a value it cannot use is one line naming the variable, the value and what is allowed. Imports no
torch: the server checks them on its first page run, before its warm-up starts a worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gaccum_core.data.token_cache import CACHE_ENV
from gaccum_core.execution.spares import SPARE_IDLE_ENV, idle_limit
from gaccum_core.runsdir import RUNS_DIR_ENV
from gaccum_core.usercode import USER_CODE_ENV

EXECUTOR_ENV = "GACCUM_EXECUTOR"
EXECUTORS = ("process", "thread")  # where runs train (execution.executors uses this list); the default first


def _folder(name: str, value: str, exists: bool) -> str | None:
    """A folder's value: None when usable (one to be made when missing, unless exists), else what is wrong."""
    path = Path(value).expanduser()
    if path.is_dir() or (not exists and not path.exists()):
        return None
    made = "" if exists else " (made when missing)"
    return f"{name}={value!r} is not allowed: a folder{made}; {path} is {'a file' if path.exists() else 'missing'}"


def _spare_idle(value: str) -> str | None:
    try:
        idle_limit(value)
    except ValueError as exc:
        return str(exc)
    return None


def _executor(value: str) -> str | None:
    if value in EXECUTORS:
        return None
    return f"{EXECUTOR_ENV}={value!r} is not allowed: {' or '.join(EXECUTORS)} (unset: {EXECUTORS[0]})"


# Each variable, and what checks its value when it is set and not empty.
CHECKS: dict[str, Callable[[str], str | None]] = {
    RUNS_DIR_ENV: lambda value: _folder(RUNS_DIR_ENV, value, exists=False),
    CACHE_ENV: lambda value: _folder(CACHE_ENV, value, exists=False),
    USER_CODE_ENV: lambda value: _folder(USER_CODE_ENV, value.strip(), exists=True) if value.strip() else None,
    SPARE_IDLE_ENV: _spare_idle,
    EXECUTOR_ENV: _executor,
}


def env_problems() -> list[str]:
    """One line per variable set to a value the server cannot use; none when every one is usable or unset."""
    found = [check(os.environ[name]) for name, check in CHECKS.items() if os.environ.get(name)]
    return [line for line in found if line is not None]
