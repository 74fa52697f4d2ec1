"""Where runs are kept, one rule for the command line, the dashboard's server and the token cache beside the
runs: --runs-dir, else GACCUM_RUNS_DIR, else ./runs. A run started from either is seen by the other."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUNS_DIR_ENV = "GACCUM_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"
RUNS_DIR_HELP = (f"directory that holds one folder per run (default: ${RUNS_DIR_ENV} if set, else "
                 f"./{DEFAULT_RUNS_DIR}; the dashboard reads the same)")


def runs_dir(flag: str | None = None) -> str:
    """The runs directory: `flag` (--runs-dir) when given, else GACCUM_RUNS_DIR when set and not empty, else 'runs'."""
    return flag or os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR


@contextmanager
def exported(runs: str | None) -> Iterator[None]:
    """GACCUM_RUNS_DIR set to a command's runs directory (absolute) while it runs, then put back: what it runs in
    this process and the processes it starts (workers, torchrun's ranks) find the runs directory, and the token
    cache beside it, as the command does. None: nothing changes (a command without --runs-dir)."""
    before = os.environ.get(RUNS_DIR_ENV)
    if runs is not None:
        os.environ[RUNS_DIR_ENV] = str(Path(runs).expanduser().absolute())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RUNS_DIR_ENV, None)
        else:
            os.environ[RUNS_DIR_ENV] = before
